package replayer

import (
	"fmt"
	"sort"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

const pageSize = format.PageSize

func pageDown(a uint64) uint64 { return a &^ (pageSize - 1) }
func pageUp(a uint64) uint64   { return (a + pageSize - 1) &^ (pageSize - 1) }

// recreated reports whether a recorded mapping is rebuilt in the stub:
// [vvar]/[vvar_vclock] have no readable content and [vsyscall] is fixed by the
// kernel in every process.
func recreated(m format.Mapping) bool { return !proc.Special(m) }

// occupied lists every address range the replayed program may use: the
// regions of every interval, and whatever the log maps or moves during the
// window. The stub's page and the in-process views must stay clear of all
// of them. The heap lies between the lowest and the highest break the log
// gives (a brk that grows it from nothing follows a brk(0) that returns
// where it starts; one that existed before is in the maps): a gigabyte
// around each break, as it once was, also covered a program just below its
// heap, which then had no in-process view in reach of its code, and every
// pass of an end search there was a stop.
func occupied(c *format.Checkpoint, log []format.Syscall) [][2]uint64 {
	var r [][2]uint64
	for _, iv := range c.Intervals {
		for _, m := range iv.Maps {
			r = append(r, [2]uint64{m.Start, m.End})
		}
	}
	var brkLo, brkHi uint64
	for _, s := range log {
		if s.Ret < 0 {
			continue
		}
		switch s.Nr {
		case unix.SYS_MMAP:
			r = append(r, [2]uint64{uint64(s.Ret), uint64(s.Ret) + pageUp(s.Args[1])})
		case unix.SYS_MREMAP:
			r = append(r, [2]uint64{uint64(s.Ret), uint64(s.Ret) + pageUp(s.Args[2])})
		case unix.SYS_BRK:
			b := uint64(s.Ret)
			if brkHi == 0 || b < brkLo {
				brkLo = b
			}
			brkHi = max(brkHi, b)
		}
	}
	if brkHi != 0 {
		r = append(r, [2]uint64{pageDown(brkLo), pageUp(brkHi)})
	}
	return r
}

// pickStubBase returns a page address at least 1 GiB away from every range.
func pickStubBase(used [][2]uint64) (uint64, error) {
	const margin = 1 << 30
	candidates := []uint64{
		0x1000_0000_0000, 0x2000_0000_0000, 0x3000_0000_0000, 0x4000_0000_0000,
		0x6000_0000_0000, 0x0100_0000_0000, 0x1_0000_0000, 0x1000_0000,
	}
next:
	for _, c := range candidates {
		for _, u := range used {
			if c+stubSize+margin > u[0] && c < u[1]+margin {
				continue next
			}
		}
		return c, nil
	}
	return 0, fmt.Errorf("place replay stub: no free address far from the recorded regions")
}

// region is one mapping to create in the stub.
type region struct {
	format.Mapping
}

// regions returns the mappings of interval k to recreate, with [stack]
// extended down to the lowest start any later interval shows (the stack grew
// during the window, and the growth area must be there when it does again),
// and further down to where it reached at the end (stackEnd): a program
// that overflows its stack grows it in the last interval, which no
// interval start shows, and its replay faulted where the recorded stack
// still went on (a bash recursion 892 KB higher than recorded).
func regions(c *format.Checkpoint, k int) []region {
	var out []region
	lowStack := uint64(0)
	for _, iv := range c.Intervals[k:] {
		for _, m := range iv.Maps {
			if m.Path == "[stack]" && (lowStack == 0 || m.Start < lowStack) {
				lowStack = m.Start
			}
		}
	}
	maps := append([]format.Mapping(nil), c.Intervals[k].Maps...)
	sort.Slice(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	for i, m := range maps {
		if !recreated(m) {
			continue
		}
		if m.Path == "[stack]" {
			floor := uint64(0)
			if i > 0 {
				floor = maps[i-1].End
			}
			low := min(lowStack, stackEnd(c, k, floor, m))
			if low < m.Start {
				m.Start = max(low, floor)
			}
		}
		out = append(out, region{m})
	}
	return out
}

// stackEnd returns how far down the stack m of interval k (above floor,
// the end of the mapping below it) reached at the end of the window, as far
// as the checkpoint tells: the pages of the window under m's start (final
// content, or the zero originals the grown pages got). m.Start when it
// shows no growth. Not the stack pointer at the end: a function's frame
// is reserved before it is written, and an overflow ends with rsp in the
// page the kernel refused (bash: 8 bytes under the fault address), which a
// replay must not have.
func stackEnd(c *format.Checkpoint, k int, floor uint64, m format.Mapping) uint64 {
	low := m.Start
	note := func(a uint64) {
		if a >= floor && a < low {
			low = a &^ (format.PageSize - 1)
		}
	}
	for _, p := range c.Final {
		note(p.Addr)
	}
	for _, iv := range c.Intervals[k:] {
		for _, p := range iv.Written {
			note(p.Addr)
		}
	}
	return low
}

// rebuild empties the stub's address space and recreates interval k's. It
// runs on the tracer thread with the stub stopped at its entry breakpoint.
func (e *engine) rebuild() error {
	s := e.stub
	cur, err := proc.ReadMaps(s.pid)
	if err != nil {
		return err
	}
	var calls []call
	for _, m := range cur {
		if m.Path == "[vsyscall]" || (m.Start <= s.base && s.base < m.End) {
			continue
		}
		calls = append(calls, call{fmt.Sprintf("unmap stub region %#x-%#x %s", m.Start, m.End, m.Path),
			unix.SYS_MUNMAP, [6]uint64{m.Start, m.End - m.Start}})
	}
	state := e.c.StartState(e.k)
	mappedAtStart(e.c, e.k, state)
	regs := regions(e.c, e.k)
	for _, r := range regs {
		flags := uint64(unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_FIXED_NOREPLACE)
		calls = append(calls, call{fmt.Sprintf("map %#x-%#x %s", r.Start, r.End, r.Path),
			unix.SYS_MMAP, [6]uint64{r.Start, r.End - r.Start, uint64(r.Prot), flags, ^uint64(0), 0}})
	}
	if err := s.injectBatch(e.mem, calls); err != nil {
		return err
	}
	if err := checkMapped(s.pid, regs); err != nil {
		return err
	}

	// Write every non-zero page of the start state, in runs of adjacent pages.
	var addrs []uint64
	inRegion := func(a uint64) (region, bool) {
		i := sort.Search(len(regs), func(i int) bool { return regs[i].End > a })
		if i < len(regs) && regs[i].Start <= a {
			return regs[i], true
		}
		return region{}, false
	}
	e.served = map[uint64]bool{}
	if e.opts.Lazy {
		return e.rebuildLazy(regs, state)
	}
	outside := 0
	for a, h := range state {
		if _, ok := inRegion(a); !ok {
			outside++
			continue
		}
		if h != format.ZeroHash {
			addrs = append(addrs, a)
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	if err := e.writePages(addrs, state); err != nil {
		return err
	}

	// Guard what the checkpoint does not hold. A region recorded as PROT_NONE
	// needs no guard: it faults in both runs, and pages that the program later
	// makes accessible there are fresh zero pages in both. Nor does one whose
	// absent pages are known to be zeros.
	guarded := 0
	calls = calls[:0]
	for _, r := range regs {
		if r.Prot == 0 {
			continue
		}
		absent := func(a uint64) bool {
			_, ok := state[a]
			return !ok && !e.zeroWhenAbsent(r.Mapping)
		}
		for a := r.Start; a < r.End; {
			if !absent(a) {
				a += pageSize
				continue
			}
			b := a
			for b < r.End && absent(b) {
				b += pageSize
			}
			calls = append(calls, call{fmt.Sprintf("guard %#x-%#x", a, b), unix.SYS_MPROTECT, [6]uint64{a, b - a, unix.PROT_NONE}})
			e.guards.add(guard{start: a, end: b, prot: r.Prot})
			guarded += int((b - a) / pageSize)
			a = b
		}
	}
	if err := s.injectBatch(e.mem, calls); err != nil {
		return err
	}
	e.logf("rebuilt %d regions, wrote %d pages, %d pages not in the checkpoint guarded, %d checkpoint pages outside the map",
		len(regs), len(addrs), guarded, outside)
	return nil
}

// checkMapped reports an error unless the process has a mapping at every
// address of regs (sorted, none overlapping): the batch that mapped them
// keeps no results, and a kernel older than 4.17 takes MAP_FIXED_NOREPLACE
// for a hint, which it may place elsewhere.
func checkMapped(pid int, regs []region) error {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return err
	}
	i := 0
	for _, r := range regs {
		for at := r.Start; at < r.End; {
			for i < len(maps) && maps[i].End <= at {
				i++
			}
			if i == len(maps) || maps[i].Start > at {
				return fmt.Errorf("map %#x-%#x %s: the kernel did not map it at that address", r.Start, r.End, r.Path)
			}
			at = maps[i].End
		}
	}
	return nil
}

// writePages writes the content state gives each page of addrs (sorted,
// none zero) into the process, in runs of adjacent pages.
func (e *engine) writePages(addrs []uint64, state map[uint64]format.Hash) error {
	const maxRun = 64
	if len(addrs) == 0 {
		return nil
	}
	// Sized for what it holds: a lazy rebuild calls this for every region,
	// most with no page to write, and a buffer of maxRun pages each time
	// came to 56 MB of a redis dump's allocations.
	buf := make([]byte, 0, min(len(addrs), maxRun)*pageSize)
	runStart := uint64(0)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if err := e.mem.WriteAt(buf, runStart); err != nil {
			return fmt.Errorf("write checkpoint pages: %w", err)
		}
		buf = buf[:0]
		return nil
	}
	for _, a := range addrs {
		if len(buf) > 0 && (a != runStart+uint64(len(buf)) || len(buf) == cap(buf)) {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(buf) == 0 {
			runStart = a
		}
		data, err := e.pages.Page(state[a])
		if err != nil {
			return fmt.Errorf("page %#x: %w", a, err)
		}
		if len(data) != pageSize {
			return fmt.Errorf("page %#x: %d bytes in the page store", a, len(data))
		}
		buf = append(buf, data...)
	}
	return flush()
}

// mappedAtStart adds to state, the start state of interval k, the pages of
// the files the window mapped before that start and still maps there that
// state lacks: pages the program had not touched yet at the boundary (not
// present then), whose content is the file's, in the mmap's record. A
// replay of the whole window maps them from the record; one from k has
// them nowhere else when no interval gave them an original (the one that
// unmapped the file does, from its shadow, but a shadow kept from before
// the mmap had none of it: every replay from such a start, in CI a later
// piece of the trial replay, reported a touched page not in the
// checkpoint), nor the final pages (a page the kernel reclaimed again
// before the end, or a file unmapped by then).
func mappedAtStart(c *format.Checkpoint, k int, state map[uint64]format.Hash) {
	for _, m := range format.FileMappedBefore(c.Syscalls, c.Intervals[k].FirstSeq) {
		i, ok := c.SyscallIndex(m.Seq)
		if !ok {
			continue
		}
		for _, p := range c.Syscalls[i].Pages {
			if _, have := state[p.Addr]; !have && p.Addr >= m.Lo && p.Addr < m.Hi {
				state[p.Addr] = p.Hash
			}
		}
	}
}

// rebuildLazy leaves every page of the recreated regions inaccessible; the
// pages of the start state are served on their first access (lazy.go).
// With Options.WrittenFirst, the pages of the start state that the
// recording shows the replayed intervals writing are written up front and
// counted as served, and only the rest is guarded: the replay touches them
// anyway, and serving each on its fault takes a stop and an injected
// mprotect (a redis-server window: 2,400 of its 2,700 touched pages, in 70
// runs).
func (e *engine) rebuildLazy(regs []region, state map[uint64]format.Hash) error {
	e.lazy = make(map[uint64]lazyPage, len(state))
	for a, h := range state {
		e.lazy[a] = lazyPage{hash: h}
	}
	// A page of a file the window mapped before this start, still mapped
	// there, is the content of that call's record to a replay of the whole
	// window: it counts for that record when served (lazyPage.seq).
	mapped := format.FileMappedBefore(e.c.Syscalls, e.c.Intervals[e.k].FirstSeq)
	for _, m := range mapped {
		for a := m.Lo; a < m.Hi; a += pageSize {
			if lp, ok := e.lazy[a]; ok {
				lp.seq, lp.orig = m.Seq, a
				e.lazy[a] = lp
			}
		}
	}
	var first []uint64 // sorted
	if e.opts.WrittenFirst {
		seen := map[uint64]bool{}
		for _, iv := range e.c.Intervals[e.k:e.until] {
			for _, p := range iv.Written {
				if _, ok := state[p.Addr]; ok && !seen[p.Addr] {
					seen[p.Addr] = true
					first = append(first, p.Addr)
				}
			}
		}
		sort.Slice(first, func(i, j int) bool { return first[i] < first[j] })
	}
	written := 0
	var guards []call
	for _, r := range regs {
		if r.Prot == 0 {
			continue
		}
		// The pages of first in r, then the runs between them guarded.
		lo := sort.Search(len(first), func(i int) bool { return first[i] >= r.Start })
		hi := sort.Search(len(first), func(i int) bool { return first[i] >= r.End })
		in := first[lo:hi]
		if r.Prot&unix.PROT_WRITE == 0 {
			// The program cannot have written these: a page of a
			// read-only mapping is among an interval's originals
			// because the mapping went away in it (a file mapped and
			// unmapped again and again: all of its pages), and
			// counting it as touched would keep it in the file.
			in = nil
		}
		var nonZero []uint64
		for _, a := range in {
			if state[a] != format.ZeroHash {
				nonZero = append(nonZero, a)
			}
		}
		if err := e.writePages(nonZero, state); err != nil {
			return err
		}
		for _, a := range in {
			e.noteMapped(e.lazy[a])
			delete(e.lazy, a)
			e.served[a] = true
		}
		written += len(in)
		at := r.Start
		for i := 0; at < r.End; i++ {
			end := r.End
			if i < len(in) {
				end = in[i]
			}
			if end > at {
				guards = append(guards, call{fmt.Sprintf("guard %#x-%#x", at, end), unix.SYS_MPROTECT, [6]uint64{at, end - at, unix.PROT_NONE}})
				e.guards.add(guard{start: at, end: end, prot: r.Prot, zero: e.zeroWhenAbsent(r.Mapping)})
			}
			at = end + pageSize
		}
	}
	if err := e.stub.injectBatch(e.mem, guards); err != nil {
		return err
	}
	// Pages of such a mapping the start state lacks (not present there)
	// come from the file too, when the trial can read it (Options.FilePage).
	for _, m := range mapped {
		for _, g := range e.guards.within(m.Lo, m.Hi) {
			g.file, g.shift = m.Seq, 0
			e.guards.add(g)
		}
	}
	e.writtenFirst = written
	e.logf("rebuilt %d regions lazily, %d pages servable, %d of them written up front", len(regs), len(e.lazy)+written, written)
	return nil
}

// zeroWhenAbsent reports whether a page of mapping m (of the
// start interval), which the checkpoint does not hold, is to read as zeros:
// not present at the start. That needs m to be anonymous private memory,
// and either
//   - the checkpoint to hold every page that was present (Header.FullPages:
//     the recorder's own checkpoint before its trial replay, or a
//     --full-pages file): a page it lacks is one the program first touched
//     during the window and that was gone again at its end (a heap that
//     grows and shrinks with every large allocation); or
//   - the replay to start after the oldest start, where the trial replay
//     that chose the pages ran from: the window's memory calls may have
//     created a page since, which the trial met as fresh memory and never
//     served. What such a page held at a later start is kept if the window
//     wrote it (the recorder keeps every written page's references for
//     such files); else it was not present there.
//
// Otherwise an absent page is one a minimized checkpoint left out, and
// stays a divergence when touched.
func (e *engine) zeroWhenAbsent(m format.Mapping) bool {
	return m.AnonymousPrivate() && (e.c.Header.FullPages || e.k > e.first)
}
