package format

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// HashPage names a page's content.
func HashPage(data []byte) Hash {
	sum := sha256.Sum256(data)
	var h Hash
	copy(h[:], sum[:16])
	return h
}

func hashZero() Hash { return HashPage(make([]byte, PageSize)) }

// PageSource gives page content by hash. The reader's File implements it by
// reading (and decompressing) only the block that holds the page.
type PageSource interface {
	Page(h Hash) ([]byte, error)
}

// MemStore is a PageSource held in memory, used by the recorder to assemble a
// checkpoint before writing it.
type MemStore struct {
	mu    sync.Mutex
	pages map[Hash][]byte
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{pages: map[Hash][]byte{}} }

// Put stores a copy of one page (zero pages are not stored) and returns its hash.
func (s *MemStore) Put(data []byte) Hash {
	h := HashPage(data)
	if h == ZeroHash {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pages[h]; !ok {
		s.pages[h] = append([]byte(nil), data...)
	}
	return h
}

// PutHashed stores a page whose hash the caller already computed.
func (s *MemStore) PutHashed(h Hash, data []byte) {
	if h == ZeroHash {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pages[h]; !ok {
		s.pages[h] = append([]byte(nil), data...)
	}
}

// Page implements PageSource.
func (s *MemStore) Page(h Hash) ([]byte, error) {
	if h == ZeroHash {
		return make([]byte, PageSize), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pages[h]
	if !ok {
		return nil, fmt.Errorf("%w: page %x", ErrNoPage, h)
	}
	return p, nil
}

// Hashes returns every stored hash (order unspecified).
func (s *MemStore) Hashes() []Hash {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Hash, 0, len(s.pages))
	for h := range s.pages {
		out = append(out, h)
	}
	return out
}

// Len is the number of distinct non-zero pages stored.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pages)
}

// StartState computes the memory content at the start of interval index k (an
// index into c.Intervals) by Transplay's splicing rule: the original saved by the
// earliest interval at or after k that wrote the page, else the final content.
// The result maps page address to content hash.
func (c *Checkpoint) StartState(k int) map[uint64]Hash {
	m := make(map[uint64]Hash, len(c.Final))
	for _, p := range c.Final {
		m[p.Addr] = p.Hash
	}
	for j := len(c.Intervals) - 1; j >= k; j-- {
		for _, p := range c.Intervals[j].Written {
			m[p.Addr] = p.Hash
		}
	}
	return m
}

// DeadStack is how far below the stack pointer DigestPage treats memory as
// the dead part of the stack (the largest default stack).
const DeadStack = 8 << 20

// DeadStacks lists the dead parts of the stacks of threads (but the one
// numbered except) whose mappings are maps: for each, from its stack
// pointer's 128-byte red zone down to the start of the mapping holding the
// stack pointer, at most DeadStack. A digest masks that part of one
// thread's stack only (DigestMasked); a replay may leave other bytes there
// in the other threads' stacks than the recording did (a lock call's
// frames, left by a wait the replay did not make), and compares those
// pages without them when it has their recorded content.
func DeadStacks(threads []Thread, except int, maps []Mapping) []Span {
	var out []Span
	for _, t := range threads {
		rsp := t.Regs.Rsp
		if t.Tid == except || rsp < 256 {
			continue
		}
		i := sort.Search(len(maps), func(i int) bool { return maps[i].End > rsp })
		if i == len(maps) || maps[i].Start > rsp {
			continue
		}
		lo := max(maps[i].Start, rsp-min(rsp, DeadStack))
		if hi := rsp - 128; lo < hi {
			out = append(out, Span{lo, hi})
		}
	}
	return out
}

// DeadStacksAt is DeadStacks for the threads but except where the interval
// at position u starts (their states and its map), or at the end of the
// window for u == len(c.Intervals) (the end's threads, the last map).
func (c *Checkpoint) DeadStacksAt(u, except int) []Span {
	switch {
	case u < len(c.Intervals):
		return DeadStacks(c.Intervals[u].Threads, except, c.Intervals[u].Maps)
	case len(c.Intervals) > 0:
		return DeadStacks(c.End.Threads, except, c.Intervals[len(c.Intervals)-1].Maps)
	}
	return nil
}

// MaxDigests bounds the page digests of an end state.
const MaxDigests = 256

// SharedCopyMax bounds the shared writable memory (MAP_SHARED with write
// permission) the recorder copies at every boundary to know the originals
// of the pages an interval writes there: pages beyond it keep their final
// content in a checkpoint.
const SharedCopyMax = 16 << 20

// EndDigestPages lists the pages whose digests, with the registers, tell a
// matching end state from a loop iteration with the same registers: the
// stack page under rsp, then the pages written (the originals the last
// interval saved), each once, at most MaxDigests.
func EndDigestPages(rsp uint64, written []PageRef) []uint64 {
	out := []uint64{rsp &^ (PageSize - 1)}
	seen := map[uint64]bool{out[0]: true}
	for _, p := range written {
		if len(out) >= MaxDigests {
			break
		}
		if !seen[p.Addr] {
			seen[p.Addr] = true
			out = append(out, p.Addr)
		}
	}
	return out
}

// BoundaryDigests computes what Interval.Digests holds for the interval at
// position u of c: the DigestPage hashes, at its start, of the pages
// EndDigestPages names for its thread (the stack page under rsp, the pages
// the interval before it wrote), read from pages through the stored start
// state (StartState), which it needs. Pages not mapped there are left out;
// an interval without that thread gets none. rseqs are the checkpoint's
// rseq areas (RseqAreas, which scans the whole syscall log: a caller
// digesting several intervals computes them once).
func (c *Checkpoint) BoundaryDigests(u int, pages PageSource, rseqs []Rseq) ([]PageRef, error) {
	iv := &c.Intervals[u]
	if u == 0 {
		return nil, nil
	}
	t, err := iv.Thread(c.End.Tid)
	if err != nil {
		return nil, nil
	}
	if iv.StartOmitted {
		return nil, fmt.Errorf("interval %d: its start is not stored", iv.Index)
	}
	state := c.StartState(u)
	var out []PageRef
	for _, a := range EndDigestPages(t.Regs.Rsp, c.Intervals[u-1].Written) {
		h, ok := state[a]
		if !ok || !Mapped(iv.Maps, a) {
			// Not mapped there (a page the previous interval wrote and then
			// unmapped; a later interval that mapped it again gives it a
			// version StartState would also offer here): nothing to compare.
			continue
		}
		data, err := pages.Page(h)
		if err != nil {
			return nil, fmt.Errorf("page %#x at the start of interval %d: %w", a, iv.Index, err)
		}
		out = append(out, PageRef{Addr: a, Hash: DigestPage(a, data, rseqs, t.Regs.Rsp)})
	}
	return out, nil
}

// RseqAreas lists the rseq areas of every thread of the checkpoint (each
// interval's threads and the end's), which digests leave out (DigestPage).
func (c *Checkpoint) RseqAreas() []Rseq {
	out := c.ThreadRseqAreas()
	// Areas registered in the window (a thread it started), which replay
	// emulates: the kernel updated them in the recording only.
	// In place, not a copy of each record: a window holds up to millions.
	for i := range c.Syscalls {
		s := &c.Syscalls[i]
		if s.Nr == rseqNr && s.Ret == 0 && s.Args[2]&1 == 0 { // not RSEQ_FLAG_UNREGISTER
			out = addRseq(out, Rseq{Addr: s.Args[0], Len: uint32(s.Args[1]), Sig: uint32(s.Args[3])})
		}
	}
	return out
}

// ThreadRseqAreas is the part of RseqAreas the thread states give, without
// the syscall log: RseqAreas starts with the same list, and is longer only
// when a call of the window registered another area.
func (c *Checkpoint) ThreadRseqAreas() []Rseq {
	out := addRseq(nil, c.End.Rseq)
	for _, iv := range c.Intervals {
		for _, t := range iv.Threads {
			out = addRseq(out, t.Rseq)
		}
	}
	for _, t := range c.End.Threads {
		out = addRseq(out, t.Rseq)
	}
	return out
}

func addRseq(out []Rseq, r Rseq) []Rseq {
	if r.Len != 0 && !slices.Contains(out, r) {
		out = append(out, r)
	}
	return out
}

// rseqNr is the number of rseq on x86-64.
const rseqNr = 334

// Mapped reports whether addr lies in one of maps (sorted, not overlapping).
func Mapped(maps []Mapping, addr uint64) bool {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].End > addr })
	return i < len(maps) && maps[i].Start <= addr
}

// DigestPage is the hash an end-state digest holds for the page at addr,
// for a thread whose stack pointer is rsp. Two kinds of bytes are zeroed
// first, because they may differ between a recording and a faithful replay
// without the program depending on them: the rseq areas of the threads
// (RseqAreas: the kernel rewrites their cpu_id after a migration, outside
// any syscall, and does so for the threads replay does not run whenever
// they resume from a boundary's stop), and the dead
// part of the stack, from rsp-DeadStack up to the 128-byte red zone under rsp
// (leftovers of calls that have returned, which the program writes before it
// reads; they were seen to differ between a recording under load and its
// replay while every register and every live byte agreed).
func DigestPage(addr uint64, data []byte, rseqs []Rseq, rsp uint64) Hash {
	return HashPage(DigestMasked(addr, data, rseqs, rsp))
}

// DigestMasked is the content DigestPage hashes: data with the rseq areas and
// the dead part of the stack below rsp zeroed, in a copy when anything is.
func DigestMasked(addr uint64, data []byte, rseqs []Rseq, rsp uint64) []byte {
	masked := data
	zero := func(lo, hi uint64) {
		lo, hi = max(lo, addr), min(hi, addr+PageSize)
		if lo >= hi {
			return
		}
		if &masked[0] == &data[0] {
			masked = append([]byte(nil), data...)
		}
		clear(masked[lo-addr : hi-addr])
	}
	for _, rs := range rseqs {
		if rs.Len != 0 {
			zero(rs.Addr, rs.Addr+uint64(rs.Len))
		}
	}
	if rsp > DeadStack+128 {
		zero(rsp-DeadStack, rsp-128)
	}
	return masked
}

// x86-64 syscall numbers and the flag the memory calls below read (the
// format package does not depend on the host's headers).
const (
	nrMmap       = 9
	nrMunmap     = 11
	nrMremap     = 25
	mapAnonymous = 0x20
)

// Span is an address range [Lo, Hi).
type Span struct{ Lo, Hi uint64 }

// Overlaps reports whether the span and [lo, hi) share an address.
func (a Span) Overlaps(lo, hi uint64) bool { return a.Lo < hi && lo < a.Hi }

// Contains reports whether addr lies in the span.
func (a Span) Contains(addr uint64) bool { return a.Lo <= addr && addr < a.Hi }

// SyscallIndex returns the position in c.Syscalls (sorted by Seq) of the
// record numbered seq, or where it would be, and whether it is there.
func (c *Checkpoint) SyscallIndex(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(c.Syscalls, seq, func(r Syscall, seq uint64) int { return cmp.Compare(r.Seq, seq) })
}

// MemoryChanges returns the ranges a successful call mapped, unmapped or
// moved: one range, or for mremap the old one and the new one.
func MemoryChanges(rec *Syscall) (r [2]Span, n int) {
	if rec.Ret < 0 {
		return r, 0
	}
	up := func(n uint64) uint64 { return (n + PageSize - 1) &^ (PageSize - 1) }
	a := rec.Args
	switch rec.Nr {
	case nrMmap:
		r[0] = Span{uint64(rec.Ret), uint64(rec.Ret) + up(a[1])}
		return r, 1
	case nrMunmap:
		r[0] = Span{a[0], a[0] + up(a[1])}
		return r, 1
	case nrMremap:
		r[0] = Span{a[0], a[0] + up(a[1])}
		r[1] = Span{uint64(rec.Ret), uint64(rec.Ret) + up(a[2])}
		return r, 2
	}
	return r, 0
}

// FileMmap reports whether rec is a successful mmap of a file.
func FileMmap(rec *Syscall) bool {
	return rec.Nr == nrMmap && rec.Ret >= 0 && rec.Args[3]&mapAnonymous == 0 && int32(rec.Args[4]) >= 0
}

// MappedSpan is where the file mmap of the log numbered Seq is still
// mapped.
type MappedSpan struct {
	Span
	Seq uint64
}

// FileMappedBefore lists where the file mmaps of log (sorted by Seq) are
// still mapped at the call numbered seq: the ranges later calls did not
// map, unmap or move over.
func FileMappedBefore(log []Syscall, seq uint64) []MappedSpan {
	var live []MappedSpan
	for i := range log {
		rec := &log[i]
		if rec.Seq >= seq {
			break
		}
		r, n := MemoryChanges(rec)
		for _, c := range r[:n] {
			var out []MappedSpan
			for _, m := range live {
				if !m.Overlaps(c.Lo, c.Hi) {
					out = append(out, m)
					continue
				}
				if m.Lo < c.Lo {
					out = append(out, MappedSpan{Span{m.Lo, c.Lo}, m.Seq})
				}
				if m.Hi > c.Hi {
					out = append(out, MappedSpan{Span{c.Hi, m.Hi}, m.Seq})
				}
			}
			live = out
		}
		if FileMmap(rec) {
			live = append(live, MappedSpan{r[0], rec.Seq})
		}
	}
	return live
}
