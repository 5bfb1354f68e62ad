package recorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// ErrMultiThreaded is returned for a target with more than one thread.
var ErrMultiThreaded = errors.New("multi-threaded targets are not supported yet")

// ErrNoProcess is returned when the target does not exist (or vanished).
var ErrNoProcess = errors.New("no such process")

// ErrPermission is returned when the kernel refuses to let tprec trace the target.
var ErrPermission = errors.New("not permitted to trace the process")

// Options of the target (PTRACE_O_*). EXITKILL is deliberately absent: if tprec
// dies, the target must run on. The shadow gets EXITKILL of its own.
const targetOptions = unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACEEXIT

// fatalSignals are the signals whose delivery means a crash: a checkpoint is
// written before the signal proceeds.
var fatalSignals = map[unix.Signal]bool{
	unix.SIGSEGV: true, unix.SIGBUS: true, unix.SIGFPE: true, unix.SIGILL: true,
	unix.SIGABRT: true, unix.SIGTRAP: true, unix.SIGSYS: true,
}

type state int

const (
	stateStarting state = iota // waiting for the first stop to set up
	stateRecording
	stateStopped // recording given up; the loop detaches and returns
)

// session is one recording. Every method runs on the tracer thread.
type session struct {
	o     Options
	pid   int
	tr    *proc.Tracer
	mem   *proc.Mem
	pm    *proc.Pagemap
	vdso  *vdsoPatch
	ring  *ring
	hdr   format.Header
	state state

	cur         *interval
	nextIndex   int
	seq         uint64
	entry       *proc.SyscallInfo // syscall in progress
	restartOf   *proc.SyscallInfo // last call interrupted for restart_syscall
	execOrphans map[int]bool      // shadows that die after the target's exec
	src         source
	shadow      *shadow
	zombie      int // killed shadow the target still has to reap
	// deferred is work a boundary leaves for after the target resumes
	// (runDeferred): saving the closed interval's originals.
	deferred []func()
	// marked are files opened at the eBPF programs' signal after a file
	// mmap, waiting for their call's record (resolveMmaps).
	marked      []*mappedFile
	want        struct{ boundary, dump bool }
	gone        bool
	exitStatus  unix.WaitStatus
	dumps       []string
	mu          sync.Mutex     // guards dumps and deadShadows (checkpoints finish in the background)
	deadShadows []int          // killed dump shadows to collect
	pending     sync.WaitGroup // checkpoints being finished
}

// Record records a process until it exits or ctx is cancelled (then it
// detaches and leaves the process running). requests delivers dump requests.
func Record(ctx context.Context, o Options, requests <-chan struct{}) error {
	o.defaults()
	if err := os.MkdirAll(o.OutputDir, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	s := &session{o: o, tr: proc.NewTracer(), ring: newRing(o.Keep, o.MaxMemory)}
	defer s.tr.Close()
	var launched *exec.Cmd
	var release func() error
	err := s.tr.Do(func() error {
		if len(o.Cmd) > 0 {
			var err error
			launched, release, err = s.launch(o.Cmd)
			return err
		}
		return s.attach(o.Pid)
	})
	if err != nil {
		return err
	}
	s.src, err = newSource(o, s.pid, s.logf)
	if err != nil {
		s.tr.Do(func() error { return s.detach("backend unavailable") })
		return err
	}
	defer s.src.close()
	if release != nil {
		if err := release(); err != nil {
			return err
		}
	}
	ready, ack := startWaiter(s.pid)
	ticker := time.NewTicker(o.Interval)
	defer ticker.Stop()
	err = s.tr.Do(func() error { return s.loop(ctx, ticker.C, requests, ready, ack) })
	s.pending.Wait() // checkpoints still being minimized and written
	if launched != nil {
		// The launched command is our child: collect it so it does not linger.
		launched.Wait()
	}
	return err
}

// attach seizes a running process and asks it to stop.
func (s *session) attach(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("attach: invalid pid %d", pid)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("attach to %d: %w", pid, ErrNoProcess)
	}
	if len(tasks) > 1 {
		return fmt.Errorf("attach to %d: it has %d threads: %w", pid, len(tasks), ErrMultiThreaded)
	}
	if err := proc.Seize(pid, targetOptions); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("attach to %d: %w: tprec needs root or CAP_SYS_PTRACE (and kernel.yama.ptrace_scope <= 1 for a process that is not its child): run it with sudo", pid, ErrPermission)
		}
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("attach to %d: %w", pid, ErrNoProcess)
		}
		return err
	}
	s.pid = pid
	s.hdr.StartTime = time.Now()
	return s.interrupt()
}

// launch starts cmd held at a pipe read in /bin/sh, seizes that shell, and
// returns a function that lets it exec the command: recording starts at the
// exec, so not one instruction of the program runs unrecorded.
func (s *session) launch(argv []string) (*exec.Cmd, func() error, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	sh := exec.Command("/bin/sh", append([]string{"-c", `read _ <&3; exec 3<&-; exec "$@"`, "tprec-launch"}, argv...)...)
	sh.Stdin, sh.Stdout, sh.Stderr = os.Stdin, os.Stdout, os.Stderr
	sh.ExtraFiles = []*os.File{r}
	if err := sh.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, nil, fmt.Errorf("launch %s: %w", argv[0], err)
	}
	r.Close()
	if err := proc.Seize(sh.Process.Pid, targetOptions); err != nil {
		sh.Process.Kill()
		w.Close()
		return nil, nil, err
	}
	s.pid = sh.Process.Pid
	s.hdr.StartTime = time.Now()
	// The seize may land in the last steps of the shell's own exec (Start
	// returns once the exec is under way), which then reports an exec event.
	// Settle that here, with the shell parked on its pipe, so that the next
	// exec event the loop sees is the command's.
	if err := s.settleLaunch(); err != nil {
		sh.Process.Kill()
		w.Close()
		return nil, nil, err
	}
	release := func() error {
		defer w.Close()
		_, err := w.Write([]byte{'\n'})
		return err
	}
	return sh, release, nil
}

// settleLaunch interrupts the freshly seized launcher shell, lets a pending
// exec event of the shell itself pass, and resumes it.
func (s *session) settleLaunch() error {
	if err := proc.Interrupt(s.pid); err != nil {
		return err
	}
	for {
		st, err := proc.Wait(s.pid)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("launch: the shell exited (%v)", st)
		}
		switch {
		case st.Event() == unix.PTRACE_EVENT_EXEC:
			// Any ptrace stop satisfies the interrupt: ask again.
			if err := proc.Resume(unix.PTRACE_CONT, s.pid, 0); err != nil {
				return err
			}
			if err := proc.Interrupt(s.pid); err != nil {
				return err
			}
		case st.Event() == unix.PTRACE_EVENT_STOP:
			return proc.Resume(unix.PTRACE_CONT, s.pid, 0)
		default:
			if err := proc.Resume(unix.PTRACE_CONT, s.pid, st.Signal()); err != nil {
				return err
			}
		}
	}
}

// interrupt asks the target to stop soon. The kernel satisfies the request
// with whatever ptrace stop comes next (kernel/signal.c: ptrace_stop clears a
// pending JOBCTL_TRAP_STOP at any trap), so the work it is for is done at the
// next stop that allows it, not only at PTRACE_EVENT_STOP.
func (s *session) interrupt() error {
	return proc.Interrupt(s.pid)
}

// wanted reports whether setup, a boundary or a dump waits for a stop.
func (s *session) wanted() bool {
	return s.state == stateStarting || s.want.boundary || s.want.dump
}

// startWaiter returns a channel that says "a wait event is pending" without
// consuming it (waitid with WNOWAIT): the tracer thread can then select on
// the interval timer and on events at once. Any thread of the process may wait
// for tracees of any of its threads (kernel/exit.c: do_wait walks the group).
//
// It waits for the target only: the process also has other children and
// tracees (shadows, the stub of a trial replay running in the background),
// whose events belong to whoever waits for them by pid.
func startWaiter(pid int) (<-chan struct{}, chan<- struct{}) {
	ready := make(chan struct{})
	ack := make(chan struct{})
	go func() {
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				// ECHILD: nothing left to wait for; the loop ends on its own.
				time.Sleep(10 * time.Millisecond)
			}
			ready <- struct{}{}
			<-ack
		}
	}()
	return ready, ack
}

func (s *session) loop(ctx context.Context, tick <-chan time.Time, requests <-chan struct{}, ready <-chan struct{}, ack chan<- struct{}) error {
	var status <-chan time.Time
	if s.o.StatusEvery > 0 {
		t := time.NewTicker(s.o.StatusEvery)
		defer t.Stop()
		status = t.C
	}
	for !s.gone && s.state != stateStopped {
		select {
		case <-ctx.Done():
			return s.detach("interrupted")
		case <-requests:
			s.want.dump = true
			if err := s.interrupt(); err != nil {
				return s.fail(err)
			}
		case <-status:
			if s.state == stateRecording {
				s.logf("%s", s.statusLine(time.Now()))
			}
		case <-tick:
			if s.state == stateRecording {
				s.want.boundary = true
				if err := s.interrupt(); err != nil && !proc.Gone(err) {
					return s.fail(err)
				}
			}
		case <-ready:
			err := s.drain()
			ack <- struct{}{}
			if err != nil {
				return s.fail(err)
			}
		}
	}
	if s.state == stateStopped && !s.gone {
		return s.detach("stopped")
	}
	return nil
}

// drain handles every pending stop.
func (s *session) drain() error {
	for {
		st, ok, err := proc.WaitNoHang(s.pid)
		if err == unix.ECHILD {
			s.gone = true
			return nil
		}
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := s.handle(st); err != nil {
			return err
		}
		s.runDeferred()
		if s.gone || s.state == stateStopped {
			return nil
		}
	}
}

func (s *session) handle(st proc.Stop) error {
	if os.Getenv("TPREC_DEBUG") == "stops" {
		s.logf("stop: %v status %#x", st, uint32(st.Status))
	}
	if st.Tid != s.pid {
		// A shadow (killed ones report their exit here) or a thread we refuse.
		if s.shadow != nil && st.Tid == s.shadow.pid {
			return nil
		}
		if st.Tid == s.zombie || st.Exited() {
			return nil
		}
		return nil
	}
	if st.Exited() {
		s.gone = true
		s.exitStatus = st.Status
		s.logf("process %d %s", s.pid, exitText(st.Status))
		// Its shadow, now a stopped orphan, goes with it.
		s.killShadow()
		return nil
	}
	if st.SyscallStop() {
		return s.onSyscall()
	}
	switch ev := st.Event(); ev {
	case unix.PTRACE_EVENT_STOP:
		return s.onEventStop(st)
	case unix.PTRACE_EVENT_EXEC:
		s.logf("process %d called exec: recording starts over in the new program", s.pid)
		// The kernel turns the exit signal of a child whose parent has
		// exec'd since into SIGCHLD (kernel/signal.c: do_notify_parent,
		// parent_exec_id), and a traced child notifies its parent when its
		// tracer collects it: the current shadow and those killed but not
		// yet collected (retireShadow) are such children. The program must
		// not see their SIGCHLD.
		if s.execOrphans == nil {
			s.execOrphans = map[int]bool{}
		}
		if s.shadow != nil {
			s.execOrphans[s.shadow.pid] = true
		}
		s.mu.Lock()
		for _, pid := range s.deadShadows {
			s.execOrphans[pid] = true
		}
		s.mu.Unlock()
		s.abandonIntervals()
		s.vdso = nil
		s.state = stateStarting
		if err := proc.Resume(s.src.resumeRequest(), s.pid, 0); err != nil {
			return err
		}
		// Setup waits for a stop; without syscall stops (eBPF) ask for one.
		return s.interrupt()
	case unix.PTRACE_EVENT_CLONE:
		child, _ := proc.EventMsg(s.pid)
		s.logf("process %d created thread %d: %v; recording stops, the process runs on", s.pid, child, ErrMultiThreaded)
		s.giveUp(int(child))
		return nil
	case unix.PTRACE_EVENT_EXIT:
		if s.o.OnExit && s.state == stateRecording {
			msg, _ := proc.EventMsg(s.pid)
			regs, err := proc.GetRegs(s.pid)
			if err != nil {
				return err
			}
			end := format.EndState{Kind: format.EndExit, Tid: s.pid, ExitCode: int(unix.WaitStatus(msg).ExitStatus()), Regs: regs}
			if err := s.dump(end, format.EndExit); err != nil {
				s.logf("dump at exit: %v", err)
			}
		}
		return proc.Resume(unix.PTRACE_CONT, s.pid, 0)
	case 0:
	default:
		return proc.Resume(s.src.resumeRequest(), s.pid, 0)
	}
	return s.onSignal(st.Signal())
}

func (s *session) onSyscall() error {
	si, err := proc.GetSyscallInfo(s.pid)
	if err != nil {
		return err
	}
	if si.Op == proc.SyscallEntry {
		s.entry = &si
		if err := proc.Resume(s.src.resumeRequest(), s.pid, 0); err != nil {
			return err
		}
		if s.wanted() {
			// Nothing can be injected at a syscall-entry stop; the exit stop
			// will do. A blocking call is cut short (and restarted by the
			// kernel later) by a new interrupt.
			return s.interrupt()
		}
		return nil
	}
	if si.Op == proc.SyscallExit {
		if s.entry != nil && si.Ret == -516 && s.entry.Nr != unix.SYS_RESTART_SYSCALL {
			e := *s.entry
			s.restartOf = &e // ERESTART_RESTARTBLOCK: restart_syscall will finish it
		}
		if s.entry != nil && s.cur != nil && !restarting(si.Ret) {
			s.logPtraceSyscall(s.entry, si)
		}
		s.entry = nil
	}
	if s.wanted() {
		if err := s.act(); err != nil {
			return err
		}
	}
	return proc.Resume(s.src.resumeRequest(), s.pid, 0)
}

func (s *session) onEventStop(st proc.Stop) error {
	if sig := st.Status.StopSignal(); sig != unix.SIGTRAP {
		// A group stop (SIGSTOP, SIGTSTP...): stay stopped until SIGCONT, as
		// without tprec.
		return proc.Listen(s.pid)
	}
	if s.wanted() {
		if err := s.act(); err != nil {
			return err
		}
	}
	return proc.Resume(s.src.resumeRequest(), s.pid, 0)
}

// act does what waits for a stop. The target is in an event stop or a
// syscall-exit stop: both let the recorder inject syscalls.
func (s *session) act() error {
	switch {
	case s.state == stateStarting:
		return s.start()
	case s.want.dump:
		s.want.dump, s.want.boundary = false, false
		regs, err := proc.GetRegs(s.pid)
		if err != nil {
			return err
		}
		end := format.EndState{Kind: format.EndRequest, Tid: s.pid, Regs: regs}
		if err := s.dump(end, format.EndRequest); err != nil {
			s.logf("dump on request: %v", err)
		}
		// Recording goes on: the next interval starts here.
		return s.openInterval(time.Now())
	case s.want.boundary:
		s.want.boundary = false
		return s.boundary()
	}
	return nil
}

func (s *session) onSignal(sig int) error {
	if sig == 0 {
		return proc.Resume(s.src.resumeRequest(), s.pid, 0)
	}
	if sig == int(unix.SIGCHLD) && len(s.execOrphans) > 0 {
		if info, err := proc.GetSiginfo(s.pid); err == nil && s.execOrphans[int(int32(le32(info[16:])))] {
			delete(s.execOrphans, int(int32(le32(info[16:]))))
			return proc.Resume(s.src.resumeRequest(), s.pid, 0)
		}
	}
	if s.src.ownSignal(sig) {
		s.openMarkedMmap()
		return proc.Resume(s.src.resumeRequest(), s.pid, 0)
	}
	if s.state == stateRecording && fatalSignals[unix.Signal(sig)] {
		regs, err := proc.GetRegs(s.pid)
		if err != nil {
			return err
		}
		info, err := proc.GetSiginfo(s.pid)
		if err != nil {
			return err
		}
		s.logf("process %d received %v at rip %#x: writing checkpoint", s.pid, unix.SignalName(unix.Signal(sig)), regs.Rip)
		end := format.EndState{Kind: format.EndSignal, Tid: s.pid, Signo: sig, Siginfo: info, Regs: regs}
		if err := s.dump(end, format.EndSignal); err != nil {
			s.logf("dump at %v: %v", unix.SignalName(unix.Signal(sig)), err)
		}
		// If a handler survives the signal, recording starts afresh.
		s.state = stateStarting
		s.ring.reset()
		// The dump shadow's injection left the target in a stop of its own:
		// deliver the signal with its original siginfo, as if nothing
		// had happened in between.
		if err := proc.SetSiginfo(s.pid, info); err != nil {
			return err
		}
		return proc.Resume(s.src.resumeRequest(), s.pid, sig)
	}
	if s.cur != nil {
		regs, _ := proc.GetRegs(s.pid)
		info, _ := proc.GetSiginfo(s.pid)
		s.cur.signals = append(s.cur.signals, format.SignalEvent{Seq: s.seq, Tid: s.pid, Signo: sig, Siginfo: info, Regs: regs})
		s.notReplayable(fmt.Sprintf("signal %s delivered after syscall %d (signal replay is not supported yet)", unix.SignalName(unix.Signal(sig)), s.seq))
	}
	return proc.Resume(s.src.resumeRequest(), s.pid, sig)
}

// start sets recording up at the first stop: header, vDSO patch, interval 0.
func (s *session) start() error {
	mem, err := proc.OpenMem(s.pid)
	if err != nil {
		return err
	}
	if s.mem != nil {
		s.mem.Close()
	}
	s.mem = mem
	pm, err := proc.OpenPagemap(s.pid)
	if err != nil {
		return err
	}
	if s.pm != nil {
		s.pm.Close()
	}
	s.pm = pm
	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		return err
	}
	if s.vdso == nil {
		if s.vdso, err = patchVDSO(s.mem, maps); err != nil {
			return err
		}
	}
	s.fillHeader()
	s.state = stateRecording
	s.logf("recording process %d (%s), interval %v, keeping %d intervals", s.pid, s.hdr.ExePath, s.o.Interval, s.o.Keep)
	return s.openInterval(time.Now())
}

// detach leaves the process running as if tprec had never been there.
func (s *session) detach(why string) error {
	if s.gone {
		return nil
	}
	if err := s.stopForDetach(); err != nil {
		return err
	}
	s.killShadow()
	s.reapZombie(true)
	if s.vdso != nil && s.mem != nil {
		if err := s.vdso.undo(s.mem); err != nil {
			s.logf("restore vdso: %v", err)
		}
	}
	err := proc.Detach(s.pid, 0)
	if err == nil {
		s.logf("detached from process %d (%s); it runs on", s.pid, why)
	}
	return err
}

// stopForDetach gets the target into an event stop, handling whatever else
// arrives first (a syscall in progress completes and is discarded).
func (s *session) stopForDetach() error {
	if err := s.interrupt(); err != nil {
		return err
	}
	for {
		st, err := proc.Wait(s.pid)
		if err != nil {
			return err
		}
		if st.Exited() {
			s.gone = true
			return nil
		}
		if st.Event() == unix.PTRACE_EVENT_STOP && st.Status.StopSignal() == unix.SIGTRAP {
			return nil
		}
		if st.SyscallStop() {
			si, err := proc.GetSyscallInfo(s.pid)
			if err != nil {
				return err
			}
			if si.Op == proc.SyscallExit {
				return nil
			}
		}
		if err := proc.Resume(s.src.resumeRequest(), s.pid, st.Signal()); err != nil {
			return err
		}
		if err := s.interrupt(); err != nil {
			return err
		}
	}
}

// giveUp stops recording a process that became something we cannot record,
// and lets it (and the new thread) run on.
func (s *session) giveUp(newTid int) {
	s.abandonIntervals()
	if newTid > 0 {
		// The new thread starts with a pending stop; detach it right away.
		if _, err := proc.Wait(newTid); err == nil {
			proc.Detach(newTid, 0)
		}
	}
	s.state = stateStopped
}

func (s *session) fail(err error) error {
	s.killShadow()
	if !s.gone {
		if derr := s.detach("error"); derr != nil {
			s.logf("detach: %v", derr)
		}
	}
	return err
}

func (s *session) logf(f string, args ...any) {
	fmt.Fprintf(s.o.Log, "tprec: "+f+"\n", args...)
}

func exitText(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "was killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

// restarting reports the kernel-internal return values of a syscall that will
// be restarted (include/linux/errno.h): the program never sees them.
func restarting(ret int64) bool {
	switch ret {
	case -512, -513, -514, -516: // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK
		return true
	}
	return false
}

// normalize turns the registers of a thread stopped in a syscall the kernel
// will restart into "about to execute the syscall" (its argument registers
// are still those of the call).
func normalize(r format.Regs) (format.Regs, bool) {
	if int64(r.OrigRax) < 0 || !restarting(int64(r.Rax)) {
		return r, false
	}
	// For -ERESTART_RESTARTBLOCK the kernel resumes through restart_syscall;
	// the log records that completion under the interrupted call (see
	// logPtraceSyscall), so the normalized state re-issues the call itself.
	r.Rax = r.OrigRax
	r.Rip -= 2
	r.OrigRax = ^uint64(0)
	return r, true
}

func (s *session) fillHeader() {
	h := &s.hdr
	h.Arch = "x86_64"
	h.Pid = s.pid
	h.Backend = s.src.name()
	h.Interval = s.o.Interval
	h.FullPages = true
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.KernelRelease = unix.ByteSliceToString(u.Release[:])
	}
	h.Hostname, _ = os.Hostname()
	h.ExePath, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", s.pid))
	h.BuildID = proc.FileBuildID(fmt.Sprintf("/proc/%d/exe", s.pid))
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.pid)); err == nil {
		h.Cmdline = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	h.CPUFlags = cpuFlags()
}

// debugStops prints every ptrace stop (TPREC_DEBUG=stops).
var debugStops = os.Getenv("TPREC_DEBUG") != ""

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// statusLine says how much history the ring holds and what it costs.
func (s *session) statusLine(now time.Time) string {
	history := time.Duration(0)
	if n := len(s.ring.intervals); n > 0 {
		history = now.Sub(s.ring.intervals[0].meta.Start)
	} else if s.cur != nil {
		history = now.Sub(s.cur.meta.Start)
	}
	var lost uint64
	for _, iv := range s.ring.intervals {
		lost += iv.lost
	}
	return fmt.Sprintf("pid %d: %.1f s of history in %d intervals, ring %.1f of %.0f MiB, %d syscalls logged, %d events lost",
		s.pid, history.Seconds(), len(s.ring.intervals)+1, float64(s.ring.bytes)/(1<<20), float64(s.o.MaxMemory)/(1<<20), s.seq, lost)
}
