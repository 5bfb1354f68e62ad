package recorder

import (
	"fmt"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// boundary ends the current interval and starts the next one. The target is in
// an event stop.
func (s *session) boundary() error {
	now := time.Now()
	if err := s.closeInterval(now); err != nil {
		return err
	}
	t1 := time.Now()
	err := s.openInterval(now)
	if debugStops {
		s.logf("boundary: close %v, open %v", t1.Sub(now), time.Since(t1))
	}
	return err
}

// withSignalsBlocked runs fn (which injects syscalls) with every signal of the
// target blocked, so nothing is delivered in the middle of an injection;
// signals that arrive meanwhile stay pending and are delivered afterwards.
func (s *session) withSignalsBlocked(fn func() error) error {
	mask, err := proc.GetSigmask(s.pid)
	if err != nil {
		return err
	}
	if err := proc.SetSigmask(s.pid, ^uint64(0)); err != nil {
		return err
	}
	ferr := fn()
	if err := proc.SetSigmask(s.pid, mask); err != nil && ferr == nil {
		ferr = err
	}
	return ferr
}

// openInterval records the state at the interval start and creates its shadow.
func (s *session) openInterval(now time.Time) error {
	regs, err := proc.GetRegs(s.pid)
	if err != nil {
		return err
	}
	xs, err := proc.GetXState(s.pid)
	if err != nil {
		return err
	}
	mask, err := proc.GetSigmask(s.pid)
	if err != nil {
		return err
	}
	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		return err
	}
	present, err := s.presentPages(maps)
	if err != nil {
		return err
	}
	nregs, inSys := normalize(regs)
	rseq := threadRseq(s.pid)
	if inSys && int64(regs.Rax) == -516 && s.restartOf == nil {
		// Stopped in a call the kernel resumes through restart_syscall, whose
		// entry the recorder did not see (it attached during the call).
		s.restartOf = &proc.SyscallInfo{Op: proc.SyscallEntry, Nr: regs.OrigRax,
			Args: [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9}}
	}
	iv := &interval{
		meta: format.Interval{
			Index:      s.nextIndex,
			Start:      now,
			FirstSeq:   s.seq + 1,
			Threads:    []format.Thread{{Tid: s.pid, Regs: nregs, XState: xs, SigMask: mask, InSyscall: inSys, Rseq: rseq}},
			Maps:       maps,
			Replayable: true,
		},
		present: present,
	}
	s.nextIndex++
	err = s.withSignalsBlocked(func() error {
		s.reapZombie()
		sh, err := s.createShadow()
		if err != nil {
			return err
		}
		s.shadow = sh
		return nil
	})
	if err != nil {
		return err
	}
	s.cur = iv
	return s.src.opened(s)
}

// closeInterval saves the originals of the pages written during the current
// interval from its shadow, kills the shadow and moves the interval to the ring.
func (s *session) closeInterval(now time.Time) error {
	iv := s.cur
	if iv == nil {
		return nil
	}
	if err := s.src.sync(s); err != nil {
		s.notReplayable("syscall log incomplete: " + err.Error())
	}
	s.cur = nil
	iv.meta.End = now
	defer func() {
		s.ring.push(iv)
		s.killShadow()
	}()
	if s.shadow == nil {
		return s.markLost(iv, "no shadow for this interval")
	}
	written, err := s.writtenPages(iv.meta.Maps)
	if err != nil {
		return s.markLost(iv, err.Error())
	}
	s.src.checkWritten(s, iv.meta.Maps, written)
	buf := make([]byte, len(written)*format.PageSize)
	if err := proc.ReadPages(s.shadow.pid, written, buf); err != nil {
		// Read one by one; a page the shadow cannot give (beyond the end of a
		// file mapping, for instance) is left out and replay reports it if used.
		for i, a := range written {
			if _, err := proc.ReadBytes(s.shadow.pid, a, buf[i*format.PageSize:(i+1)*format.PageSize]); err != nil {
				written[i] = 0
			}
		}
	}
	for i, a := range written {
		if a != 0 {
			s.ring.addPage(iv, a, buf[i*format.PageSize:(i+1)*format.PageSize])
		}
	}
	return nil
}

func (s *session) markLost(iv *interval, why string) error {
	iv.meta.Replayable = false
	if iv.meta.Reason == "" {
		iv.meta.Reason = "page originals lost: " + why
	}
	return nil
}

func (s *session) notReplayable(why string) {
	if s.cur != nil && s.cur.meta.Replayable {
		s.cur.meta.Replayable = false
		s.cur.meta.Reason = why
	}
}

// recorded reports whether a mapping's pages are part of the checkpoint.
func recorded(m format.Mapping) bool {
	return m.Prot&format.ProtRead != 0 && !proc.Special(m)
}

// writtenPages compares the target's page frames with the shadow's over the
// private mappings that existed at the interval start. A page is written when
// the two no longer share a frame (the copy-on-write broke), when an anonymous
// page appeared in the target only, or when it disappeared from the target.
func (s *session) writtenPages(maps []format.Mapping) ([]uint64, error) {
	var out []uint64
	for _, m := range maps {
		if m.Shared || proc.Special(m) {
			continue
		}
		t, err := s.pm.Range(m.Start, m.End)
		if err != nil {
			return nil, err
		}
		sh, err := s.shadow.pm.Range(m.Start, m.End)
		if err != nil {
			return nil, err
		}
		for i := range t {
			if sameFrame(t[i], sh[i]) {
				continue
			}
			if t[i]&proc.PMPresent != 0 && t[i]&proc.PMFile != 0 && sh[i]&(proc.PMPresent|proc.PMSwapped) == 0 {
				// The target maps a page that is not its own anonymous copy (a
				// file's page, or the shared zero page) where the shadow has
				// nothing yet: fork does not copy page tables of file mappings
				// without private copies (mm/memory.c: vma_needs_copy). The
				// content is what the shadow would fault in: not written.
				continue
			}
			out = append(out, m.Start+uint64(i)*format.PageSize)
		}
	}
	return out, nil
}

func sameFrame(a, b uint64) bool {
	const in = proc.PMPresent | proc.PMSwapped
	if a&in == 0 && b&in == 0 {
		return true
	}
	if a&in != b&in {
		return false
	}
	return a&proc.PMPFNMask == b&proc.PMPFNMask
}

// presentPages lists the pages of recorded mappings that are in memory (or
// swapped out): the pages a replay from this interval may need.
func (s *session) presentPages(maps []format.Mapping) ([]pageRun, error) {
	var runs []pageRun
	for _, m := range maps {
		if !recorded(m) {
			continue
		}
		ents, err := s.pm.Range(m.Start, m.End)
		if err != nil {
			return nil, fmt.Errorf("present pages: %w", err)
		}
		for i, e := range ents {
			if e&(proc.PMPresent|proc.PMSwapped) == 0 {
				continue
			}
			a := m.Start + uint64(i)*format.PageSize
			if n := len(runs); n > 0 && runs[n-1].end == a {
				runs[n-1].end = a + format.PageSize
			} else {
				runs = append(runs, pageRun{a, a + format.PageSize})
			}
		}
	}
	return runs, nil
}

// abandonIntervals forgets the ring and the current interval (exec replaced
// the address space, or recording stops).
func (s *session) abandonIntervals() {
	s.killShadow()
	if s.cur != nil {
		s.cur.closeFiles()
	}
	s.cur = nil
	s.ring.reset()
}

// threadRseq reads a thread's rseq registration; the zero value if it has none
// or the kernel cannot say.
func threadRseq(tid int) format.Rseq {
	addr, n, sig, err := proc.GetRseq(tid)
	if err != nil {
		return format.Rseq{}
	}
	return format.Rseq{Addr: addr, Len: n, Sig: sig}
}
