package recorder

import (
	"fmt"
	"strconv"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// A target may run under seccomp filters: a daemon that sandboxes itself, a
// systemd unit's SystemCallFilter=. Two things tprec does pass through them
// as the program's own calls would: the calls it injects (the shadow's
// clone, the wait4 that reaps it, the madvise calls around it) and the time
// calls its vDSO patch turns into syscalls. A filter that answers one of them
// with SIGSYS or a kill would kill the target (a python3 that killed itself
// on clone died of SIGSYS at tprec's first boundary). So tprec reads the
// filters and evaluates them on each such call before it makes it: the
// patch is not made, and the process not recorded, when one of its time
// calls would be refused; an injection the filters refuse is not made.

// seccompForbids is a call the target's seccomp filters would not allow.
type seccompForbids struct {
	nr     int
	action uint32
	what   string
}

func (e seccompForbids) Error() string {
	return fmt.Sprintf("its seccomp filter would %s on the %s (%s): tprec does not make it", proc.SeccompActionName(e.action), e.what, syscalls.Name(e.nr))
}

// seccompState is the leader's filters as last read, and the stop at which
// they were: they change only when the target runs (seccomp(2), prctl), so
// one read serves every injection of a stop.
type seccompState struct {
	filters     *proc.SeccompFilters
	err         error
	stop        uint64 // session.stops when read; 0: never read
	mode, count int    // the Seccomp and Seccomp_filters fields of its status then
}

// seccompFilters returns the leader's filters, looked at once per stop and
// read again when their number changed.
func (s *session) seccompFilters() (*proc.SeccompFilters, error) {
	if s.seccomp.stop != 0 && s.seccomp.stop == s.stops {
		return s.seccomp.filters, s.seccomp.err
	}
	st, err := procStatus(s.pid)
	if err != nil {
		return nil, err
	}
	mode, _ := strconv.Atoi(st["Seccomp"])
	n, _ := strconv.Atoi(st["Seccomp_filters"])
	if s.seccomp.stop == 0 || mode != s.seccomp.mode || n != s.seccomp.count {
		s.seccomp.filters, s.seccomp.err = readFilters(s.pid, mode)
		s.seccomp.mode, s.seccomp.count = mode, n
	}
	s.seccomp.stop = s.stops
	return s.seccomp.filters, s.seccomp.err
}

// seccompAllows returns nil when the target's filters allow call nr(args)
// made from the vDSO (where tprec's calls and the patched time functions
// are), else why not. what says what the call is for.
func (s *session) seccompAllows(nr int, args []uint64, ip uint64, what string) error {
	sf, err := s.seccompFilters()
	if err != nil {
		return err
	}
	return allows(sf, checkedCall{nr, args, what}, ip)
}

type checkedCall struct {
	nr   int
	args []uint64
	what string
}

func allows(sf *proc.SeccompFilters, c checkedCall, ip uint64) error {
	if !sf.Strict && len(sf.Filters) == 0 {
		return nil
	}
	var a [6]uint64
	copy(a[:], c.args)
	action, err := sf.Action(uint64(c.nr), a, ip)
	if err != nil {
		return fmt.Errorf("evaluate its seccomp filter: %w", err)
	}
	switch action & 0xffff0000 {
	case proc.SeccompAllow, proc.SeccompLog:
		return nil
	}
	return seccompForbids{nr: c.nr, action: action, what: c.what}
}

// timeCalls are the time calls the vDSO patch makes syscalls of, with the
// clocks programs read.
func timeCalls() []checkedCall {
	var calls []checkedCall
	for _, r := range vdsoRedirects {
		argSets := [][]uint64{{0, 0}}
		if r.nr == unix.SYS_CLOCK_GETTIME || r.nr == unix.SYS_CLOCK_GETRES {
			argSets = [][]uint64{{unix.CLOCK_REALTIME, 0}, {unix.CLOCK_MONOTONIC, 0}, {unix.CLOCK_MONOTONIC_COARSE, 0}, {unix.CLOCK_REALTIME_COARSE, 0}, {unix.CLOCK_BOOTTIME, 0}}
		}
		for _, args := range argSets {
			calls = append(calls, checkedCall{r.nr, args, "time call the vDSO makes once patched"})
		}
	}
	return calls
}

// seccompAllowsRecording checks, before anything is changed in the
// target, the calls recording cannot do without: the time calls of the
// patched vDSO, and the clone and wait4 of each interval's shadow. ip is in
// the vDSO.
func (s *session) seccompAllowsRecording(ip uint64) error {
	sf, err := s.seccompFilters()
	if err != nil {
		return err
	}
	calls := timeCalls()
	for _, c := range []proc.Call{shadowClone(), reapCall(1)} {
		calls = append(calls, checkedCall{c.Nr, c.Args, injectionPurpose(c.Nr)})
	}
	for _, c := range calls {
		if err := allows(sf, c, ip); err != nil {
			return err
		}
	}
	return nil
}

// injectionPurpose says what an injected call is for, in messages.
func injectionPurpose(nr int) string {
	switch nr {
	case unix.SYS_CLONE:
		return "clone that makes its shadow"
	case unix.SYS_WAIT4:
		return "wait4 that reaps a dead shadow"
	case unix.SYS_MADVISE:
		return "madvise that gives its shadow the ranges marked MADV_DONTFORK"
	case unix.SYS_CLOSE_RANGE:
		return "close_range that closes a dump shadow's files"
	case unix.SYS_PRCTL:
		return "prctl that names a shadow"
	}
	return "call"
}

// vdsoStart is the address of the [vdso] mapping (0 without one).
func vdsoStart(maps []format.Mapping) uint64 {
	for _, m := range maps {
		if m.Path == "[vdso]" {
			return m.Start
		}
	}
	return 0
}

// seccompInstall reports whether a completed call nr(arg0) = ret installed
// a seccomp filter or strict mode: seccomp(2) with SECCOMP_SET_MODE_STRICT
// or _FILTER, or prctl(PR_SET_SECCOMP).
func seccompInstall(nr, arg0 uint64, ret int64) bool {
	switch nr {
	case unix.SYS_SECCOMP:
		return ret >= 0 && (arg0 == unix.SECCOMP_SET_MODE_STRICT || arg0 == unix.SECCOMP_SET_MODE_FILTER)
	case unix.SYS_PRCTL:
		return ret >= 0 && arg0 == unix.PR_SET_SECCOMP
	}
	return false
}

// afterSeccompInstall is called with thread t stopped right after a call
// that installed a seccomp filter (the ptrace backend's exit stop; the eBPF
// programs signal the thread for it), before it runs on. A filter that
// would refuse the time calls of the patched vDSO, or the shadow's calls,
// ends the recording at once: tprec holds the thread and detaches, putting
// the vDSO back, so the program meets its filter as it would have without
// tprec.
func (s *session) afterSeccompInstall(t *thread, nr, arg0 uint64, ret int64) error {
	if !seccompInstall(nr, arg0, ret) || s.vdso == nil {
		return nil
	}
	s.seccomp.stop = 0 // read the filters again
	err := s.seccompAllowsRecording(s.vdso.insn + 2)
	if err == nil && t.tid != s.pid {
		// A filter of this thread alone (no SECCOMP_FILTER_FLAG_TSYNC).
		err = s.threadAllowsTimeCalls(t.tid)
	}
	if err == nil {
		return nil
	}
	t.hold(s.src.resumeRequest(), 0)
	return fmt.Errorf("process %d installed a seccomp filter: %w; tprec stops recording and leaves it as it was", s.pid, err)
}

// threadAllowsTimeCalls checks the patched time calls against the filters
// of thread tid.
func (s *session) threadAllowsTimeCalls(tid int) error {
	st, err := procStatus(tid)
	if err != nil {
		return err
	}
	mode, _ := strconv.Atoi(st["Seccomp"])
	sf, err := readFilters(tid, mode)
	if err != nil {
		return err
	}
	for _, c := range timeCalls() {
		if err := allows(sf, c, s.vdso.insn+2); err != nil {
			return err
		}
	}
	return nil
}

// readFilters reads the filters of thread tid, whose seccomp mode is mode,
// with an error that says what failing to read them means.
func readFilters(tid, mode int) (*proc.SeccompFilters, error) {
	sf, err := proc.ReadSeccomp(tid, mode)
	if err != nil {
		return nil, fmt.Errorf("thread %d runs under seccomp filters that tprec cannot read (%w), so it cannot tell whether its own calls would kill the process", tid, err)
	}
	return sf, nil
}
