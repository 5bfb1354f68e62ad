package replayer

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// Lazy pages. With Options.Lazy the rebuild writes no page: every page of the
// recreated regions stays inaccessible, and the first access to one (a
// SIGSEGV under ptrace) is served: its content is written, its protection
// restored, the faulting instruction restarted. Accesses the replayer makes
// itself (syscall output buffers, the end-state digests, the breakpoint at the
// end) serve the pages first too. The pages served are exactly the pages the
// window touches, which is what a minimal checkpoint must hold.

// lazyPage says where a servable page's content is. A page a file mmap of
// the window gave (the record's Pages) also names that call and the page's
// address in it, so that a minimal checkpoint keeps, for each such call,
// the pages of it the replay touched (Result.ServedMapped).
type lazyPage struct {
	hash format.Hash
	seq  uint64 // the mmap's record, 0 for a page of the start state
	orig uint64 // its address in that record's Pages (an mremap may move it)
}

// noteMapped counts lp, served or peeked, for the mmap record that gave it.
func (e *engine) noteMapped(lp lazyPage) {
	if lp.seq == 0 {
		return
	}
	if e.servedMapped == nil {
		e.servedMapped = map[uint64]map[uint64]bool{}
	}
	m := e.servedMapped[lp.seq]
	if m == nil {
		m = map[uint64]bool{}
		e.servedMapped[lp.seq] = m
	}
	m[lp.orig] = true
}

// filePage asks Options.FilePage for the content of page, under guard g of
// a file mapping whose record does not hold it.
func (e *engine) filePage(g guard, page uint64) (lazyPage, bool) {
	if g.file == 0 || e.opts.FilePage == nil {
		return lazyPage{}, false
	}
	orig := page - g.shift
	h, ok := e.opts.FilePage(g.file, orig)
	if !ok {
		return lazyPage{}, false
	}
	lp := lazyPage{hash: h, seq: g.file, orig: orig}
	e.lazy[page] = lp
	return lp, true
}

// servedMappedPages lists, per mmap record, the addresses (in the record)
// of its pages the replay served or peeked, in order.
func (e *engine) servedMappedPages() map[uint64][]uint64 {
	if len(e.servedMapped) == 0 {
		return nil
	}
	out := make(map[uint64][]uint64, len(e.servedMapped))
	for seq, m := range e.servedMapped {
		out[seq] = slices.Sorted(maps.Keys(m))
	}
	return out
}

// serve makes the page holding addr accessible with its recorded content, if
// it is a lazy page (or zeros, for an absent page known to have been zero:
// guard.zero). It reports whether it served one.
func (e *engine) serve(addr uint64) (bool, error) {
	page := pageDown(addr)
	lp, ok := e.lazy[page]
	g, guarded := e.guards.find(page)
	if !ok && guarded {
		lp, ok = e.filePage(g, page)
	}
	if !ok {
		if !guarded || !g.zero {
			return false, nil
		}
		lp.hash = format.ZeroHash
	}
	if !guarded {
		delete(e.lazy, page)
		return false, nil
	}
	if lp.hash != format.ZeroHash {
		data, err := e.pages.Page(lp.hash)
		if err != nil {
			return false, fmt.Errorf("page %#x: %w", page, err)
		}
		if err := e.mem.WriteAt(data, page); err != nil {
			return false, fmt.Errorf("serve page %#x: %w", page, err)
		}
	}
	if g.prot != unix.PROT_NONE {
		if e.skipExit {
			// Resumed from there, the kernel skips the call and reports
			// the single step at its exit, before the injected syscall ran.
			return false, fmt.Errorf("serve page %#x: the thread stands at a PTRACE_SYSEMU entry, where no mprotect can be injected", page)
		}
		if _, err := e.stub.injectOK(fmt.Sprintf("serve %#x", page), unix.SYS_MPROTECT, page, pageSize, uint64(g.prot)); err != nil {
			return false, err
		}
	}
	e.guards.remove(page, page+pageSize)
	delete(e.lazy, page)
	e.served[page] = true
	e.noteMapped(lp)
	return true, nil
}

// touch serves every lazy page of [addr, addr+n) before the replayer reads or
// writes that memory itself.
func (e *engine) touch(addr uint64, n int) error {
	if !e.opts.Lazy || n <= 0 {
		return nil
	}
	for p := pageDown(addr); p < addr+uint64(n); p += pageSize {
		if _, err := e.serve(p); err != nil {
			return err
		}
	}
	return nil
}

// lazyIn reports whether an output buffer lies on a page not served yet.
func (e *engine) lazyIn(outs []format.OutBuf) bool {
	for _, o := range outs {
		if e.lazyRange(o.Addr, len(o.Data)) {
			return true
		}
	}
	return false
}

// lazyRange reports whether [addr, addr+n) has a page not served yet.
func (e *engine) lazyRange(addr uint64, n int) bool {
	if !e.opts.Lazy {
		return false
	}
	for p := pageDown(addr); p < addr+uint64(n); p += pageSize {
		if _, ok := e.lazy[p]; ok {
			return true
		}
		if g, ok := e.guards.find(p); ok && g.zero {
			return true
		}
	}
	return false
}

// sigreturnEntry handles the entry of an rt_sigreturn whose signal frame is
// on pages not served yet: the kernel reads the frame itself, and a page it
// cannot read kills the program with SIGSEGV. The call is run again once the
// frame is served (skipToServe). It reports whether it did so.
func (e *engine) sigreturnEntry(regs proc.Regs) (bool, error) {
	frame := regs.Rsp - 8 // the handler's return popped the restorer's address
	end := format.SigframeEnd(frame, e.readLazy)
	if !e.lazyRange(frame, int(end-frame)) {
		return false, nil
	}
	serve := func() error {
		end := format.SigframeEnd(frame, func(addr uint64, b []byte) error {
			if err := e.touch(addr, len(b)); err != nil {
				return err
			}
			return e.mem.ReadAt(b, addr)
		})
		return e.touch(frame, int(end-frame))
	}
	return true, e.skipToServe(regs, unix.SYS_RT_SIGRETURN, serve)
}

// skippedCall is a call skipped at its entry: serve serves the memory the
// kernel reads for it, then the program runs it again.
type skippedCall struct {
	nr    int
	serve func() error
}

// skipToServe skips the call nr at its entry stop, where no page can be
// served (serving injects an mprotect). Its exit stop serves the memory
// (runAgain) and sets the program back on the syscall instruction, so the
// call comes to its entry again, with its memory in place.
func (e *engine) skipToServe(regs proc.Regs, nr int, serve func() error) error {
	regs.OrigRax = ^uint64(0)
	if err := proc.SetRegs(e.stub.tid, regs); err != nil {
		return fmt.Errorf("skip %s: %w", syscalls.Name(nr), err)
	}
	e.again = &skippedCall{nr: nr, serve: serve}
	return nil
}

// readLazy reads the program's memory, pages not served yet included, without
// serving them (peek).
func (e *engine) readLazy(addr uint64, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), int(pageDown(addr)+pageSize-addr))
		data, lazy, err := e.peek(addr)
		if err != nil {
			return err
		}
		if lazy {
			copy(b[:n], data[addr-pageDown(addr):])
		} else if err := e.mem.ReadAt(b[:n], addr); err != nil {
			return err
		}
		addr, b = addr+uint64(n), b[n:]
	}
	return nil
}

// runAgain, at the exit stop of the call skipToServe skipped, serves its
// memory and sets the program to execute the call again.
func (e *engine) runAgain(regs proc.Regs) error {
	a := e.again
	e.again = nil
	if err := a.serve(); err != nil {
		return err
	}
	return e.callAgain(regs, a.nr)
}

// peek returns the content a page not served yet would be served with,
// without serving it, and counts it as served: the end-state comparison reads
// the digest pages this way, also at a syscall-entry stop, where the mprotect
// a serve injects cannot run (a page only the kernel wrote, such as another
// thread's rseq area, is first read there). ok is false for a page that is
// not lazy (any more).
func (e *engine) peek(addr uint64) (data []byte, ok bool, err error) {
	if !e.opts.Lazy {
		return nil, false, nil
	}
	page := pageDown(addr)
	lp, ok := e.lazy[page]
	g, guarded := e.guards.find(page)
	if !ok && guarded {
		lp, ok = e.filePage(g, page)
	}
	if !guarded || (!ok && !g.zero) {
		return nil, false, nil
	}
	if !ok || lp.hash == format.ZeroHash {
		data = make([]byte, pageSize)
	} else if data, err = e.pages.Page(lp.hash); err != nil {
		return nil, false, fmt.Errorf("page %#x: %w", page, err)
	}
	if e.peeked == nil {
		e.peeked = map[uint64]bool{}
	}
	e.peeked[page] = true
	e.noteMapped(lp)
	return data, true, nil
}

// servedPages lists the served (or peeked) page addresses in order.
func (e *engine) servedPages() []uint64 {
	out := make([]uint64, 0, len(e.served)+len(e.peeked))
	for p := range e.served {
		out = append(out, p)
	}
	for p := range e.peeked {
		if !e.served[p] {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// processMemory is the user memory the kernel reads when replay executes a
// Process-kind syscall for real: it must be served before the call.
func processMemory(nr int, a [6]uint64) (addr uint64, n int) {
	switch nr {
	case unix.SYS_RT_SIGACTION:
		return a[1], 32 // struct kernel_sigaction with an 8-byte mask
	case unix.SYS_RT_SIGPROCMASK:
		return a[1], 8
	case unix.SYS_SIGALTSTACK:
		return a[0], 24
	}
	return 0, 0
}

// dropLazy forgets the servable pages of [start, end) (unmapped or replaced).
func (e *engine) dropLazy(start, end uint64) {
	for a := range e.lazy {
		if a >= start && a < end {
			delete(e.lazy, a)
		}
	}
}

// moveLazy moves the servable pages of [old, old+n) to start at dst (mremap).
func (e *engine) moveLazy(old, n, dst uint64) {
	moved := map[uint64]lazyPage{}
	for a, lp := range e.lazy {
		if a >= old && a < old+n {
			moved[a-old+dst] = lp
			delete(e.lazy, a)
		}
	}
	for a, lp := range moved {
		e.lazy[a] = lp
	}
}
