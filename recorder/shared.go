package recorder

import (
	"bytes"
	"slices"
	"strings"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// sharedMax bounds the shared writable memory copied at every boundary.
const sharedMax = format.SharedCopyMax

// sharedPages is the content of the target's shared writable pages (MAP_SHARED
// with write permission: shared anonymous memory, System V segments, memfds,
// files mapped shared) at an interval boundary.
//
// A fork does not make such pages copy-on-write: the shadow maps the same
// memory as the target, so it cannot give their content at the interval
// start, and no fault or pagemap change tells that they were written. tprec
// instead copies them while the target is stopped at every boundary and
// compares the copies of consecutive boundaries: a page that changed gets the
// earlier copy as its original, as a written private page gets the shadow's.
// The copy also sees writes by other processes mapping the same memory (the
// other workers of an nginx): those are inputs the replay cannot reproduce
// within the interval, and the trial replay then diverges.
type sharedPages struct {
	addrs []uint64 // sorted
	data  []byte   // one page per address
}

// sharedPage is the original content of one shared page.
type sharedPage struct {
	addr uint64
	data []byte
}

// sharedWritable reports whether a mapping's pages are copied by readShared.
func sharedWritable(m format.Mapping) bool {
	return m.Shared && m.Prot&format.ProtWrite != 0 && recorded(m)
}

// readShared copies the target's present shared writable pages (it is
// stopped), up to sharedMax; nil when it has none. The pages beyond the bound
// keep their final content, as before any copy, and tprec says so once.
func (s *session) readShared(snap *pageSnapshot) *sharedPages {
	var addrs []uint64
	over := false
	for i, m := range snap.maps {
		if !sharedWritable(m) {
			continue
		}
		for j, e := range snap.ents[i] {
			if e&(proc.PMPresent|proc.PMSwapped) == 0 {
				continue
			}
			if len(addrs) >= sharedMax/format.PageSize {
				over = true
				break
			}
			addrs = append(addrs, m.Start+uint64(j)*format.PageSize)
		}
	}
	if over && !s.sharedOver {
		s.sharedOver = true
		s.logf("the process has more than %d MiB of shared writable memory: tprec copies the first %d MiB at every boundary; a replay that reads the rest may diverge", sharedMax>>20, sharedMax>>20)
	}
	if len(addrs) == 0 {
		return nil
	}
	buf := make([]byte, len(addrs)*format.PageSize)
	if err := proc.ReadPages(s.pid, addrs, buf); err != nil {
		// One by one: a page beyond the end of its file cannot be read,
		// and is left out.
		kept := addrs[:0]
		for _, a := range addrs {
			dst := buf[len(kept)*format.PageSize : (len(kept)+1)*format.PageSize]
			if n, err := proc.ReadBytes(s.pid, a, dst); err == nil && n == format.PageSize {
				kept = append(kept, a)
			}
		}
		addrs, buf = kept, buf[:len(kept)*format.PageSize]
	}
	return &sharedPages{addrs: addrs, data: buf}
}

func (p *sharedPages) page(i int) []byte {
	return p.data[i*format.PageSize : (i+1)*format.PageSize]
}

// find returns the index of addr, or -1.
func (p *sharedPages) find(addr uint64) int {
	if p == nil {
		return -1
	}
	if i, ok := slices.BinarySearch(p.addrs, addr); ok {
		return i
	}
	return -1
}

// originals compares the copy taken at an interval start (p) with the one
// taken at its end (now). It returns the start content of the shared pages
// the interval changed, and of those it unmapped (listed in written, the pages
// whose originals would otherwise be read from the shadow, which the returned
// rest no longer holds). appeared is the first shared writable page present
// at the end that the start copy lacks (0 if none) and that fresh does not
// name: its start content is unknown.
func (p *sharedPages) originals(now *sharedPages, written []uint64, fresh func(uint64) bool) (orig []sharedPage, rest []uint64, appeared uint64) {
	if p == nil && now == nil {
		return nil, written, 0
	}
	rest = written[:0:0]
	vanished := map[uint64]bool{}
	for _, a := range written {
		if i := p.find(a); i >= 0 {
			orig = append(orig, sharedPage{a, p.page(i)})
			vanished[a] = true
		} else {
			rest = append(rest, a)
		}
	}
	if now == nil {
		return orig, rest, 0
	}
	for j, a := range now.addrs {
		i := p.find(a)
		if i < 0 {
			if appeared == 0 && !fresh(a) {
				appeared = a
			}
			continue
		}
		if !vanished[a] && !bytes.Equal(p.page(i), now.page(j)) {
			orig = append(orig, sharedPage{a, p.page(i)})
		}
	}
	return orig, rest, appeared
}

// freshShared reports whether a shared writable page missing from the start
// copy lies in shared anonymous memory that a call of the interval mapped
// where nothing was mapped at its start (python3's mmap.mmap(-1, n),
// multiprocessing's shared values): it began as zeros, or, moved there by
// mremap, with content the replay moves along from where the start had it.
// A page of a mapping that existed at the start, but was not in memory then,
// may hold what another process sharing it wrote: unknown.
func freshShared(start, end []format.Mapping) func(uint64) bool {
	return func(a uint64) bool {
		if mappingAt(start, a) != nil {
			return false
		}
		m := mappingAt(end, a)
		return m != nil && m.Shared && strings.HasPrefix(m.Path, "/dev/zero")
	}
}
