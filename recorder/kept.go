package recorder

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/parallel"
	"github.com/tprec/tprec/internal/prefault"
	"github.com/tprec/tprec/proc"
)

// A shadow kept across boundaries.
//
// A shadow forked at every boundary makes the target pay a copy-on-write
// fault for its first write to every page in every interval: 3-4 us a page
// on this project's VM (scripts/bench/cow.c), 8-10 ms of a redis-server's
// time per 250 ms interval for the 2,300 pages it rewrites, plus the fork
// in the stop. A program that rewrites the same pages interval after
// interval (a server's working set) pays that for nothing new.
//
// So a boundary keeps the interval's shadow for the next interval while
// the pages that no longer share their frame with it (the diverged pages:
// written since its fork, or mapped since) are few: it reads their content
// from the stopped target into tprec's memory (diverged), which is their
// content at the next interval's start. The target then writes them in
// place, without a fault. At the next boundary an original comes from
// there for a diverged page and from the shadow for the others, as
// before; a diverged page whose content did not change was not written.
// The shadow is forked again when the diverged pages pass keptShadowPages,
// when fewer than half of them changed in the last interval (reading them
// in every stop would cost more than a fork and the faults of the few
// rewritten: a program that filled 10 MB once and then only reads it),
// when one of them is not in memory in the target (dropped by
// madvise(MADV_DONTNEED) or swapped out: its start content is then
// neither the shadow's nor one read without faulting it in), when the
// target's memory cgroup is short of room, and at every boundary of a
// dump. A page of a wipe-on-fork mapping (MADV_WIPEONFORK, MAP_DROPPABLE)
// is never a diverged page: a fork, the dump's shadow too, gets it as
// zeros, so its originals stay the zeros of a fresh page, as with a shadow
// forked at every boundary (TestVDSOGetrandom: glibc's getrandom state).
type diverged struct {
	addrs   []uint64 // ascending
	content []byte   // content[i*PageSize:] is addrs[i]'s
}

// keptShadowPages bounds the pages a kept shadow's boundary reads in the
// stop (1-3 ms per 1,000 pages here) and that tprec holds twice (this
// interval's and the last one's): 16 MiB each, and at most a quarter of
// --max-memory.
const keptShadowPages = 4096

// find returns addr's content at the interval start, or nil.
func (d *diverged) find(addr uint64) []byte {
	if d == nil {
		return nil
	}
	i, ok := slices.BinarySearch(d.addrs, addr)
	if !ok {
		return nil
	}
	return d.content[i*format.PageSize : (i+1)*format.PageSize]
}

// allPresent reports whether every page of addrs is in memory in the
// target, by snap.
func allPresent(snap *pageSnapshot, addrs []uint64) bool {
	for _, a := range addrs {
		if e, ok := snap.entry(a); !ok || e&proc.PMPresent == 0 {
			return false
		}
	}
	return true
}

// keepShadow decides, in the stop of a boundary that closes an interval
// recorded against sh, whether sh serves the next interval too, and if so
// reads the diverged pages' content now. It returns nil, and why, for a
// shadow to be forked again. written is what the close found diverged over
// the closing interval's mappings (writtenAndFresh); when the mappings are
// the same now (same), those are the pages, without a second look at the
// shadow's pagemap.
func (s *session) keepShadow(snap *pageSnapshot, sh *shadow, written []uint64, same bool) (*diverged, string) {
	if why, _ := s.roomShort(); why != "" {
		return nil, "memory cgroup short of room"
	}
	if a, ok := filesAsForked(sh.maps, snap.maps); !ok {
		return nil, fmt.Sprintf("a file was mapped at %#x since the shadow's fork", a)
	}
	limit := min(keptShadowPages, int(s.o.MaxMemory/4/format.PageSize))
	if len(written) > limit {
		return nil, fmt.Sprintf("%d pages written", len(written))
	}
	addrs := written
	if !same {
		var err error
		if addrs, _, err = s.writtenAndFresh(snap.maps, snap, sh); err != nil {
			return nil, err.Error()
		}
	}
	addrs = slices.Clone(addrs) // the close goes on changing its list
	// A fork's child gets a wipe-on-fork page as zeros, so the dump's
	// final content of one is zeros too (its dump shadow is a fork), and
	// the originals must be what a shadow forked at the interval start
	// gives: zeros, as a fresh page. It stays out of the diverged pages.
	if !slices.Equal(snap.maps, s.wfMaps) {
		wf, err := proc.WipeOnForkRanges(s.pid)
		if err != nil {
			return nil, err.Error()
		}
		s.wf, s.wfMaps = wf, snap.maps
	}
	addrs = outsideRanges(addrs, s.wf)
	switch {
	case !allPresent(snap, addrs):
		return nil, "a diverged page is not in memory"
	case len(addrs) > limit:
		return nil, fmt.Sprintf("%d diverged pages", len(addrs))
	case s.divSeen > 0 && 2*s.divChanged < s.divSeen:
		return nil, fmt.Sprintf("%d of %d diverged pages changed in the last interval", s.divChanged, s.divSeen)
	}
	// In parts on every CPU: a redis-server's 2,500 pages, scattered
	// over its heap, took 2.4-3.4 ms in one piece and 1.6-2.0 ms in two
	// (by hand).
	d := &diverged{addrs: addrs, content: s.divergedBuf(len(addrs))}
	const part = 512
	if err := parallel.Each((len(addrs)+part-1)/part, func(i int) error {
		lo, hi := i*part, min((i+1)*part, len(addrs))
		return proc.ReadPages(s.pid, addrs[lo:hi], d.content[lo*format.PageSize:hi*format.PageSize])
	}); err != nil {
		return nil, err.Error()
	}
	return d, ""
}

// filesAsForked reports whether every file mapping of now is backed at
// every address by what the shadow mapped there when it was forked
// (forked), and if not the first address where it is not. A page of a file
// mapped since then that the target had not touched is a diverged page of
// neither kind (absent in both processes), and its original would be read
// from the shadow: from nothing (the page left out), or from another file
// the shadow still maps there. A python3 loop that maps two files in turn
// at the same address replayed one's bytes where it had read the other's
// (and a file mapped once lacked the original of every page it read after
// the boundary). So such a boundary forks a new shadow. Anonymous memory
// needs no such rule: a page absent in the target reads as zeros from
// either, and one absent only in the shadow is a diverged page.
func filesAsForked(forked, now []format.Mapping) (uint64, bool) {
	for _, m := range now {
		if m.Inode == 0 {
			continue
		}
		for a := m.Start; a < m.End; {
			w := mappingAt(forked, a)
			if w == nil || !sameBacking(*w, m, a) {
				return a, false
			}
			a = min(w.End, m.End)
		}
	}
	return 0, true
}

// divergedBuf returns a buffer for n pages, from two that take turns: the
// content read at the last boundary is still needed by the save of the
// interval it started, and the one before it by nothing. It runs in the
// stop: a buffer made here (growDivergedBuf did not foresee n) costs a page
// fault for every page the read then writes.
func (s *session) divergedBuf(n int) []byte {
	s.divTurn ^= 1
	if cap(s.divBufs[s.divTurn]) < n*format.PageSize {
		s.divBufs[s.divTurn] = nil
		s.divBufs[s.divTurn] = make([]byte, (n+n/4)*format.PageSize)
		s.noteKeptBuffers()
	}
	return s.divBufs[s.divTurn][:n*format.PageSize]
}

// growDivergedBuf makes sure, after a stop that read n diverged pages and
// while the target runs, that the buffer the next stop reads into holds
// more, its memory faulted in. A redis-server under load diverges on more
// pages at every boundary for seconds while its heap fills: each stop made
// a new buffer, and the read into it took a fault a page, about 1 us each
// in this project's VM, 2 ms of a 5 ms stop for 2,000 pages.
func (s *session) growDivergedBuf(n int) {
	next := s.divTurn ^ 1
	if cap(s.divBufs[next]) < (n+n/8)*format.PageSize {
		s.divBufs[next] = nil // the old one can go before the new one is touched
		b := make([]byte, (n+n/4)*format.PageSize)
		prefault.Bytes(b) // fault it in now
		s.divBufs[next] = b
		s.noteKeptBuffers()
	}
}

// noteKeptBuffers tells the Go memory limit what the buffers of the kept
// shadows' pages hold.
func (s *session) noteKeptBuffers() {
	keptMemory(int64(cap(s.divBufs[0]) + cap(s.divBufs[1]) + cap(s.restBuf)))
}

// outsideRanges returns the pages of addrs (ascending) outside the ranges
// rs (ascending, disjoint).
func outsideRanges(addrs []uint64, rs [][2]uint64) []uint64 {
	if len(rs) == 0 {
		return addrs
	}
	out := addrs[:0]
	j := 0
	for _, a := range addrs {
		for j < len(rs) && rs[j][1] <= a {
			j++
		}
		if j < len(rs) && rs[j][0] <= a {
			continue
		}
		out = append(out, a)
	}
	return out
}

// countIn returns how many pages of a are in b (both ascending).
func countIn(a, b []uint64) int {
	n, j := 0, 0
	for _, p := range a {
		for j < len(b) && b[j] < p {
			j++
		}
		if j < len(b) && b[j] == p {
			n++
		}
	}
	return n
}

// unchanged returns the pages of written that div held at the interval
// start and next holds with the same content at its end: not written.
func unchanged(written []uint64, div, next *diverged) []uint64 {
	if div == nil || next == nil {
		return nil
	}
	var same []uint64
	for _, a := range written {
		if was, now := div.find(a), next.find(a); was != nil && now != nil && bytes.Equal(was, now) {
			same = append(same, a)
		}
	}
	return same
}

// addrsOrNil returns d's pages, none for a nil d.
func (d *diverged) addrsOrNil() []uint64 {
	if d == nil {
		return nil
	}
	return d.addrs
}
