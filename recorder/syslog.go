package recorder

import (
	"fmt"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// logSyscall appends one completed syscall, with the memory the kernel wrote
// for it, to the current interval. A syscall the table does not know, or
// declares unsupported, makes the interval not replayable, naming it: the
// recorder never guesses what an unknown call wrote.
func (s *session) logSyscall(e *proc.SyscallInfo, x proc.SyscallInfo) {
	s.seq++
	rec := format.Syscall{Seq: s.seq, Tid: s.pid, Nr: int(e.Nr), Args: e.Args, Ret: x.Ret, Rip: x.Rip}
	d, ok := syscalls.Lookup(rec.Nr)
	switch {
	case !ok:
		s.notReplayable(fmt.Sprintf("syscall %s (%d) at seq %d is not in the syscall table", syscalls.Name(rec.Nr), rec.Nr, rec.Seq))
	case d.Kind == syscalls.Unsupported:
		s.notReplayable(fmt.Sprintf("syscall %s at seq %d cannot be replayed: %s", d.Name, rec.Seq, d.Note))
	default:
		if ok, why := syscalls.Check(d, rec.Args); !ok {
			s.notReplayable(fmt.Sprintf("seq %d cannot be replayed: %s", rec.Seq, why))
			break
		}
		// restart_syscall finishes a call the kernel interrupted with
		// ERESTART_RESTARTBLOCK (a boundary stop did): what it writes is what
		// that call writes (poll's revents, nanosleep's remainder).
		od, oargs := d, rec.Args
		if rec.Nr == unix.SYS_RESTART_SYSCALL && s.restartOf != nil {
			if d2, ok := syscalls.Lookup(int(s.restartOf.Nr)); ok {
				od, oargs = d2, s.restartOf.Args
			}
		}
		read := func(addr uint64, n int) ([]byte, error) {
			b := make([]byte, n)
			got, err := proc.ReadBytes(s.pid, addr, b)
			if err != nil {
				return nil, err
			}
			return b[:got], nil
		}
		ranges, err := syscalls.Outputs(od, oargs, rec.Ret, read)
		if err != nil {
			s.notReplayable(fmt.Sprintf("syscall %s at seq %d: outputs: %v", d.Name, rec.Seq, err))
			break
		}
		for _, r := range ranges {
			b, err := read(r.Addr, r.Len)
			if err != nil || len(b) != r.Len {
				s.notReplayable(fmt.Sprintf("syscall %s at seq %d: cannot read its output at %#x", d.Name, rec.Seq, r.Addr))
				break
			}
			rec.Out = append(rec.Out, format.OutBuf{Addr: r.Addr, Data: b})
		}
	}
	s.cur.syscalls = append(s.cur.syscalls, rec)
}
