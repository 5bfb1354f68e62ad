package format

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/tprec/tprec/internal/parallel"
)

// A packed payload is a byte string cut into chunks of packChunk bytes, each
// compressed on its own, or stored as is when compression does not make it
// smaller (FORMAT.md, "Packed payloads"). The syscall log is packed: the
// buffers that read(2) and friends returned dominate a checkpoint's size.
// Page blocks are compressed the same way.
//
// Which compressor a file uses is a file-header flag: version 2.0 files hold
// lz4 blocks; from version 2.1 the writer sets FlagZstd and every compressed
// chunk and page block is one zstd frame, about 1.6 times smaller than lz4's
// on redis and gzip checkpoints even at zstd's fastest level (FORMAT.md, "Why
// zstd"); the writer uses higher levels (smallUpTo).

// Bounds on how many bytes one compressed byte can stand for, which a reader
// checks before allocating for a chunk. An lz4 sequence spends one byte per
// 255 bytes of match length, so no lz4 block expands beyond about 255 times
// its size. A zstd block regenerates at most 128 KiB and takes at least 4
// bytes (a 3-byte block header and an RLE byte), so no zstd frame expands
// beyond 32768 times its size.
const (
	lz4MaxRatio  = 256
	zstdMaxRatio = 32768
)

// codec compresses and decompresses the chunks of one file.
type codec struct {
	zstd bool
	lz   lz4.Compressor
	// small compresses payloads of up to smallUpTo bytes, large larger ones.
	small, large *zstd.Encoder
}

// smallUpTo is the largest payload (a syscall log, the page store) the
// writer compresses at zstd's "better" level; larger payloads (the 80 MB of
// text a gzip read in its window) take the default level, which there cost
// about as much as the fastest and saved 9%. Re-encoding one redis-server
// checkpoint of 2 s (11.4 MiB of log, 2,541 pages; by hand, two rounds):
//
//	level    log        pages       CPU
//	fastest  1,036 KB   2,010 KB    0.24-0.30 s
//	default    948 KB   1,920 KB    0.23-0.34 s
//	better     882 KB   1,851 KB    0.29-0.41 s
//	best       849 KB   1,751 KB    0.78-0.91 s
//
// The best level, used up to format 5.1's first writers, makes that file
// 5% smaller than "better" for three times the CPU: half a second of a
// dump on two CPUs, taken from whatever else runs there (a target that
// goes on after a requested dump, the trial replay).
const smallUpTo = 32 << 20

// zstdDecoder is shared by every reader: DecodeAll is safe for concurrent use.
var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(maxBlockRaw+maxPackChunk))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
})

func newWriterCodec() *codec {
	enc := func(level zstd.EncoderLevel) *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	}
	return &codec{zstd: true, small: enc(zstd.SpeedBetterCompression), large: enc(zstd.SpeedDefault)}
}

func (c *codec) maxRatio() uint64 {
	if c.zstd {
		return zstdMaxRatio
	}
	return lz4MaxRatio
}

// compress returns src compressed with enc (zstd), or nil when that would
// not be smaller than src (the caller then stores src).
func (c *codec) compress(enc *zstd.Encoder, src []byte) []byte {
	if c.zstd {
		z := enc.EncodeAll(src, make([]byte, 0, len(src)/2))
		if len(z) == 0 || len(z) >= len(src) {
			return nil
		}
		return z
	}
	dst := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := c.lz.CompressBlock(src, dst)
	if err != nil || n == 0 || n >= len(src) {
		return nil
	}
	return dst[:n]
}

// compressEach calls do for each of the n chunks of a payload of total
// bytes with the function that compresses one (compress), side by side on
// the CPUs for zstd, whose EncodeAll is safe for concurrent use.
func (c *codec) compressEach(n, total int, do func(i int, compress func([]byte) []byte)) {
	if !c.zstd {
		for i := range n {
			do(i, func(src []byte) []byte { return c.compress(nil, src) })
		}
		return
	}
	enc := c.small
	if total > smallUpTo {
		enc = c.large
	}
	parallel.Each(n, func(i int) error {
		do(i, func(src []byte) []byte { return c.compress(enc, src) })
		return nil
	})
}

// decompress fills dst, exactly, from z.
func (c *codec) decompress(z, dst []byte) error {
	if c.zstd {
		got, err := zstdDecoder().DecodeAll(z, dst[:0:len(dst)])
		switch {
		case err != nil:
			return err
		case len(got) != len(dst):
			return fmt.Errorf("got %d bytes", len(got))
		case &got[0] != &dst[0]:
			copy(dst, got) // the decoder had to grow the buffer: cannot happen with the exact size, kept for safety
		}
		return nil
	}
	got, err := lz4.UncompressBlock(z, dst)
	if err != nil {
		return err
	}
	if got != len(dst) {
		return fmt.Errorf("got %d bytes", got)
	}
	return nil
}

// pack appends the packed form of raw to e.
func pack(e *enc, c *codec, raw []byte) {
	var p pieces
	p.add(raw)
	packPieces(e, c, p)
}

// packPieces appends the packed form of the bytes p holds to e. A chunk
// that lies within one piece is compressed where it is; one that spans
// pieces is gathered first, into a buffer reused for the next such chunk.
func packPieces(e *enc, c *codec, p pieces) {
	e.u64(uint64(p.n))
	e.u32(packChunk)
	n := (p.n + packChunk - 1) / packChunk
	out := make([][]byte, n)
	// At most one buffer per CPU: a sync.Pool, emptied by every collection
	// (frequent while a dump's memory grows), made most chunks a fresh MiB.
	bufs := make(chan []byte, runtime.GOMAXPROCS(0))
	c.compressEach(n, p.n, func(i int, compress func([]byte) []byte) {
		off := i * packChunk
		src, whole := p.slice(off, min(packChunk, p.n-off))
		var buf []byte
		if !whole {
			select {
			case buf = <-bufs:
			default:
				buf = make([]byte, packChunk)
			}
			src = p.gather(off, buf[:min(packChunk, p.n-off)])
		}
		if out[i] = compress(src); out[i] == nil {
			out[i] = src
			if buf != nil {
				out[i] = append([]byte(nil), src...) // stored as is, the buffer reused
			}
		}
		if buf != nil {
			select {
			case bufs <- buf:
			default:
			}
		}
	})
	for _, z := range out {
		e.bytes(z)
	}
}

// pieces are byte slices that stand for their concatenation, n bytes.
type pieces struct {
	list [][]byte
	at   []int // at[i] is the offset of list[i]
	n    int
}

func (p *pieces) add(b []byte) {
	if len(b) == 0 {
		return
	}
	p.list = append(p.list, b)
	p.at = append(p.at, p.n)
	p.n += len(b)
}

// find returns the piece that holds offset off (< p.n).
func (p *pieces) find(off int) int {
	i, found := slices.BinarySearch(p.at, off)
	if !found {
		i--
	}
	return i
}

// slice returns the n bytes at off and true when one piece holds them all.
func (p *pieces) slice(off, n int) ([]byte, bool) {
	i := p.find(off)
	if rel := off - p.at[i]; rel+n <= len(p.list[i]) {
		return p.list[i][rel : rel+n : rel+n], true
	}
	return nil, false
}

// gather copies the len(dst) bytes at off into dst and returns it.
func (p *pieces) gather(off int, dst []byte) []byte {
	got := 0
	for i := p.find(off); got < len(dst); i++ {
		got += copy(dst[got:], p.list[i][off+got-p.at[i]:])
	}
	return dst
}

// join returns the bytes in one slice.
func (p pieces) join() []byte {
	out := make([]byte, 0, p.n)
	for _, b := range p.list {
		out = append(out, b...)
	}
	return out
}

// blockBuf collects bytes in blocks, each twice the size of the one before
// up to blockBufSize: unlike a slice that grows, it never copies what it
// holds, and touches little more memory than its bytes fill (a small log,
// which the recorder packs while recording, takes small blocks).
type blockBuf struct {
	blocks [][]byte
	n      int
}

const blockBufSize = 256 << 10

func (b *blockBuf) write(p []byte) {
	b.n += len(p)
	for len(p) > 0 {
		k := len(b.blocks) - 1
		if k < 0 || len(b.blocks[k]) == cap(b.blocks[k]) {
			size := 4096
			if k >= 0 {
				size = min(2*cap(b.blocks[k]), blockBufSize)
			}
			b.blocks = append(b.blocks, make([]byte, 0, size))
			k++
		}
		m := min(len(p), cap(b.blocks[k])-len(b.blocks[k]))
		b.blocks[k] = append(b.blocks[k], p[:m]...)
		p = p[m:]
	}
}

// unpack reads a packed payload that fills the rest of d and returns the raw
// bytes. It allocates at most c.maxRatio() times the bytes it was given.
func unpack(d *dec, c *codec) []byte {
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
	if rawLen > uint64(len(d.b))*c.maxRatio() || nChunks*5 > uint64(d.remaining()) {
		d.off = start
		d.failf("packed raw length %d impossible for a %d-byte payload", rawLen, len(d.b)-start)
		return nil
	}
	// The chunks' sizes are checked first, each against what its compressed
	// bytes can hold: rawLen is not trusted before the chunks hold it.
	// Then the whole payload is allocated once and each chunk decompressed
	// into its place, side by side on the CPUs: chunks decompressed into
	// buffers of their own and then joined were copied over and over (1.7
	// s of a 2.2 s load for a python3 log that unpacks to 175 MB, when the
	// buffer grew), and even joined once the copy and the fresh memory it
	// touched were a third of a redis file's load.
	type chunkAt struct {
		z        []byte
		off, raw uint64
		at       int // offset in d, for errors
	}
	var chunks []chunkAt
	var off uint64
	for left := rawLen; left > 0; {
		want := min(left, uint64(chunk))
		at := d.off
		n := d.count("packed chunk", 1)
		z := d.take(n, "packed chunk")
		if d.fail != nil {
			return nil
		}
		switch {
		case uint64(n) > want || n == 0:
			d.off = at
			d.failf("packed chunk of %d bytes for %d raw bytes", n, want)
			return nil
		case uint64(n) < want && want > uint64(n)*c.maxRatio():
			d.off = at
			d.failf("packed chunk of %d bytes cannot hold %d raw bytes", n, want)
			return nil
		}
		chunks = append(chunks, chunkAt{z, off, want, at})
		off += want
		left -= want
	}
	if len(chunks) == 1 && uint64(len(chunks[0].z)) == rawLen {
		return chunks[0].z
	}
	out := make([]byte, rawLen)
	failed := make([]error, len(chunks))
	parallel.Each(len(chunks), func(i int) error {
		ch := chunks[i]
		dst := out[ch.off : ch.off+ch.raw]
		if uint64(len(ch.z)) == ch.raw {
			copy(dst, ch.z)
		} else {
			failed[i] = c.decompress(ch.z, dst)
		}
		return nil
	})
	for i, err := range failed {
		if err != nil {
			d.off = chunks[i].at
			d.failf("packed chunk does not decompress to %d bytes: %v", chunks[i].raw, err)
			return nil
		}
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
