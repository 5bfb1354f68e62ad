package format

import (
	"encoding/binary"
)

// The syscall log (SYSCL) of version 2 is a stream of varints (FORMAT.md,
// "SYSCL"): a syscall-heavy program makes hundreds of thousands of calls in a
// window, and most of a record repeats the previous call of the same number
// (the same buffer, the same return value, the same call site, argument
// registers the call does not read). Each record stores its sequence number
// and tid as differences from the previous record, and its six arguments,
// return value and rip as a bit mask of the ones that differ from the
// previous record with the same syscall number followed by the differences.
// The encoding is lossless and needs no syscall table: a value the call does
// not use costs nothing as long as it does not change (the recorder zeroes
// them). Output data is stored as is, except (version 3) an output of 8 or
// 16 bytes whose predecessor at the same position of that previous record
// had the same length: its 64-bit words are stored as differences. Those are
// the time values of clock_gettime and gettimeofday, half the calls of a
// busy server, whose words move by a few thousand between calls. The whole
// stream is then compressed.

// Smallest encoded sizes in the version 2 log, to bound counts.
const (
	minSyscallV2 = 6     // seq, tid, nr, mask, output count, page count
	minOutBufV2  = 1 + 1 // address difference, length
)

// syscallPrev is what a record is compared with: the previous record with the
// same syscall number (zeros for the first one).
type syscallPrev struct {
	vals [8]uint64 // args[0..5], ret, rip
	outs []uint64  // output addresses, by position
	data [][]byte  // output data, by position
}

// wordDelta reports whether output j of length n is stored as word
// differences from the same output of p (version 3).
func (p *syscallPrev) wordDelta(j, n int) bool {
	return (n == 8 || n == 16) && j < len(p.data) && len(p.data[j]) == n
}

// remember makes s the record the next one with its number is compared with.
func (p *syscallPrev) remember(s *Syscall) {
	p.outs, p.data = p.outs[:0], p.data[:0]
	for _, o := range s.Out {
		p.outs = append(p.outs, o.Addr)
		p.data = append(p.data, o.Data)
	}
}

func syscallVals(s *Syscall) [8]uint64 {
	return [8]uint64{s.Args[0], s.Args[1], s.Args[2], s.Args[3], s.Args[4], s.Args[5], uint64(s.Ret), s.Rip}
}

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

// svarint stores a difference: zigzag, then uvarint (binary.AppendVarint).
func (e *enc) svarint(v uint64) { e.b = binary.AppendVarint(e.b, int64(v)) }

func (d *dec) uvarint(what string) uint64 { return d.varint(what, binary.Uvarint) }

// svarint reads a zig-zag varint (a signed difference), as raw bits.
func (d *dec) svarint(what string) uint64 {
	return d.varint(what, func(b []byte) (uint64, int) {
		v, n := binary.Varint(b)
		return uint64(v), n
	})
}

func (d *dec) varint(what string, read func([]byte) (uint64, int)) uint64 {
	if d.fail != nil {
		return 0
	}
	v, n := read(d.b[d.off:])
	switch {
	case n == 0:
		d.failf("%s: varint truncated", what)
		return 0
	case n < 0:
		d.failf("%s: varint overflows 64 bits", what)
		return 0
	}
	d.off += n
	return v
}

// ucount reads a uvarint element count and checks that count elements of at
// least minSize bytes each fit in what remains.
func (d *dec) ucount(what string, minSize int) int {
	at := d.off
	n := d.uvarint(what + " count")
	if d.fail != nil {
		return 0
	}
	if n > uint64(d.remaining())/uint64(minSize) {
		d.off = at
		d.failf("%s count %d does not fit in the %d bytes left", what, n, d.remaining())
		return 0
	}
	return int(n)
}

// MaxSyscalls bounds the records of one checkpoint's log. A repeated call
// costs a few bytes and lz4 shrinks a run of them to almost nothing, so the
// size of a file alone does not bound the memory its log decodes to (about
// 140 bytes a record); this does (about 1 GiB). The recorder keeps its
// checkpoints under it by dropping the oldest intervals.
const MaxSyscalls = 8 << 20

// decodeSyscallsV2 reads the log of versions 2 and 3: one stream of
// records, each compared with the previous record of the same number
// (FORMAT.md, version history).
func decodeSyscallsV2(d *dec, major uint16) []Syscall {
	at := d.off
	n := d.ucount("syscall", minSyscallV2)
	if n > MaxSyscalls {
		d.off = at
		d.failf("%d syscall records, more than a checkpoint may hold (%d)", n, MaxSyscalls)
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]Syscall, n)
	var seq, tid uint64
	prev := map[int]*syscallPrev{}
	for i := range out {
		s := &out[i]
		seq += d.uvarint("sequence number difference")
		tid += d.svarint("tid difference")
		nr := d.svarint("syscall number")
		s.Seq, s.Tid, s.Nr = seq, int(int64(tid)), int(int64(nr))
		p := prev[s.Nr]
		if p == nil {
			p = &syscallPrev{}
			prev[s.Nr] = p
		}
		mask := d.u8("changed-value mask")
		for k := range p.vals {
			if mask&(1<<k) != 0 {
				p.vals[k] += d.svarint("value difference")
			}
		}
		copy(s.Args[:], p.vals[:6])
		s.Ret, s.Rip = int64(p.vals[6]), p.vals[7]
		if no := d.ucount("output buffer", minOutBufV2); no > 0 {
			s.Out = make([]OutBuf, no)
			for j := range s.Out {
				var ref uint64
				if j < len(p.outs) {
					ref = p.outs[j]
				}
				s.Out[j].Addr = ref + d.svarint("output address difference")
				at := d.off
				k := d.uvarint("output data length")
				switch {
				case d.fail != nil:
				case major >= 3 && k <= 16 && p.wordDelta(j, int(k)):
					data := make([]byte, k)
					for w := 0; w < int(k); w += 8 {
						binary.LittleEndian.PutUint64(data[w:], le64(p.data[j][w:])+d.svarint("output word difference"))
					}
					s.Out[j].Data = data
				case k > uint64(d.remaining()):
					d.off = at
					d.failf("output data length %d does not fit in the %d bytes left", k, d.remaining())
				case k > 0:
					s.Out[j].Data = append([]byte(nil), d.take(int(k), "output data")...)
				}
			}
		}
		p.remember(s)
		if np := d.ucount("mapped file page", pageRefSize); np > 0 {
			s.Pages = make([]PageRef, np)
			for j := range s.Pages {
				s.Pages[j].Addr = d.u64("mapped file page address")
				s.Pages[j].Hash = d.hash("mapped file page hash")
			}
		}
		if d.fail != nil {
			return nil
		}
	}
	return out
}
