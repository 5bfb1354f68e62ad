package format

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"iter"
	"slices"

	"github.com/tprec/tprec/internal/prefault"
)

// The syscall log of version 4 keeps the record model of versions 2 and 3
// (differences from an earlier record, a mask of the values that changed)
// with two changes, each measured on a redis-server checkpoint (FORMAT.md,
// "SYSCL"):
//
//   - A record is compared with the previous record with the same number
//     and the same first argument, when that argument is below keyedArg (a
//     file descriptor, a clock id): the read on a client's socket is compared
//     with the last read on that socket, whose buffer, length and call site it
//     repeats, not with the last read on any socket. The first argument
//     itself is still compared with the previous record of the same number.
//   - The fields are written to separate streams (the record heads, each of
//     the eight values, the output addresses and lengths, the time words and
//     the output bytes of each syscall number, the mapped-file pages), laid
//     end to end before compression: a compressor's statistics then describe
//     one kind of field at a time, not a mixture of varints and text.
//
// On one redis checkpoint (633,000 calls) the log went from 1.44 MB to
// 0.92 MB packed.
//
// Version 5 adds one bit to each output's length: set, the output holds the
// same bytes as the compared record's output at its position, and they are
// not stored again. A program that reads the same data over and over (a
// file it rereads, the same events from epoll_wait, dd reading /dev/zero)
// logged them once per call; packing a quarter second of dd in the ring
// copied and compressed 51 MB of zeros, most of what the packing cost.

// keyedArg bounds the first arguments that key the model: small integers
// (descriptors, clock ids) do, pointers (futex words, mapping addresses) do
// not, which also bounds the decoder's table.
const keyedArg = 1 << 16

// Stream kinds of the version 4 log.
const (
	streamHead   = 1 // per record: seq, tid, nr, mask, output count, page count
	streamValue  = 2 // key k (0-7): differences of value k
	streamOutput = 3 // per output: address difference, length
	streamWords  = 4 // key nr: word differences of time values
	streamData   = 5 // key nr: output bytes
	streamPages  = 6 // per mapped-file page: address, hash
)

type streamID struct {
	kind uint64
	key  int64
}

func (s streamID) String() string {
	names := map[uint64]string{streamHead: "record heads", streamValue: "value", streamOutput: "outputs",
		streamWords: "time words", streamData: "output data", streamPages: "mapped-file pages"}
	name := names[s.kind]
	switch s.kind {
	case streamValue:
		return fmt.Sprintf("%s %d stream", name, s.key)
	case streamWords, streamData:
		return fmt.Sprintf("%s stream of syscall %d", name, s.key)
	}
	return name + " stream"
}

// Smallest encoded sizes in the version 4 streams, to bound counts.
const (
	minHead4   = 6     // seq, tid, nr, mask, output count, page count
	minOutput4 = 1 + 1 // address difference, length
)

// logModel finds the records a record is compared with: the previous one
// with its number, and the previous one with its number and first argument.
// It keeps pointers to the records, which stay where they are (a slice
// being written or decoded). A record's slots are looked up once (slots)
// and serve the comparison, the repeated outputs and note.
type logModel struct {
	major uint16
	low   [modelLowNr]*modelSlot // by number, for small numbers
	byNr  map[int]*modelSlot     // ... for the others
	byKey map[int64]*modelSlot   // by number and first argument (modelKey)
}

// modelSlot holds the last record of a number, or of a number and first
// argument, and the last bytes each output position had when it had any
// (version 6: what a repeated output repeats, lastData).
type modelSlot struct {
	rec    *Syscall
	out    [][]byte
	hasOut bool // a record with outputs was noted here
}

// modelLowNr bounds the syscall numbers the model looks up in an array
// rather than a map (x86-64 numbers are below 512).
const modelLowNr = 1024

// modelKey packs a number and a first argument below keyedArg into one key.
func modelKey(nr int, a0 uint64) int64 { return int64(nr)<<16 | int64(a0) }

var zeroSyscall Syscall

// newLogModel is the model of a log of format version major. The records
// it is handed must not move or change while it is used: copying each
// would cost as much as the rest of its encoding (the write of a
// redis-server checkpoint's 600,000 calls spent a quarter of its log's
// time there when it did, most of it in the collector's write barriers).
func newLogModel(major uint16) *logModel {
	return &logModel{major: major, byNr: map[int]*modelSlot{}, byKey: map[int64]*modelSlot{}}
}

// number is the slot of number nr.
func (m *logModel) number(nr int) *modelSlot {
	if uint(nr) < modelLowNr {
		if m.low[nr] == nil {
			m.low[nr] = &modelSlot{}
		}
		return m.low[nr]
	}
	return slotIn(m.byNr, nr)
}

// keyed is the slot of number nr and first argument a0, nil when a0 keys
// nothing (keyedArg).
func (m *logModel) keyed(nr int, a0 uint64) *modelSlot {
	if a0 >= keyedArg {
		return nil
	}
	return m.keySlot(modelKey(nr, a0))
}

func (m *logModel) keySlot(k int64) *modelSlot { return slotIn(m.byKey, k) }

// slotIn returns the slot of k in slots, made when missing.
func slotIn[K comparable](slots map[K]*modelSlot, k K) *modelSlot {
	p := slots[k]
	if p == nil {
		p = &modelSlot{}
		slots[k] = p
	}
	return p
}

// compared returns the records a record with slots num and key is compared
// with: by number, and by descriptor (by number when key has none); the
// zero record where there is none.
func compared(num, key *modelSlot) (pn, pk *Syscall) {
	pn = &zeroSyscall
	if num.rec != nil {
		pn = num.rec
	}
	pk = pn
	if key != nil && key.rec != nil {
		pk = key.rec
	}
	return pn, pk
}

// outSlot is the slot whose output bytes stand for number nr's (num's).
// Version 6 kept them under the key of the number and keyedArg, which is
// the key of number nr|1 and first argument 0: shared by two numbers, and
// with the calls of the odd one on descriptor 0 (FORMAT.md, 7.0). A
// version 6 log is read as it was written.
func (m *logModel) outSlot(nr int, num *modelSlot) *modelSlot {
	if m.major == 6 {
		return m.keySlot(modelKey(nr|1, 0))
	}
	return num
}

// lastData is what output j of a record with number nr and slots num and
// key repeats when its repeat bit is set (version 6 on): the last non-empty
// bytes of output j of the records with that number and first argument, if
// any had outputs, else of the records with that number. A program that
// reads a file to its end reads data, then nothing, on the same descriptor:
// the record compared with is the empty read, the data the one before.
func (m *logModel) lastData(nr int, num, key *modelSlot, j int) []byte {
	var l [][]byte
	if key != nil && key.hasOut {
		l = key.out
	} else {
		l = m.outSlot(nr, num).out
	}
	if j < len(l) {
		return l[j]
	}
	return nil
}

// note makes s, whose slots are num and key, the record later records are
// compared with, and records its non-empty outputs for lastData.
func (m *logModel) note(s *Syscall, num, key *modelSlot) {
	if len(s.Out) > 0 {
		noteOutputs(m.outSlot(s.Nr, num), s)
		if key != nil {
			noteOutputs(key, s)
		}
	}
	num.rec = s
	if key != nil {
		key.rec = s
	}
}

// noteOutputs records s's non-empty outputs in p.
func noteOutputs(p *modelSlot, s *Syscall) {
	p.hasOut = true
	for len(p.out) < len(s.Out) {
		p.out = append(p.out, nil)
	}
	for j, o := range s.Out {
		if len(o.Data) > 0 {
			p.out[j] = o.Data
		}
	}
}

// timeWords reports whether output j of s, of n bytes, is stored as word
// differences from output j of p: 8 or 16 bytes after an output of the
// same length.
func timeWords(p *Syscall, j, n int) bool {
	return (n == 8 || n == 16) && j < len(p.Out) && len(p.Out[j].Data) == n
}

func encodeSyscalls(z *codec, calls []Syscall) []byte {
	var e enc
	packPieces(&e, z, encodeSyscallPieces(len(calls), slicePointers(calls)))
	return e.b
}

// slicePointers yields a pointer to each record of calls, in order.
func slicePointers(calls []Syscall) iter.Seq[*Syscall] {
	return func(yield func(*Syscall) bool) {
		for i := range calls {
			if !yield(&calls[i]) {
				return
			}
		}
	}
}

// encodeSyscallsRaw is the log before compression: the n records calls
// yields, which must not move or change while it runs (each is its own
// variable, as in a slice).
func encodeSyscallsRaw(n int, calls iter.Seq[*Syscall]) []byte {
	return encodeSyscallPieces(n, calls).join()
}

// encodeSyscallPieces is encodeSyscallsRaw as the pieces that make it up,
// in order, which the packing compresses without joining them first: a
// redis-server window of 876,000 calls is an 18.6 MB log, which joined
// was as much fresh memory again (12 us a page on this project's VM).
func encodeSyscallPieces(n int, calls iter.Seq[*Syscall]) pieces {
	streams := map[streamID]*enc{}
	st := func(kind uint64, key int64) *enc {
		id := streamID{kind, key}
		e := streams[id]
		if e == nil {
			e = &enc{}
			streams[id] = e
		}
		return e
	}
	// The streams every record may use, looked up once; the per-number ones
	// once per record with outputs.
	head, out, pages := st(streamHead, 0), st(streamOutput, 0), st(streamPages, 0)
	head.b = make([]byte, 0, 8*n)
	var values [8]*enc
	for k := range values {
		values[k] = st(streamValue, int64(k))
	}
	// Output bytes are copied into blocks as they come (blockBuf): a list
	// of the slices themselves, 24 bytes for each read's few dozen, grew to
	// twice the bytes it pointed to.
	data := map[int64]*blockBuf{}
	type perNr struct {
		words *enc
		data  *blockBuf
	}
	byNr := map[int]perNr{}
	m := newLogModel(VersionMajor)
	var seq, tid uint64
	count := 0
	for s := range calls {
		count++
		head.uvarint(s.Seq - seq)
		head.svarint(uint64(s.Tid) - tid)
		head.svarint(uint64(s.Nr))
		seq, tid = s.Seq, uint64(s.Tid)
		num, key := m.number(s.Nr), m.keyed(s.Nr, s.Args[0])
		pn, pk := compared(num, key)
		vals, pvals := syscallVals(s), syscallVals(pk)
		pvals[0] = pn.Args[0]
		var mask byte
		for k, v := range vals {
			if v != pvals[k] {
				mask |= 1 << k
			}
		}
		head.u8(mask)
		head.uvarint(uint64(len(s.Out)))
		head.uvarint(uint64(len(s.Pages)))
		for k, v := range vals {
			if mask&(1<<k) != 0 {
				values[k].svarint(v - pvals[k])
			}
		}
		if len(s.Out) > 0 {
			nr, ok := byNr[s.Nr]
			if !ok {
				nr = perNr{st(streamWords, int64(s.Nr)), &blockBuf{}}
				data[int64(s.Nr)] = nr.data
				byNr[s.Nr] = nr
			}
			for j, o := range s.Out {
				var ref uint64
				if j < len(pk.Out) {
					ref = pk.Out[j].Addr
				}
				out.svarint(o.Addr - ref)
				if len(o.Data) > 0 && bytes.Equal(m.lastData(s.Nr, num, key, j), o.Data) {
					out.uvarint(uint64(len(o.Data))<<1 | 1)
					continue
				}
				out.uvarint(uint64(len(o.Data)) << 1)
				if timeWords(pk, j, len(o.Data)) {
					for k := 0; k < len(o.Data); k += 8 {
						nr.words.svarint(le64(o.Data[k:]) - le64(pk.Out[j].Data[k:]))
					}
				} else if len(o.Data) > 0 {
					nr.data.write(o.Data)
				}
			}
		}
		for _, pg := range s.Pages {
			pages.u64(pg.Addr)
			pages.hash(pg.Hash)
		}
		m.note(s, num, key)
	}
	if count != n {
		panic(fmt.Sprintf("encode syscall log: %d records yielded, %d announced", count, n))
	}
	length := map[streamID]int{}
	for id, e := range streams {
		length[id] = len(e.b)
	}
	for nr, d := range data {
		length[streamID{streamData, nr}] = d.n
	}
	ids := make([]streamID, 0, len(length))
	for id, n := range length {
		if n > 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b streamID) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.key, b.key))
	})
	var dir enc
	dir.uvarint(uint64(n))
	dir.uvarint(uint64(len(ids)))
	for _, id := range ids {
		dir.uvarint(id.kind)
		dir.svarint(uint64(id.key))
		dir.uvarint(uint64(length[id]))
	}
	res := pieces{list: make([][]byte, 0, 1+len(ids))}
	res.add(dir.b)
	for _, id := range ids {
		if id.kind == streamData {
			for _, b := range data[id.key].blocks {
				res.add(b)
			}
		} else {
			res.add(streams[id].b)
		}
	}
	return res
}

// decodeSyscalls reads the log of versions 4 and 5 (see encodeSyscallsRaw).
// Every stream must be used up by the last record.
func decodeSyscalls(d *dec, major uint16) []Syscall {
	at := d.off
	n := d.uvarint("syscall count")
	ns := d.ucount("syscall log stream", 3)
	streams := map[streamID]*dec{}
	var ids []streamID
	lens := make([]int, ns)
	for i := range lens {
		id := streamID{d.uvarint("stream kind"), int64(d.svarint("stream key"))}
		if d.fail != nil {
			return nil
		}
		if id.kind < streamHead || id.kind > streamPages {
			d.failf("unknown syscall log stream kind %d", id.kind)
			return nil
		}
		if streams[id] != nil {
			d.failf("%s twice", id)
			return nil
		}
		l := d.uvarint(id.String() + " length")
		if d.fail == nil && l > uint64(d.remaining()) {
			d.failf("%s of %d bytes in a log of %d bytes left", id, l, d.remaining())
		}
		lens[i] = int(l)
		streams[id] = &dec{}
		ids = append(ids, id)
	}
	if d.fail != nil {
		return nil
	}
	for i, id := range ids {
		streams[id] = &dec{b: d.take(lens[i], id.String()), base: -1, fileOff: d.fileOff, sec: d.sec}
	}
	if d.fail != nil {
		return nil
	}
	st := func(kind uint64, key int64) *dec {
		id := streamID{kind, key}
		s := streams[id]
		if s == nil {
			s = &dec{base: -1, fileOff: d.fileOff, sec: d.sec}
			streams[id] = s
			ids = append(ids, id)
		}
		return s
	}
	head := st(streamHead, 0)
	switch {
	case n > uint64(head.remaining()/minHead4):
		d.off = at
		d.failf("syscall count %d does not fit in the %d bytes of the record heads", n, head.remaining())
		return nil
	case n > MaxSyscalls:
		d.off = at
		d.failf("%d syscall records, more than a checkpoint may hold (%d)", n, MaxSyscalls)
		return nil
	case n == 0:
		for _, id := range ids {
			if streams[id].remaining() > 0 {
				d.failf("%s holds %d bytes and the log no record", id, streams[id].remaining())
				return nil
			}
		}
		return nil
	}
	out := make([]Syscall, n)
	prefault.Slice(out) // 136 bytes a record, fresh memory: one call
	m := newLogModel(major)
	// The streams every record may use, looked up once; those of a number
	// once per number.
	var values [8]*dec
	for k := range values {
		values[k] = st(streamValue, int64(k))
	}
	outs, pageSt := st(streamOutput, 0), st(streamPages, 0)
	type perNr struct{ words, data *dec }
	var lowNr [modelLowNr]perNr
	byNr := func(nr int) perNr {
		if uint(nr) < modelLowNr {
			if lowNr[nr].words == nil {
				lowNr[nr] = perNr{st(streamWords, int64(nr)), st(streamData, int64(nr))}
			}
			return lowNr[nr]
		}
		return perNr{st(streamWords, int64(nr)), st(streamData, int64(nr))}
	}
	// Output lists and bytes are cut from larger allocations: decoded
	// records never change, and one allocation per output was most of the
	// garbage a load made.
	var outArena []OutBuf
	var byteArena []byte
	alloc := func(k int) []byte {
		if k > 4096 {
			return make([]byte, k)
		}
		if len(byteArena) < k {
			byteArena = make([]byte, 64<<10)
		}
		b := byteArena[:k:k]
		byteArena = byteArena[k:]
		return b
	}
	var seq, tid uint64
	fail := func() bool {
		for _, id := range ids {
			if s := streams[id]; s.fail != nil {
				d.fail = s.fail
				return true
			}
		}
		return false
	}
	for i := range out {
		s := &out[i]
		seq += head.uvarint("sequence number difference")
		tid += head.svarint("tid difference")
		s.Seq, s.Tid = seq, int(int64(tid))
		s.Nr = int(int64(head.svarint("syscall number")))
		mask := head.u8("changed-value mask")
		nOut := head.uvarint("output count")
		nPages := head.uvarint("mapped file page count")
		if head.fail != nil {
			break
		}
		num := m.number(s.Nr)
		pn, _ := compared(num, nil)
		a0 := pn.Args[0]
		if mask&1 != 0 {
			a0 += values[0].svarint("value difference")
		}
		key := m.keyed(s.Nr, a0)
		_, pk := compared(num, key)
		vals := syscallVals(pk)
		vals[0] = a0
		for k := 1; k < len(vals); k++ {
			if mask&(1<<k) != 0 {
				vals[k] += values[k].svarint("value difference")
			}
		}
		copy(s.Args[:], vals[:6])
		s.Ret, s.Rip = int64(vals[6]), vals[7]
		if nOut > 0 {
			if !outs.fits(nOut, minOutput4, "outputs") {
				break
			}
			if uint64(len(outArena)) < nOut {
				outArena = make([]OutBuf, max(nOut, 1024))
			}
			s.Out = outArena[:nOut:nOut]
			outArena = outArena[nOut:]
			streams := byNr(s.Nr)
			for j := range s.Out {
				var ref uint64
				if j < len(pk.Out) {
					ref = pk.Out[j].Addr
				}
				s.Out[j].Addr = ref + outs.svarint("output address difference")
				k := outs.uvarint("output data length")
				same := false
				if major >= 5 {
					k, same = k>>1, k&1 != 0
				}
				switch {
				case outs.fail != nil:
				case same && major >= 6:
					last := m.lastData(s.Nr, num, key, j)
					if k == 0 || uint64(len(last)) != k {
						outs.failf("output %d of %d bytes repeats the last one of its number and descriptor, which had %d bytes", j, k, len(last))
						break
					}
					// Decoded records never change: they share the bytes.
					s.Out[j].Data = last
				case same:
					if k == 0 || j >= len(pk.Out) || uint64(len(pk.Out[j].Data)) != k {
						outs.failf("output %d of %d bytes repeats the compared record's, which has no such output", j, k)
						break
					}
					s.Out[j].Data = pk.Out[j].Data
				case k <= 16 && timeWords(pk, j, int(k)):
					w := streams.words
					data := alloc(int(k))
					for x := 0; x < int(k); x += 8 {
						binary.LittleEndian.PutUint64(data[x:], le64(pk.Out[j].Data[x:])+w.svarint("time word difference"))
					}
					s.Out[j].Data = data
				case k > 0:
					data := streams.data
					if k > uint64(data.remaining()) {
						outs.failf("output data length %d does not fit in the %d bytes left in the %s", k, data.remaining(), streamID{streamData, int64(s.Nr)})
						break
					}
					b := alloc(int(k))
					copy(b, data.take(int(k), "output data"))
					s.Out[j].Data = b
				}
			}
		}
		if nPages > 0 {
			if !pageSt.fits(nPages, pageRefSize, "mapped file pages") {
				break
			}
			s.Pages = make([]PageRef, nPages)
			for j := range s.Pages {
				s.Pages[j].Addr = pageSt.u64("mapped file page address")
				s.Pages[j].Hash = pageSt.hash("mapped file page hash")
			}
		}
		if i%4096 == 0 && fail() {
			return nil
		}
		m.note(s, num, key)
	}
	if fail() {
		return nil
	}
	for _, id := range ids {
		if r := streams[id].remaining(); r > 0 {
			d.failf("%d unexpected bytes after the last record in the %s", r, id)
			return nil
		}
	}
	return out
}

// fits reports whether n elements of at least size bytes each fit in what
// the stream has left, and fails it if not.
func (d *dec) fits(n uint64, size int, what string) bool {
	if n > uint64(d.remaining()/size) {
		d.failf("%d %s do not fit in the %d bytes left", n, what, d.remaining())
		return false
	}
	return true
}
