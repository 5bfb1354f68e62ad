package format

import (
	"encoding/binary"
	"fmt"

	"github.com/pierrec/lz4/v4"
)

// A packed payload is a byte string cut into chunks of packChunk bytes, each
// compressed on its own as an lz4 block, or stored as is when lz4 does not make
// it smaller (FORMAT.md, "Packed payloads"). The syscall log is packed: the
// buffers that read(2) and friends returned dominate a checkpoint's size.

// lz4MaxRatio bounds how many bytes one compressed byte can stand for: an lz4
// sequence spends one byte per 255 bytes of match length, so no valid block
// expands beyond about 255 times its size. A reader uses it to refuse a chunk
// that claims more before allocating for it.
const lz4MaxRatio = 256

// compressLZ4 compresses src with lz4's block format. It returns nil when the
// result would not be smaller than src (the caller then stores src).
func compressLZ4(c *lz4.Compressor, src []byte) []byte {
	dst := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := c.CompressBlock(src, dst)
	if err != nil || n == 0 || n >= len(src) {
		return nil
	}
	return dst[:n]
}

// pack appends the packed form of raw to e.
func pack(e *enc, c *lz4.Compressor, raw []byte) {
	e.u64(uint64(len(raw)))
	e.u32(packChunk)
	for off := 0; off < len(raw); off += packChunk {
		chunk := raw[off:min(off+packChunk, len(raw))]
		if z := compressLZ4(c, chunk); z != nil {
			e.bytes(z)
		} else {
			e.bytes(chunk)
		}
	}
}

// unpack reads a packed payload that fills the rest of d and returns the raw
// bytes. It allocates at most lz4MaxRatio times the bytes it was given.
func unpack(d *dec) []byte {
	start := d.off
	rawLen := d.u64("packed raw length")
	chunk := d.u32("packed chunk size")
	if d.fail != nil {
		return nil
	}
	if chunk < PageSize || chunk > maxPackChunk {
		d.off -= 4
		d.failf("packed chunk size %d outside [%d, %d]", chunk, PageSize, maxPackChunk)
		return nil
	}
	nChunks := (rawLen + uint64(chunk) - 1) / uint64(chunk)
	if rawLen > uint64(len(d.b))*lz4MaxRatio || nChunks*5 > uint64(d.remaining()) {
		d.off = start
		d.failf("packed raw length %d impossible for a %d-byte payload", rawLen, len(d.b)-start)
		return nil
	}
	out := make([]byte, 0, min(rawLen, uint64(d.remaining())*4))
	for left := rawLen; left > 0; {
		want := min(left, uint64(chunk))
		at := d.off
		n := d.count("packed chunk", 1)
		z := d.take(n, "packed chunk")
		if d.fail != nil {
			return nil
		}
		switch {
		case uint64(n) == want:
			out = append(out, z...)
		case uint64(n) > want || n == 0:
			d.off = at
			d.failf("packed chunk of %d bytes for %d raw bytes", n, want)
			return nil
		default:
			if want > uint64(n)*lz4MaxRatio {
				d.off = at
				d.failf("packed chunk of %d bytes cannot hold %d raw bytes", n, want)
				return nil
			}
			out = append(out, make([]byte, want)...)
			dst := out[len(out)-int(want):]
			got, err := lz4.UncompressBlock(z, dst)
			if err != nil || uint64(got) != want {
				d.off = at
				d.failf("packed chunk does not decompress to %d bytes: %v", want, errOr(err, fmt.Sprintf("got %d", got)))
				return nil
			}
		}
		left -= want
	}
	return out
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// le32 reads a little-endian uint32 (used where a dec would be overkill).
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// le64 reads a little-endian uint64.
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
