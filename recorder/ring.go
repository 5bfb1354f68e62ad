package recorder

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/pierrec/lz4/v4"
	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/pagedelta"
)

// interval is one recording interval while it lives in the ring.
type interval struct {
	meta     format.Interval
	present  []pageRun // pages present in memory at the interval start
	syscalls callLog
	// packed is the log with its chunks compressed (callLog.pack) when the
	// ring ran short of memory; syscalls is then empty.
	packed    *packedLog
	packTried bool
	signals   []format.SignalEvent
	logBytes  int64                  // memory held by the syscall log
	files     map[uint64]*mappedFile // by seq: files mapped during the interval
	// pendingMmaps are positions in syscalls of file mmaps a late source
	// delivered, to resolve once the interval's log is complete.
	pendingMmaps []int
	memCalls     []int        // positions in syscalls of the calls that changed the memory map
	lost         uint64       // events the syscall log source lost in it
	shared       *sharedPages // content of the shared writable pages at the start
}

// pageRun is a run of consecutive present pages [start, end).
type pageRun struct{ start, end uint64 }

// blob is a stored page shared by every interval that refers to it: s2
// compressed, raw, or the words in which it differs from another blob.
type blob struct {
	data []byte // s2 block, the raw page when it does not compress, or a delta
	raw  bool
	// base is the blob a delta applies to (pagedelta); depth counts the
	// deltas down to a page stored whole.
	base  *blob
	depth int
	hash  format.Hash
	refs  int // intervals and deltas that refer to it
}

// maxDeltaDepth bounds the deltas read to rebuild one page.
const maxDeltaDepth = 8

// maxDeltaBytes is the largest delta kept as one: a page that changed more
// is compressed whole.
const maxDeltaBytes = 1024

// deltaSource is an original saved at the previous boundary, which an
// original of the same address at this one may be stored against.
type deltaSource struct {
	data []byte
	b    *blob
}

// ring holds the last intervals and their original pages, content-addressed:
// a page saved by several intervals is kept once.
type ring struct {
	keep      int
	maxBytes  int64
	intervals []*interval // oldest first
	pages     map[format.Hash]*blob
	bytes     int64
	// seed makes the ring's names of pages (key).
	seed maphash.Seed
	// busy is the pack under way (startPack), done where it ends.
	busy *packJob
	done chan *packJob
	// memDropped counts the intervals dropped to stay within maxBytes
	// (not for keep): history the user asked for and did not get.
	memDropped int
	// scratch is reused for every page. Pages are compressed with s2
	// (klauspost/compress, the module zstd comes from): on the heap pages
	// of a redis checkpoint it took 5.9 us a page against lz4's 9.6 us (a
	// profile of a recording saving 9,000 originals a second put most of
	// the recorder's CPU there), for a slightly better ratio (2.71 vs 2.62).
	scratch []byte
	// prev and cur are the originals of the previous boundary and of this
	// one, by address (beginOriginals). A page a server rewrites every
	// interval changes in a few words from one original to the next: as a
	// delta against the previous one, a redis-server's heap page took 99
	// bytes on average instead of 1,415 s2-compressed, in 2.2 us instead
	// of 10.4 (BENCHMARKS.md).
	prev, cur map[uint64]deltaSource
	// curBuf and prevBuf are the buffers the originals of cur and prev
	// were read into (originalsBuf): their delta sources alias them.
	// spare is one no delta source refers to any more, for the next
	// boundary to read into. A new buffer of a boundary's originals cost
	// more than reading them: Go zeroes a large allocation, and the kernel
	// faults its pages in again once the runtime gave them back (10 MB, a
	// redis-server boundary's originals: 5-12 ms against the read's 4.4).
	curBuf, prevBuf, spare []byte
}

func newRing(keep int, maxBytes int64) *ring {
	return &ring{keep: keep, maxBytes: maxBytes, pages: map[format.Hash]*blob{}, done: make(chan *packJob, 1),
		seed: maphash.MakeSeed()}
}

// key names a page inside the ring: a 64-bit sum of hash/maphash under a
// seed of the ring's own, in the first half of the name. A file names its
// pages by SHA-256 (format.HashPage), which took 17% of the recorder's CPU
// on a redis-server under load, hashing every original of every boundary
// (about 9,000 pages a second) when a checkpoint keeps a few thousand of
// them; maphash takes a third of that (BENCHMARKS.md). The dump renames the
// pages it keeps (liveSource.fileNames). When a name comes up for another
// content, the second half numbers the contents that share the sum
// (addPage), so the ring never mistakes one page for another. No name
// starts like a live reference (liveHash) or is format.ZeroHash.
func (r *ring) key(data []byte) format.Hash {
	var h format.Hash
	binary.LittleEndian.PutUint64(h[:8], maphash.Bytes(r.seed, data))
	if [8]byte(h[:8]) == liveMagic || [8]byte(h[:8]) == [8]byte(format.ZeroHash[:8]) {
		h[0]++
	}
	return h
}

// zeroPage is a page of zeros, for comparisons.
var zeroPage = make([]byte, format.PageSize)

// addPage stores one original page for iv and returns its reference.
// lastWritten returns the pages the interval before the one of the given
// index wrote, when the ring still holds it (empty otherwise).
func (r *ring) lastWritten(index int) []format.PageRef {
	if n := len(r.intervals); n > 0 && r.intervals[n-1].meta.Index == index-1 {
		return r.intervals[n-1].meta.Written
	}
	return nil
}

// beginOriginals starts the originals of a boundary, n pages. They are
// kept as delta sources until the next boundary, which keeps their buffer
// that long, unless there are more than maxDeltaSources or they would take
// more than a quarter of the ring's budget.
func (r *ring) beginOriginals(n int) {
	// The previous boundary's delta sources go, and with them their
	// buffer; this one's become the previous ones, and keep theirs.
	free := r.prevBuf
	if r.cur != nil {
		r.prevBuf = r.curBuf
	} else { // no delta source aliases this one's buffer
		r.prevBuf, free = nil, larger(free, r.curBuf)
	}
	r.curBuf, r.spare = nil, larger(r.spare, free)
	r.prev, r.cur = r.cur, nil
	if n <= maxDeltaSources && int64(n)*format.PageSize <= r.maxBytes/4 {
		r.cur = make(map[uint64]deltaSource, n)
	}
}

const maxDeltaSources = 4096

// originalsBuf returns a buffer for n pages of the originals begun by
// beginOriginals, the spare one when it is large enough. Its content is
// whatever it held before: the reader overwrites every page it stores.
func (r *ring) originalsBuf(n int) []byte {
	size := n * format.PageSize
	b := r.spare
	if cap(b) < size {
		// A quarter more: the next boundaries write about as many
		// pages, a few more or less each time.
		b = make([]byte, size, (n+n/4)*format.PageSize)
	} else {
		r.spare = nil
	}
	r.curBuf = b[:size]
	return r.curBuf
}

func larger(a, b []byte) []byte {
	if cap(a) >= cap(b) {
		return a
	}
	return b
}

// addPage stores one original page for iv. data must not change until the
// next boundary's originals (it may be a delta source).
func (r *ring) addPage(iv *interval, addr uint64, data []byte) {
	if bytes.Equal(data, zeroPage) {
		iv.meta.Written = append(iv.meta.Written, format.PageRef{Addr: addr, Hash: format.ZeroHash})
		return
	}
	h := r.key(data)
	b, ok := r.pages[h]
	for ok && !b.holds(data) {
		// Two contents with one sum: this one takes the next number.
		binary.LittleEndian.PutUint64(h[8:], binary.LittleEndian.Uint64(h[8:])+1)
		b, ok = r.pages[h]
	}
	iv.meta.Written = append(iv.meta.Written, format.PageRef{Addr: addr, Hash: h})
	if ok {
		b.refs++
	} else {
		b = r.store(h, addr, data)
		r.pages[h] = b
		r.bytes += int64(len(b.data))
	}
	if r.cur != nil {
		r.cur[addr] = deltaSource{data, b}
	}
}

// store makes the blob of a new page: a delta against the previous
// original of its address when that one is still stored and the delta is
// small, else the page s2-compressed (or raw when that does not shrink it).
func (r *ring) store(h format.Hash, addr uint64, data []byte) *blob {
	if need := s2.MaxEncodedLen(len(data)); len(r.scratch) < need {
		r.scratch = make([]byte, need)
	}
	if p, ok := r.prev[addr]; ok && p.b.refs > 0 && p.b.depth < maxDeltaDepth {
		if d, ok := pagedelta.Append(r.scratch[:0], data, p.data, maxDeltaBytes); ok {
			p.b.refs++
			return &blob{data: append([]byte(nil), d...), base: p.b, depth: p.b.depth + 1, hash: h, refs: 1}
		}
	}
	z := s2.Encode(r.scratch, data)
	b := &blob{hash: h, refs: 1}
	if len(z) == 0 || len(z) >= len(data) {
		b.data, b.raw = append([]byte(nil), data...), true
	} else {
		b.data = append([]byte(nil), z...)
	}
	return b
}

// release drops one reference to b; a blob no longer referred to leaves
// the ring and releases its base.
func (r *ring) release(b *blob) {
	for b != nil {
		if b.refs--; b.refs > 0 {
			return
		}
		if r.pages[b.hash] == b {
			delete(r.pages, b.hash)
			r.bytes -= int64(len(b.data))
		}
		b = b.base
	}
}

// page returns the content of a stored page.
func (r *ring) page(h format.Hash) ([]byte, error) {
	if h == format.ZeroHash {
		return make([]byte, format.PageSize), nil
	}
	b, ok := r.pages[h]
	if !ok {
		return nil, fmt.Errorf("page %x not in the ring", h)
	}
	return b.page()
}

// holds reports whether the blob's content is data.
func (b *blob) holds(data []byte) bool {
	p, err := b.page()
	return err == nil && bytes.Equal(p, data)
}

// page returns the blob's content. Blobs never change once stored, so a
// dump may read them after the ring dropped them.
func (b *blob) page() ([]byte, error) {
	if b.base != nil {
		// The page whole at the root of the chain, then each delta
		// from the oldest, in one buffer.
		var chain [maxDeltaDepth + 1]*blob
		n := 0
		for d := b; d.base != nil; d = d.base {
			if n == len(chain) {
				return nil, errors.New("page delta chain too long")
			}
			chain[n] = d
			n++
		}
		root, err := chain[n-1].base.page()
		if err != nil {
			return nil, err
		}
		out := make([]byte, format.PageSize)
		copy(out, root)
		for i := n - 1; i >= 0; i-- {
			if err := pagedelta.Apply(out, chain[i].data); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if b.raw {
		return b.data, nil
	}
	out, err := s2.Decode(make([]byte, format.PageSize), b.data)
	if err != nil || len(out) != format.PageSize {
		return nil, fmt.Errorf("decompress page: %d bytes, %v", len(out), err)
	}
	return out, nil
}

// push appends a closed interval and drops the oldest ones beyond the limits.
// The newest interval is never dropped. With budget false (the partial
// interval a dump closes) the memory budget waits for the next push: a dump
// takes the whole ring, and a program whose one interval fills the budget
// (reading 40 MB of incompressible data in a quarter second) would otherwise
// lose all its history to the few milliseconds before its crash.
func (r *ring) push(iv *interval, budget bool) {
	r.collect(false)
	iv.logBytes += iv.syscalls.bytes
	r.bytes += iv.logBytes
	r.intervals = append(r.intervals, iv)
	for len(r.intervals) > 1 && len(r.intervals) > r.keep {
		r.drop()
	}
	if budget {
		r.budget()
	}
}

// budget brings the ring within maxBytes. Older logs are packed before any
// interval is dropped: the buffers that read(2) returned are most of a log
// and usually compress several times (a program reading text files can keep
// several times more history). Packing runs on its own goroutine, one log at
// a time: a python3 loop reading a small file logs 40-75 MB a quarter second,
// which took 100-560 ms to pack, and on the tracer's goroutine that held every
// ptrace stop of the target (a signal's delivery, a clone) as long. While a
// pack is under way that could bring the ring within budget, the ring may
// hold up to twice its budget; otherwise it waits for it. Only what packing
// cannot bring down is dropped.
func (r *ring) budget() {
	for r.bytes > r.maxBytes {
		if r.busy == nil {
			if old := r.unpacked(); old != nil {
				r.startPack(old)
				continue
			}
		} else if r.bytes-r.busy.iv.logBytes <= r.maxBytes && r.bytes <= 2*r.maxBytes {
			return // the pack under way can bring the ring within budget
		} else {
			r.collect(true)
			continue
		}
		if len(r.intervals) <= 1 {
			return
		}
		r.drop()
		r.memDropped++
	}
}

// settle waits for the packs under way and applies the budget after each.
func (r *ring) settle() {
	for r.busy != nil {
		r.collect(true)
		r.budget()
	}
}

// packJob is one log packed off the tracer's goroutine: it reads only its
// own copy of the log's block list, which nothing changes once the interval
// is in the ring.
type packJob struct {
	iv     *interval
	log    callLog
	packed *packedLog
}

// startPack marks iv's log as tried and, when packing it can pay, packs it
// on another goroutine (collect applies the result). A log larger than four
// times the budget is left alone: packing it would take seconds (700 MB a
// quarter second from a loop reading a 20 KB file) for an interval the ring
// could not keep anyway.
func (r *ring) startPack(iv *interval) {
	iv.packTried = true
	if iv.logBytes > 4*r.maxBytes || incompressible(iv) {
		return
	}
	j := &packJob{iv: iv, log: iv.syscalls}
	r.busy = j
	go func() {
		j.packed = j.log.pack()
		r.done <- j
	}()
}

// collect applies a finished pack: the log is replaced by its packed form
// when that is smaller and the interval is still in the ring. With wait it
// waits for the pack under way, if any.
func (r *ring) collect(wait bool) {
	if r.busy == nil {
		return
	}
	var j *packJob
	if wait {
		j = <-r.done
	} else {
		select {
		case j = <-r.done:
		default:
			return
		}
	}
	r.busy = nil
	iv := j.iv
	if !slices.Contains(r.intervals, iv) || j.packed.bytes >= iv.logBytes {
		// Dropped meanwhile, or not worth it.
		return
	}
	iv.packed = j.packed
	iv.syscalls = callLog{}
	r.bytes += j.packed.bytes - iv.logBytes
	iv.logBytes = j.packed.bytes
}

// unpacked returns the oldest interval whose log was not packed yet.
func (r *ring) unpacked() *interval {
	for _, iv := range r.intervals {
		if !iv.packTried {
			return iv
		}
	}
	return nil
}

// incompressible reports whether an interval's log is mostly output bytes
// that do not compress (a program reading compressed or random data), judged
// on a sample: packing 60 MB of it took a third of a second for nothing, on
// the tracer's thread, and held up the next boundary (an interval of
// sha256sum grew to over a second). The sample is the first outputs: the
// log counts its output bytes as it grows, and decoding all of it to count
// them took 8% of tprec's CPU under redis-server with --max-memory 32M,
// where every interval is packed.
func incompressible(iv *interval) bool {
	const sampleMax, piece = 256 << 10, 16 << 10
	if iv.syscalls.out*2 < iv.logBytes {
		return false
	}
	var sample []byte
	for d := range iv.syscalls.outputs() {
		sample = append(sample, d[:min(len(d), piece)]...)
		if len(sample) >= sampleMax {
			break
		}
	}
	if len(sample) < 64<<10 {
		return false
	}
	z := make([]byte, lz4.CompressBlockBound(len(sample)))
	n, err := lz4.CompressBlock(sample, z, nil)
	return err == nil && (n == 0 || n > len(sample)*9/10)
}

// calls returns how many calls the interval's log holds.
func (iv *interval) calls() int {
	if iv.packed != nil {
		return iv.packed.log.len()
	}
	return iv.syscalls.len()
}

// logView is an interval's log as a dump sees it: taken while the target is
// stopped, read later (the ring may pack or drop the interval meanwhile, which
// replaces its fields but changes nothing they pointed to).
type logView struct {
	calls  callLog
	packed *packedLog
}

func (iv *interval) view() logView { return logView{iv.syscalls, iv.packed} }

// appendTo appends the log's calls to dst, in order.
func (v logView) appendTo(dst []format.Syscall) ([]format.Syscall, error) {
	if v.packed != nil {
		l, err := v.packed.unpack()
		if err != nil {
			return dst, fmt.Errorf("unpack a syscall log of the ring: %w", err)
		}
		return l.appendTo(dst), nil
	}
	return v.calls.appendTo(dst), nil
}

func (r *ring) drop() {
	iv := r.intervals[0]
	r.intervals = r.intervals[1:]
	iv.closeFiles()
	r.bytes -= iv.logBytes
	for _, p := range iv.meta.Written {
		if b, ok := r.pages[p.Hash]; ok {
			r.release(b)
		}
	}
}

// reset forgets everything (the address space was replaced by exec).
func (r *ring) reset() {
	for _, iv := range r.intervals {
		iv.closeFiles()
	}
	r.intervals = nil
	r.pages = map[format.Hash]*blob{}
	r.prev, r.cur = nil, nil
	r.curBuf, r.prevBuf = nil, nil // a boundary's store may still read them
	r.bytes = 0
}
