package recorder

import (
	"fmt"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// source delivers the syscall log of the target. The ptrace source logs each
// call at its syscall-exit stop; a source that collects records elsewhere
// (the eBPF ringbuf) hands them over in sync.
type source interface {
	// name is the backend name written into the checkpoint header.
	name() string
	// resumeRequest is the ptrace request that restarts the target after any
	// stop: PTRACE_SYSCALL when the source needs syscall stops, else PTRACE_CONT.
	resumeRequest() int
	// sync is called with the target stopped, before an interval closes: it
	// must put every syscall completed so far into the interval's log.
	sync(s *session) error
	// ownSignal reports whether a signal stop is one the source caused
	// (then the session handles it and suppresses the signal).
	ownSignal(sig int) bool
	// catchUp runs after the session handled an own signal: the source
	// may hold the stopped thread until its reader has caught up.
	catchUp()
	// heldFor reports how many stops catchUp held, and for how long.
	heldFor() (int, time.Duration)
	// opened is called when an interval has started, the target still
	// stopped (after the recorder's own injected calls).
	opened(s *session) error
	// checkWritten sees the pagemap's written set of the interval that
	// sync closed, over the mappings present at its start.
	checkWritten(s *session, maps []format.Mapping, written []uint64)
	// lastSeq returns the sequence number of the last syscall the target
	// completed, called with the thread that matters stopped.
	lastSeq(s *session) (uint64, error)
	close()
}

// ptraceSource reads syscall results at PTRACE_SYSCALL exit stops.
type ptraceSource struct{}

func (ptraceSource) name() string                                      { return "ptrace" }
func (ptraceSource) resumeRequest() int                                { return unix.PTRACE_SYSCALL }
func (ptraceSource) sync(s *session) error                             { return nil }
func (ptraceSource) opened(s *session) error                           { return nil }
func (ptraceSource) ownSignal(sig int) bool                            { return false }
func (ptraceSource) catchUp()                                          {}
func (ptraceSource) heldFor() (int, time.Duration)                     { return 0, 0 }
func (ptraceSource) close()                                            {}
func (ptraceSource) checkWritten(*session, []format.Mapping, []uint64) {}
func (ptraceSource) lastSeq(s *session) (uint64, error)                { return s.seq, nil }

// appendSyscall adds one completed syscall to the current interval, giving
// it the next sequence number. problem, if set, says why its outputs could
// not be captured. A syscall the table does not know or declares unsupported
// makes the interval not replayable, naming it: the recorder never guesses
// what an unknown call wrote.
func (s *session) appendSyscall(rec format.Syscall, problem string) {
	if s.cur == nil {
		return
	}
	s.seq++
	rec.Seq = s.seq
	restarted(&rec, s.restarts)
	if why := s.vforks.replayProblem(&rec, problem); why != "" {
		s.notReplayable(why)
	}
	s.noteMmap(&rec)
	if _, n := changesMemory(&rec); n > 0 {
		s.cur.memCalls = append(s.cur.memCalls, s.cur.syscalls.len())
	}
	s.cur.syscalls.append(rec)
}

// restarted turns a restart_syscall record into the call it finishes: one
// the kernel interrupted with ERESTART_RESTARTBLOCK (a boundary stop did, or
// it was in progress when recording began). The program sees one call, so
// the log holds one: the interrupted call with the final result and what it
// wrote (poll's revents, nanosleep's remainder). Any call of the thread ends
// the wait for it.
func restarted(rec *format.Syscall, restarts map[int]*proc.SyscallInfo) {
	r := restarts[rec.Tid]
	if r == nil {
		return
	}
	if rec.Nr == unix.SYS_RESTART_SYSCALL {
		rec.Nr, rec.Args = int(r.Nr), r.Args
	}
	delete(restarts, rec.Tid)
}

// replayProblem says why a logged call makes its interval not replayable:
// a call outside the table, one replay cannot do, an argument form it does
// not support, or a problem the source met building the record. A call that
// may have made a vfork child gets the outputs its capture took (vfork.go).
func (v *vforkCaptures) replayProblem(rec *format.Syscall, problem string) string {
	if problem == "" && vforkCall(rec) {
		return v.outputs(rec)
	}
	d, ok := syscalls.Lookup(rec.Nr)
	switch {
	case !ok:
		return fmt.Sprintf("syscall %s (%d) at seq %d is not in the syscall table", syscalls.Name(rec.Nr), rec.Nr, rec.Seq)
	case d.Kind == syscalls.Unsupported:
		return fmt.Sprintf("syscall %s at seq %d cannot be replayed: %s", d.Name, rec.Seq, d.Note)
	}
	if ok, why := syscalls.Check(d, rec.Args); !ok {
		return fmt.Sprintf("seq %d cannot be replayed: %s", rec.Seq, why)
	}
	if problem != "" {
		return fmt.Sprintf("syscall %s at seq %d: %s", d.Name, rec.Seq, problem)
	}
	return ""
}

// callLog is an interval's syscall log, kept in blocks of logBlock calls:
// appending never moves a call, so a log of a million calls (a quarter
// second of a syscall-heavy program) grows without copying what it holds,
// and one allocation serves thousands of calls.
type callLog struct {
	blocks [][]format.Syscall
	n      int
}

const logBlock = 4096

func (l *callLog) append(rec format.Syscall) {
	if k := len(l.blocks); k == 0 || len(l.blocks[k-1]) == logBlock {
		l.blocks = append(l.blocks, make([]format.Syscall, 0, logBlock))
	}
	b := &l.blocks[len(l.blocks)-1]
	*b = append(*b, rec)
	l.n++
}

func (l *callLog) len() int { return l.n }

// at returns the i-th call.
func (l *callLog) at(i int) *format.Syscall { return &l.blocks[i/logBlock][i%logBlock] }

// all yields the calls in order.
func (l *callLog) all() func(yield func(*format.Syscall) bool) {
	return func(yield func(*format.Syscall) bool) {
		for _, b := range l.blocks {
			for i := range b {
				if !yield(&b[i]) {
					return
				}
			}
		}
	}
}

// logPtraceSyscall builds the record of a call seen at its entry and exit
// stops, reading the memory the kernel wrote for it.
func (s *session) logPtraceSyscall(tid int, e *proc.SyscallInfo, x proc.SyscallInfo) {
	rec := format.Syscall{Tid: tid, Nr: int(e.Nr), Args: e.Args, Ret: x.Ret, Rip: x.Rip}
	restarted(&rec, s.restarts)
	d, ok := syscalls.Lookup(rec.Nr)
	if !ok || d.Kind == syscalls.Unsupported {
		s.appendSyscall(rec, "")
		return
	}
	read := func(addr uint64, n int) ([]byte, error) {
		b := make([]byte, n)
		got, err := proc.ReadBytes(s.pid, addr, b)
		if err != nil {
			return nil, err
		}
		return b[:got], nil
	}
	ranges, err := syscalls.Outputs(d, rec.Args, rec.Ret, read)
	if err != nil {
		s.appendSyscall(rec, fmt.Sprintf("outputs: %v", err))
		return
	}
	for _, r := range ranges {
		b, err := read(r.Addr, r.Len)
		if err != nil || len(b) != r.Len {
			s.appendSyscall(rec, fmt.Sprintf("cannot read its output at %#x", r.Addr))
			return
		}
		rec.Out = append(rec.Out, format.OutBuf{Addr: r.Addr, Data: b})
	}
	s.appendSyscall(rec, "")
}
