package recorder

import (
	"fmt"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// deliver records the delivery of a signal the program catches. Thread t is
// in the signal's delivery stop. The kernel delivers it as the thread is
// resumed, with an interrupt asked for that stops the thread again at the
// first instruction of the handler (proc.DeliverStopped; a single step did
// this once, and a tprec killed during it killed the process with the
// step's SIGTRAP): the registers, extended state and signal mask there, and
// the signal frame the kernel wrote, are what a replay puts in place to
// deliver the same signal without its own kernel (format.Delivery).
//
// A replay finds the place of a delivery on the way out of a syscall (the
// thread was in one: orig_rax holds its number) by the log; one that
// interrupted user code by its registers and the digests of the pages the
// end state would be checked with at that point (signalDigests).
func (s *session) deliver(t *thread, sig int) error {
	reached, st, err := s.deliverAt(t, sig)
	switch {
	case err != nil:
		if proc.Gone(err) {
			return nil
		}
		return err
	case reached:
		s.backToJobStop(t, sig)
		return s.resume(t.tid, 0)
	case st.Event() == unix.PTRACE_EVENT_STOP && st.Status.StopSignal() == unix.SIGTRAP:
		return s.resume(t.tid, 0) // the SIGSEGV's stop comes next
	}
	return s.handle(st)
}

// deliverAt is deliver up to the handler: it records the delivery and
// leaves the thread stopped at the handler's first instruction (reached),
// or, when the delivery did not get there (noted not replayable), in the
// stop that came instead, st: an event stop with the kernel's SIGSEGV to
// come when the frame could not be written.
func (s *session) deliverAt(t *thread, sig int) (reached bool, st proc.Stop, err error) {
	name := unix.SignalName(unix.Signal(sig))
	regs, info, err := signalStop(t.tid)
	if err != nil {
		return false, st, err
	}
	if moved, err := s.clockSignalRunOut(t, sig, regs.Rip, info); moved {
		if err != nil {
			s.logf("%v", err)
		}
		if regs, err = proc.GetRegs(t.tid); err != nil {
			return false, st, err
		}
	}
	seq, err := s.src.lastSeq(s)
	if err != nil {
		return false, st, err
	}
	live := regs // as the thread is stopped
	if s.clk != nil && s.clk.inside(regs.Rip) {
		// A fault of the read itself, or a thread that would not run
		// out: the frame would return into the clock log's code or the
		// vDSO's own, which a replay does not run.
		s.notReplayable(fmt.Sprintf("signal %s came inside a clock read (rip %#x)", name, regs.Rip))
	}
	if restartedCall(t.tid, regs) {
		// The call had been interrupted without a handler (a boundary's
		// stop, or an ignored signal) and the kernel had set it up to run
		// again: the thread stands at its syscall instruction, rax holding
		// its number again, when this signal comes. For the replay that
		// is a delivery interrupting the call, which the log does not hold
		// either: stored so, with ERESTARTNOINTR, the code of a call that
		// always restarts. The frame keeps what the kernel really saved.
		regs.Rip += 2
		regs.Rax = ^uint64(512) // -513
	}
	ev := format.SignalEvent{Seq: seq, Tid: t.tid, Signo: sig, Siginfo: info, Regs: regs, Interval: s.cur.meta.Index}
	var digests []format.PageRef
	if !ev.AtSyscallExit() {
		if digests, err = s.signalDigests(regs); err != nil {
			return false, st, err
		}
	}
	if debugStops {
		s.logf("signal %s after #%d (interval from #%d): rip %#x orig_rax %d rax %d", name, seq, s.cur.meta.FirstSeq, regs.Rip, int64(regs.OrigRax), int64(regs.Rax))
	}
	if s.vdso != nil && s.mem != nil {
		// A thread in one of the vDSO patch's stubs (the ptrace backend's
		// clock reads: on its way back from the stub's syscall, most of
		// the time) is moved out of it first, as a detach moves it
		// (vdsoPatch.leave): a handler that returns into the stub once
		// the vDSO is restored (tprec gone meanwhile, or detached) lands
		// in the middle of an original instruction. The recorded
		// registers stay the stop's, where a
		// replay finds the delivery; the frame, which the replay writes
		// as recorded, returns to the stub's caller.
		moved := live
		if ok, err := s.vdso.leave(&moved, s.mem); err == nil && ok {
			if err := proc.SetRegs(t.tid, moved); err != nil {
				return false, st, err
			}
			live = moved
		}
	}
	if st, err = proc.DeliverStopped(t.tid, sig); err != nil {
		return false, st, err
	}
	if reached, err = atHandler(t.tid, st, live); err != nil || !reached {
		// The delivery did not reach a handler: the kernel could not
		// write the frame (a SIGSEGV follows), or the thread was killed.
		s.cur.signals = append(s.cur.signals, ev)
		s.notReplayable(fmt.Sprintf("signal %s delivered to thread %d after syscall %d did not reach its handler", name, t.tid, seq))
		return false, st, err
	}
	h, err := handlerState(t.tid)
	if err != nil {
		return false, st, err
	}
	h.Digests = digests
	ev.Handler = h
	s.cur.signals = append(s.cur.signals, ev)
	return true, st, nil
}

// atHandler reports whether stop st of thread tid, which DeliverStopped
// returned after the delivery of a signal from registers before, is at the
// handler: an event stop with the stack moved for the frame. A delivery
// that failed leaves rsp as it was (rip may have moved back onto a syscall
// the kernel restarts).
func atHandler(tid int, st proc.Stop, before format.Regs) (bool, error) {
	if st.Exited() || st.Event() != unix.PTRACE_EVENT_STOP || st.Status.StopSignal() != unix.SIGTRAP {
		return false, nil
	}
	regs, err := proc.GetRegs(tid)
	if err != nil {
		return false, err
	}
	return regs.Rsp != before.Rsp, nil
}

// maxFrame bounds a signal frame (the XSAVE area is a few kilobytes today).
const maxFrame = 64 << 10

// handlerState reads the state of a thread stopped at its handler's first
// instruction: registers, extended state, signal mask, and the frame from
// rsp up to the end of its FPU state.
func handlerState(tid int) (*format.Delivery, error) {
	regs, err := proc.GetRegs(tid)
	if err != nil {
		return nil, err
	}
	xs, err := proc.GetXState(tid)
	if err != nil {
		return nil, err
	}
	mask, err := proc.GetSigmask(tid)
	if err != nil {
		return nil, err
	}
	end := format.SigframeEnd(regs.Rsp, func(addr uint64, b []byte) error {
		if n, err := proc.ReadBytes(tid, addr, b); err != nil || n != len(b) {
			return fmt.Errorf("read %#x: %v", addr, err)
		}
		return nil
	})
	if end-regs.Rsp > maxFrame {
		return nil, fmt.Errorf("signal frame at %#x: %d bytes", regs.Rsp, end-regs.Rsp)
	}
	frame := make([]byte, end-regs.Rsp)
	if n, err := proc.ReadBytes(tid, regs.Rsp, frame); err != nil || n != len(frame) {
		return nil, fmt.Errorf("read the signal frame at %#x: %v", regs.Rsp, err)
	}
	return &format.Delivery{Regs: regs, XState: xs, SigMask: mask, FrameAddr: regs.Rsp, Frame: frame}, nil
}

// signalDigests digests, at a delivery in user code, the pages a replay
// compares there (format.EndDigestPages: the stack page, the pages the
// interval wrote so far, from the pagemap against the shadow's, then the
// pages the interval before wrote). Early in an interval the pages written
// so far are few or none, and a loop that keeps its state in the heap
// passes the same registers and stack page many times: python3 hashing in
// a loop had SIGALRM delivered 250 passes early by a replay from the
// interval before, with the boundary's own digests matching only at the
// right pass. The previous interval's pages are the ones the boundary
// digests compare too.
func (s *session) signalDigests(regs format.Regs) ([]format.PageRef, error) {
	var written []format.PageRef
	if s.shadow != nil {
		maps := s.cur.meta.Maps
		snap, err := s.readSnapshotOf(maps, func(m format.Mapping) bool { return !proc.Special(m) })
		if err != nil {
			return nil, err
		}
		addrs, err := s.writtenPages(maps, snap, s.shadow)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			written = append(written, format.PageRef{Addr: a})
		}
	}
	written = append(written, s.ring.lastWritten(s.cur.meta.Index)...)
	var rseqs []format.Rseq
	for _, t := range s.cur.meta.Threads {
		if t.Rseq.Len != 0 {
			rseqs = append(rseqs, t.Rseq)
		}
	}
	addrs := format.EndDigestPages(regs.Rsp, written)
	out := make([]format.PageRef, 0, len(addrs))
	buf := make([]byte, len(addrs)*format.PageSize)
	if proc.ReadPages(s.pid, addrs, buf) == nil {
		for i, a := range addrs {
			page := buf[i*format.PageSize : (i+1)*format.PageSize]
			out = append(out, format.PageRef{Addr: a, Hash: format.DigestPage(a, page, rseqs, regs.Rsp)})
		}
		return out, nil
	}
	// A page the previous interval wrote may be unmapped now: one read a
	// page, leaving those out.
	page := buf[:format.PageSize]
	for _, a := range addrs {
		if n, err := proc.ReadBytes(s.pid, a, page); err != nil || n != len(page) {
			continue // not mapped: nothing to compare
		}
		out = append(out, format.PageRef{Addr: a, Hash: format.DigestPage(a, page, rseqs, regs.Rsp)})
	}
	return out, nil
}

// restartedCall reports whether a thread at a signal-delivery stop stands at
// the syscall instruction of a call the kernel set up to run again.
func restartedCall(tid int, regs format.Regs) bool {
	if int64(regs.OrigRax) < 0 || regs.Rax != regs.OrigRax {
		return false
	}
	insn := make([]byte, 2)
	n, err := proc.ReadBytes(tid, regs.Rip, insn)
	return err == nil && n == 2 && insn[0] == 0x0f && insn[1] == 0x05
}
