package replayer

import (
	"fmt"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// memoryEntry prepares a Memory-kind syscall at its entry stop: the call is
// executed for real, rewritten where the recorded one depended on things the
// replay does not have (files, the kernel's choice of address, the break).
func (e *engine) memoryEntry(p *pending, regs *proc.Regs) error {
	rec := p.rec
	a := rec.Args
	p.real, p.want = true, rec.Ret
	rewrite := func(nr int, args ...uint64) {
		// The exit puts back the argument registers the program had: the
		// kernel preserves them, and the log holds only those the call
		// takes (the recorder zeroes the others).
		p.rewrote = true
		p.args = [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9}
		regs.OrigRax = uint64(nr)
		dst := []*uint64{&regs.Rdi, &regs.Rsi, &regs.Rdx, &regs.R10, &regs.R8, &regs.R9}
		for i, v := range args {
			*dst[i] = v
		}
	}
	switch rec.Nr {
	case unix.SYS_MMAP:
		if rec.Ret < 0 {
			p.real = false // the failure is replayed as recorded
			return nil
		}
		addr, length, prot, flags := uint64(rec.Ret), pageUp(a[1]), a[2], a[3]
		nf := uint64(unix.MAP_PRIVATE|unix.MAP_ANONYMOUS) | flags&unix.MAP_NORESERVE
		if flags&unix.MAP_FIXED != 0 && flags&unix.MAP_FIXED_NOREPLACE == 0 {
			nf |= unix.MAP_FIXED // the program meant to replace what is there
		} else {
			nf |= unix.MAP_FIXED_NOREPLACE // a clash means the address spaces differ
		}
		file := flags&unix.MAP_ANONYMOUS == 0
		rewrite(unix.SYS_MMAP, addr, length, prot, nf, ^uint64(0), 0)
		seq, fd := rec.Seq, int32(a[4])
		p.after = func() error {
			e.guards.remove(addr, addr+length)
			e.dropLazy(addr, addr+length)
			if !file || prot == unix.PROT_NONE {
				return nil
			}
			// The file's content at the time of the call is in the
			// checkpoint for the pages the window may touch; the rest is
			// kept inaccessible so that a touch is reported, not read as
			// zeros.
			return e.fillMapping(addr, addr+length, uint32(prot), seq, rec.Pages,
				fmt.Sprintf("file-backed mmap at seq %d (fd %d): content not recorded", seq, fd))
		}
	case unix.SYS_MUNMAP:
		start, end := a[0], a[0]+pageUp(a[1])
		p.after = func() error {
			if rec.Ret == 0 {
				e.guards.remove(start, end)
				e.dropLazy(start, end)
			}
			return nil
		}
	case unix.SYS_MPROTECT, unix.SYS_PKEY_MPROTECT:
		start, end, prot := a[0], a[0]+pageUp(a[1]), uint32(a[2])
		p.after = func() error {
			if rec.Ret != 0 {
				return nil
			}
			// The program changed the protection of pages replay keeps
			// inaccessible: remember the new one and keep them guarded.
			for _, g := range e.guards.within(start, end) {
				g.prot = prot
				e.guards.add(g)
				if prot == unix.PROT_NONE {
					continue
				}
				if _, err := e.stub.injectOK(fmt.Sprintf("guard %#x-%#x", g.start, g.end), unix.SYS_MPROTECT, g.start, g.end-g.start, unix.PROT_NONE); err != nil {
					return err
				}
			}
			return nil
		}
	case unix.SYS_MREMAP:
		if rec.Ret < 0 {
			return nil
		}
		old, oldLen, newLen, flags := a[0], pageUp(a[1]), pageUp(a[2]), a[3]
		dst := uint64(rec.Ret)
		if dst != old {
			rewrite(unix.SYS_MREMAP, old, a[1], a[2], flags|unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, dst)
		}
		p.after = func() error {
			if flags&unix.MREMAP_DONTUNMAP != 0 {
				return nil
			}
			if dst != old {
				e.guards.remove(dst, dst+newLen)
				e.dropLazy(dst, dst+newLen)
				e.guards.move(old, oldLen, dst)
				e.moveLazy(old, oldLen, dst)
			}
			if newLen < oldLen {
				e.guards.remove(dst+newLen, dst+oldLen)
				e.dropLazy(dst+newLen, dst+oldLen)
			}
			return nil
		}
	case unix.SYS_BRK:
		return e.brkEntry(p, rewrite)
	}
	return nil
}

// brkEntry replays brk as the mmap or munmap that moves the end of the heap
// where the recorded call moved it. The stub's own break is elsewhere and the
// kernel refuses to move a break over existing mappings, so brk itself cannot
// be executed.
func (e *engine) brkEntry(p *pending, rewrite func(nr int, args ...uint64)) error {
	rec := p.rec
	p.real = false
	if rec.Ret <= 0 {
		return nil
	}
	newEnd := pageUp(uint64(rec.Ret))
	if e.brkEnd == 0 {
		// No heap yet and none shown later: the first brk answers where the
		// break starts (brk(0) or a failed move return the current break).
		e.brkEnd = newEnd
	}
	cur := e.brkEnd
	switch {
	case newEnd > cur:
		p.real, p.want = true, int64(cur)
		rewrite(unix.SYS_MMAP, cur, newEnd-cur, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0)
	case newEnd < cur:
		p.real, p.want = true, 0
		rewrite(unix.SYS_MUNMAP, newEnd, cur-newEnd)
	default:
		return nil
	}
	p.after = func() error {
		if newEnd < cur {
			e.guards.remove(newEnd, cur)
		}
		e.brkEnd = newEnd
		return nil
	}
	return nil
}

// fillMapping writes the recorded content of a new mapping [start, end) and
// guards the pages the checkpoint does not hold.
func (e *engine) fillMapping(start, end uint64, prot uint32, seq uint64, pages []format.PageRef, reason string) error {
	if e.opts.Lazy {
		for _, pr := range pages {
			if pr.Addr >= start && pr.Addr < end {
				e.lazy[pr.Addr] = lazyPage{hash: pr.Hash, seq: seq, orig: pr.Addr}
			}
		}
		if _, err := e.stub.injectOK(fmt.Sprintf("guard %#x-%#x", start, end), unix.SYS_MPROTECT, start, end-start, unix.PROT_NONE); err != nil {
			return err
		}
		e.guards.add(guard{start: start, end: end, prot: prot, reason: reason, file: seq})
		return nil
	}
	have := make(map[uint64]bool, len(pages))
	for _, pr := range pages {
		if pr.Addr < start || pr.Addr >= end {
			continue
		}
		have[pr.Addr] = true
		if pr.Hash == format.ZeroHash {
			continue
		}
		data, err := e.pages.Page(pr.Hash)
		if err != nil {
			return fmt.Errorf("page %#x: %w", pr.Addr, err)
		}
		if err := e.mem.WriteAt(data, pr.Addr); err != nil {
			return err
		}
	}
	for a := start; a < end; {
		if have[a] {
			a += pageSize
			continue
		}
		b := a
		for b < end && !have[b] {
			b += pageSize
		}
		if _, err := e.stub.injectOK(fmt.Sprintf("guard %#x-%#x", a, b), unix.SYS_MPROTECT, a, b-a, unix.PROT_NONE); err != nil {
			return err
		}
		e.guards.add(guard{start: a, end: b, prot: prot, reason: reason})
		a = b
	}
	return nil
}
