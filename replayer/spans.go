package replayer

import (
	"slices"
	"sort"
)

// guard is a range the replayer made PROT_NONE although the program expects
// it accessible: the checkpoint lacks its content. prot is what the program
// believes the protection is; reason is the divergence message when it is
// touched ("" means the generic "not in the checkpoint"). zero says a page
// here that the checkpoint lacks was not present at the start, so it reads
// as zeros (zeroWhenAbsent).
type guard struct {
	start, end uint64
	prot       uint32
	reason     string
	zero       bool
	// file is the record (Seq) of the file mmap whose content the guard
	// stands for, when it does; shift how far an mremap moved it since.
	file  uint64
	shift uint64
}

// guardSet is a sorted list of non-overlapping guards.
type guardSet struct{ g []guard }

func (s *guardSet) add(n guard) {
	if n.start >= n.end {
		return
	}
	s.remove(n.start, n.end)
	i := sort.Search(len(s.g), func(i int) bool { return s.g[i].start >= n.start })
	s.g = append(s.g, guard{})
	copy(s.g[i+1:], s.g[i:])
	s.g[i] = n
}

// remove forgets [start, end), splitting guards that straddle it. The
// guards it touches are neighbours in the sorted list, found by binary
// search and replaced in place: a lazy replay removes one page for every
// page it serves, thousands of them among thousands of guards.
func (s *guardSet) remove(start, end uint64) {
	if start >= end {
		return
	}
	i := sort.Search(len(s.g), func(i int) bool { return s.g[i].end > start })
	j := i
	for j < len(s.g) && s.g[j].start < end {
		j++
	}
	if i == j {
		return
	}
	var keep [2]guard
	n := 0
	if l := s.g[i]; l.start < start {
		l.end = start
		keep[n] = l
		n++
	}
	if r := s.g[j-1]; r.end > end {
		r.start = end
		keep[n] = r
		n++
	}
	s.g = slices.Replace(s.g, i, j, keep[:n]...)
}

// within returns the parts of guards inside [start, end).
func (s *guardSet) within(start, end uint64) []guard {
	var out []guard
	for _, g := range s.g {
		if g.end <= start || g.start >= end {
			continue
		}
		g.start = max(g.start, start)
		g.end = min(g.end, end)
		out = append(out, g)
	}
	return out
}

// find returns the guard holding addr.
func (s *guardSet) find(addr uint64) (guard, bool) {
	i := sort.Search(len(s.g), func(i int) bool { return s.g[i].end > addr })
	if i < len(s.g) && s.g[i].start <= addr {
		return s.g[i], true
	}
	return guard{}, false
}

// move shifts the guards of [old, old+n) to start at dst (mremap).
func (s *guardSet) move(old, n, dst uint64) {
	moved := s.within(old, old+n)
	s.remove(old, old+n)
	for _, g := range moved {
		g.start = g.start - old + dst
		g.end = g.end - old + dst
		g.shift += dst - old
		s.add(g)
	}
}
