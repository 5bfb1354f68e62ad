package recorder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/replayer"
	"golang.org/x/sys/unix"
)

// ErrNoProcess is returned when the target does not exist (or vanished).
var ErrNoProcess = errors.New("no such process")

// ErrPermission is returned when the kernel refuses to let tprec trace the target.
var ErrPermission = errors.New("not permitted to trace the process")

// ErrStopped is returned when the target is a stopped job: recording would
// resume it.
var ErrStopped = errors.New("the process is stopped")

// ErrNotWritten is returned at the end of a recording when a checkpoint it
// took could be written neither to the output directory nor to any fallback.
var ErrNotWritten = errors.New("checkpoint lost")

// Options of the target (PTRACE_O_*). EXITKILL is deliberately absent: if tprec
// dies, the target must run on. The shadow gets EXITKILL of its own.
const targetOptions = unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACEEXIT |
	unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACEVFORKDONE

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
	clk   *clockLog // the clock log (clocklog.go), nil without one
	entry uint64    // the entry point breakpoint after an exec (entry.go), 0 when none
	// resent: by thread, the signals runOut held back and sent again, with
	// the siginfo each first came with (giveSiginfoBack).
	resent map[int][]proc.HeldSignal
	// clockSignals counts the signals that came inside a clock read of
	// the log and were moved to where it returns (clockSignalRunOut).
	clockSignals int
	// detachHeld: the signals the leader met on its way to the detach's
	// stop, given with the detach (stopForDetach).
	detachHeld []proc.HeldSignal
	// glibcRseq: where the process's glibc keeps its rseq areas, for a
	// kernel that cannot say (threadRseq); nil until looked up.
	glibcRseq *glibcRseq
	// dropNote: how many of the ring's memory drops were told, and when.
	dropNoted int
	dropNote  time.Time
	// entryInt3: that breakpoint is an int3 over entryOrig, not DR0.
	entryInt3 bool
	entryOrig byte
	// ownWrites: pages tprec itself wrote in the target in the current
	// interval (that int3 and its removal), left out of the comparison of
	// the fault stream with the pagemap.
	ownWrites []uint64
	ring      *ring
	hdr       format.Header
	state     state

	cur        *interval
	nextIndex  int
	seq        uint64
	sharedOver bool // readShared said the shared writable memory exceeds sharedMax
	// threads are the target's threads, the leader (pid) among them.
	threads map[int]*thread
	// ctl is the thread the recorder injects its calls through: the leader,
	// or the thread a crash stopped.
	ctl     int
	waiters *waiters
	guard   *guardian // undoes the vDSO patch and collects shadows if tprec dies
	// survived: crash signals the process handled and went on after
	// (fatal); crashDrop: the checkpoint of the last such crash, dropped
	// if its handler returns.
	survived  map[int]bool
	crashDrop *crashDrop
	// jobStopped: the leader is in a group stop (SIGSTOP, SIGTSTP...),
	// listening for SIGCONT; no boundary interrupts it meanwhile.
	jobStopped bool
	// holdRetry: a thread did not stop in time for the last act; the next
	// waits until then.
	holdRetry time.Time
	crashed   int    // signal of the last crash checkpoint
	crashTid  int    // the thread it stopped, until recording starts afresh
	crashSP   uint64 // that thread's stack pointer where the signal interrupted it
	// crashRuntime: the CPU time of crashTid when it was let go with the
	// signal (crashRan).
	crashRuntime uint64
	// crashMask: the signals blocked in crashTid when it was let go with
	// the signal, before its handler ran; crashMaskOK says it was read.
	crashMask   uint64
	crashMaskOK bool
	// crashCaught: the process had a handler for that signal when it
	// crashed. A handler installed with SA_RESETHAND (Python's
	// faulthandler, redis-server's crash log) leaves the signal at its
	// default while it runs, so the disposition seen after the crash no
	// longer tells a running handler from a process dying of the signal.
	crashCaught bool
	// quietUntil: after a crash whose handler runs, tprec does not stop
	// the process to record it afresh before then (crashQuiet), and its
	// threads yield the CPUs to it meanwhile (yield).
	quietUntil time.Time
	quietLong  bool // quietUntil was extended for a handler still running (handlerStillRuns)
	yield      cpuYield
	// deferLow is the tracer thread while it saves a boundary's originals
	// after the target resumed (drain, watchdog).
	deferLow lowered
	looks    atomic.Int64 // the watchdog's looks, for tests
	// heldSignal is the fatal signal s.ctl is stopped in the delivery of
	// while its checkpoint is taken; 0 once the dump shadow's injection
	// has queued it again (proc.Call.Signal).
	heldSignal int
	// requeuedTid is the thread whose crash signal (crashed) went back to
	// the kernel's queue, until its delivery stop: that stop delivers it,
	// and recording does not start afresh before (start).
	requeuedTid int
	// restarts are, per thread, the call interrupted with
	// ERESTART_RESTARTBLOCK that restart_syscall will finish.
	restarts map[int]*proc.SyscallInfo
	// restartOrig: per thread, the last call seen stopped with
	// ERESTART_RESTARTBLOCK at an interval start (threadStates), for a
	// later start that finds the thread in the restart_syscall resuming it.
	restartOrig map[int]*proc.SyscallInfo
	// shadows counts the shadows made; dontFork are the ranges marked
	// MADV_DONTFORK at the last look while the target was stopped, and
	// dontForkDue says the next shadow must look again in the stop: a look
	// after it resumed found some, or the log has a madvise marking some
	// (allowFork).
	shadows      int
	stops        uint64       // stops taken (handle): what a stop's cached reads are keyed by
	seccomp      seccompState // the leader's seccomp filters (seccomp.go)
	noShadow     int          // intervals in a row opened without a shadow (withoutShadow)
	noShadowKind string       // why, in a few words
	shadowsDied  int          // shadows found dead at their interval's end (shadowDied)
	oomStreak    int          // shadows killed in a row (shadowDied)
	// memDirs: the target's memory cgroup and those above it (memroom.go);
	// lastCopies: bytes of originals the last shadow that lived through
	// its interval kept (copiesKnown once one did).
	memDirs     []string
	memV2       bool
	lastCopies  int64
	copiesKnown bool
	shadowRoom  int64 // the room the current shadow was made with (-1: no limit)
	shadowWait  int   // intervals still to open without a shadow after such kills
	// shadowCgroup: where shadows go so as not to take a task slot of the
	// target's limited pids cgroup (shadowPidsCgroup; "" when unlimited).
	shadowCgroup       string
	shadowCgroupFailed bool
	dontFork           [][2]uint64
	dontForkDue        atomic.Bool
	execOrphans        map[int]bool // shadows that die after the target's exec
	src                source
	shadow             *shadow
	// kept: the shadow a boundary's close keeps for the interval its
	// open starts (kept.go); divBufs hold the diverged pages' content,
	// taking turns (divergedBuf).
	kept    *shadow
	divBufs [2][]byte
	divTurn int
	// madeShadows: every shadow made and not yet collected by the target,
	// whatever became of it; a detach kills those still alive (killStray).
	madeShadows map[int]string // pid: its start time (startTime)
	// restBuf holds, at a boundary after a kept shadow, the originals
	// read from the shadow of the pages that did not diverge, before they
	// go to their places among the others.
	restBuf []byte
	// divSeen, divChanged: a kept shadow's diverged pages at the start of
	// the last interval saved, and how many of them it changed (0, 0 after
	// an interval with a new shadow).
	divSeen, divChanged int
	// wf: the target's wipe-on-fork ranges when its mappings were wfMaps
	// (keepShadow).
	wf     [][2]uint64
	wfMaps []format.Mapping
	vforks vforkCaptures // what vfork children wrote into the target (vfork.go)
	zombie int           // killed shadow the target still has to reap
	// deferred is work a boundary leaves for after the target resumes
	// (runDeferred): saving the closed interval's originals.
	deferred []func()
	// unnamed is the shadow the last boundary forked, until nameNewShadow
	// names it once the target runs again.
	unnamed *shadow
	// unnameable: the process's seccomp filters refuse the prctl that
	// names a shadow; nameFailed: a naming failed otherwise, and was said.
	unnameable, nameFailed bool
	// saidUnsupported: the calls no replay can make that sayUnsupported
	// told of, by number.
	saidUnsupported map[int]bool
	newUnsupported  []format.Syscall
	// marked are files opened at the eBPF programs' signal after a file
	// mmap, waiting for their call's record (resolveMmaps).
	marked []*mappedFile
	want   struct{ boundary, dump bool }
	// calm is what skipTick compares with: the stops handled since the
	// open interval began, the activity of its last look (at the start:
	// none, and the target's CPU time then; cpuOK: that was read), the
	// pages of the threads' rseq areas; settled: a tick let the boundary's
	// echo settle.
	calm struct {
		stops          int
		last           activity
		rseq           []uint64
		cpuOK, settled bool
	}
	skipped int // boundaries skipped because the target was idle (skipTick)
	// stretch is how long the open interval lasts at least, longer than
	// Options.Interval while boundaries cost more than a quarter of it
	// (stretchAfter); lastStop is how long the last boundary held the
	// target, lastWritten the originals its close saved; costStop,
	// costSave and costPages are what the boundary that set the stretch
	// cost (stretchHolds).
	stretch            time.Duration
	lastStop           time.Duration
	lastWritten        int
	costStop, costSave time.Duration
	costPages          int

	// heldAll is how long the boundaries held the target in all; mark is
	// what the last status line counted from (costSince).
	heldAll time.Duration
	mark    costMark

	gone        bool
	exitStatus  unix.WaitStatus
	dumps       []string
	lostDumps   int            // checkpoints that could not be written anywhere
	mu          sync.Mutex     // guards dumps and deadShadows (checkpoints finish in the background)
	deadShadows []int          // killed dump shadows to collect
	pending     sync.WaitGroup // checkpoints being finished
	// hurry ends when Options.Hurry is closed: the trial replays of the
	// checkpoints being finished stop (minimize).
	hurry context.Context
	// dumping counts the checkpoints being finished, and since when the
	// oldest of them is (guarded by mu), for the notice at an interrupt.
	dumping      int
	dumpingSince time.Time
}

// thread is one thread of the target.
type thread struct {
	tid   int
	entry *proc.SyscallInfo // ptrace backend: the call between its entry and exit stops
	// While holdOthers holds the thread: held, and how to resume it (req
	// with sig, or PTRACE_LISTEN in a group stop). exiting: held at its
	// exit; fatal: held in the delivery of a fatal signal; caught: held in
	// the delivery of a signal the program catches, recorded when released.
	held, listen, exiting, fatal, caught bool
	req, sig                             int
	// reentry: the thread's last syscall stop was the exit of a call the
	// kernel restarts, so its next entry stop is that restart (skipTick).
	reentry bool
}

func (t *thread) hold(req, sig int) { t.held, t.req, t.sig = true, req, sig }

// Record records a process until it exits or ctx is cancelled (then it
// detaches and leaves the process running). requests delivers dump requests.
func Record(ctx context.Context, o Options, requests <-chan struct{}) error {
	o.defaults()
	if err := os.MkdirAll(o.OutputDir, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	s := &session{o: o, tr: proc.NewTracer(), ring: newRing(o.Keep, o.MaxMemory),
		threads: map[int]*thread{}, restarts: map[int]*proc.SyscallInfo{}, restartOrig: map[int]*proc.SyscallInfo{}, waiters: newWaiters()}
	defer s.tr.Close()
	hurry, hurried := context.WithCancel(context.Background())
	defer hurried()
	s.hurry = hurry
	if o.Hurry != nil {
		go func() {
			select {
			case <-o.Hurry:
				s.mu.Lock()
				n := s.dumping
				s.mu.Unlock()
				if n > 0 {
					s.errorf("stopping the trial replay: writing the checkpoint(s) with every present page")
				}
				hurried()
			case <-hurry.Done():
			}
		}()
	}
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
	s.guard = startGuardian(o.Guardian, s.pid, s.logf)
	s.src, err = newSource(o, s.pid, s.logf)
	if err != nil {
		s.tr.Do(func() error { return s.detach("backend unavailable") })
		return err
	}
	defer s.src.close()
	defer func() {
		if s.clockSignals > 0 {
			s.logf("%d signals came inside a clock read of the clock log: each delivered where the read returns", s.clockSignals)
		}
	}()
	if release != nil {
		if err := release(); err != nil {
			return err
		}
	}
	for tid := range s.threads {
		s.waiters.add(tid, tid == s.pid)
	}
	// A dump's trial replay asks whether the debug registers work (a
	// process started and traced once): asked at the first dump, the
	// answer took 15-100 ms of it, waiting behind redis-server's crash
	// handler for a CPU. Ask now, while nothing waits for it.
	go replayer.HardwareBreakpoints()
	ticker := time.NewTicker(o.Interval)
	defer ticker.Stop()
	defer s.watchdog()() // before the source closes
	err = s.tr.Do(func() error { return s.loop(ctx, ticker.C, requests) })
	s.yield.off() // the process is gone: the checkpoints are written at full speed
	s.awaitDumps(ctx)
	s.guard.finish(err == nil)
	if launched != nil {
		// The launched command is our child: collect it so it does not
		// linger. After a detach it may run on for long: say why tprec
		// does not end (a service manager stopping tprec waited on, with
		// nothing said, found by a sweep).
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, launched.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil && info.Signo == 0 {
			s.logf("process %d, which tprec launched, runs on unrecorded: tprec ends when it does", launched.Process.Pid)
		}
		launched.Wait()
	}
	if err == nil && s.lostDumps > 0 {
		err = fmt.Errorf("%w: %d checkpoint(s) could not be written (see above)", ErrNotWritten, s.lostDumps)
	}
	return err
}

// watchdog starts the goroutine that raises lowered threads (lowered):
// the saving of originals once it has waited lowWait, the ring buffer
// reader when its source says so (recordSource.watch). It looks every
// watchPeriod while the ring buffer holds records or the saving waits, and
// less often while neither does (watchIdlePeriod); a lowering of the saving
// has it look often again at once. The function it returns stops it.
func (s *session) watchdog() (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	wake := make(chan struct{}, 1)
	s.deferLow.mu.Lock()
	s.deferLow.wake = wake
	s.deferLow.mu.Unlock()
	go func() {
		defer close(ended)
		period := watchPeriod
		t := time.NewTimer(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wake:
				period = watchPeriod
				t.Reset(period)
				continue
			case <-t.C:
			}
			s.looks.Add(1)
			busy := s.src.watch()
			low := s.deferLow.lowFor()
			if low > lowWait {
				s.deferLow.rescue()
			}
			if busy || low > 0 {
				period = watchPeriod
			} else {
				period = min(2*period, watchIdlePeriod)
			}
			t.Reset(period)
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// awaitDumps waits for the checkpoints still being minimized and written.
// An interrupt (ctx), whether it ended the recording or comes while tprec
// waits, gets a notice: tprec is not stuck, and a second interrupt
// (Options.Hurry) makes it write them with every page instead.
func (s *session) awaitDumps(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.mu.Lock()
	n, since := s.dumping, s.dumpingSince
	s.mu.Unlock()
	if n > 0 && s.hurry.Err() == nil {
		s.errorf("still writing %d checkpoint(s), for %.1f s so far: a trial replay finds the pages the window touched; interrupt again to stop it and write every present page instead",
			n, time.Since(since).Seconds())
	}
	<-done
}

// tracerOf names the process tracing pid ("" when none, or unknown).
func tracerOf(pid int) string {
	st, err := procStatus(pid)
	if err != nil || st["TracerPid"] == "" || st["TracerPid"] == "0" {
		return ""
	}
	// TracerPid is the tracing thread; its process is what the user knows.
	tracer := st["TracerPid"]
	if tst, err := procStatus(atoi(tracer)); err == nil && tst["Tgid"] != "" {
		tracer = tst["Tgid"]
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%s/comm", tracer))
	return fmt.Sprintf("process %s (%s)", tracer, strings.TrimSpace(string(comm)))
}

// attach seizes a running process, every thread of it, and asks it to stop.
func (s *session) attach(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("attach: invalid pid %d", pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task", pid)); err != nil {
		return fmt.Errorf("attach to %d: %w", pid, ErrNoProcess)
	}
	if st := processState(pid); st == 'Z' || st == 'X' {
		// Its parent has not collected it yet; ptrace refuses it with
		// EPERM, which read as a lack of privilege.
		return fmt.Errorf("attach to %d: %w: it has exited, and is a zombie its parent has not collected yet (state %c in /proc/%d/stat)", pid, ErrNoProcess, st, pid)
	} else if st == 'T' {
		// A stopped job (Ctrl-Z, kill -STOP, a watchdog holding it for a
		// look): recording it would resume it, which is not tprec's to
		// decide, and a stopped process has no last moments to record.
		return fmt.Errorf("attach to %d: %w (state %c in /proc/%d/stat): let it go on first (kill -CONT %d), or attach once it runs", pid, ErrStopped, st, pid, pid)
	}
	if err := proc.Seize(pid, targetOptions); err != nil {
		if errors.Is(err, unix.EPERM) {
			if by := tracerOf(pid); by != "" {
				return fmt.Errorf("attach to %d: %w: it is traced already, by %s (a process has one tracer at most: another tprec, a debugger, strace)", pid, ErrPermission, by)
			}
			if yamaRestricts() {
				return fmt.Errorf("attach to %d: %w: kernel.yama.ptrace_scope is 3, under which the kernel lets no process trace another, root included, until the machine restarts with a lower value: tprec cannot record here", pid, ErrPermission)
			}
			if unix.Geteuid() == 0 {
				return fmt.Errorf("attach to %d: %w: the kernel refuses to let even root trace it (init, a kernel thread, or a process protected by a security module)", pid, ErrPermission)
			}
			return fmt.Errorf("attach to %d: %w: tprec needs root or CAP_SYS_PTRACE (and kernel.yama.ptrace_scope <= 1 for a process that is not its child): run it with sudo", pid, ErrPermission)
		}
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("attach to %d: %w", pid, ErrNoProcess)
		}
		return err
	}
	s.pid, s.ctl = pid, pid
	s.threads[pid] = &thread{tid: pid}
	if err := s.seizeThreads(); err != nil {
		for tid := range s.threads {
			proc.Detach(tid, 0)
		}
		return err
	}
	s.hdr.StartTime = time.Now()
	return s.interrupt()
}

// processState returns the state letter of /proc/PID/stat, 0 when it
// cannot be read.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// yamaRestricts reports whether Yama's ptrace_scope keeps root from
// tracing some processes (3: no attach at all).
func yamaRestricts() bool {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	return err == nil && strings.TrimSpace(string(b)) == "3"
}

// seizeThreads seizes the threads of the process besides its leader, until
// no new one appears: a thread created by one already seized is attached by
// the kernel (PTRACE_O_TRACECLONE) and reported by its creator's clone event.
func (s *session) seizeThreads() error {
	for {
		tids, err := proc.Tids(s.pid)
		if err != nil {
			return fmt.Errorf("attach to %d: %w", s.pid, ErrNoProcess)
		}
		added := false
		for _, tid := range tids {
			if s.threads[tid] != nil {
				continue
			}
			switch err := proc.Seize(tid, targetOptions); {
			case err == nil:
			case errors.Is(err, unix.ESRCH):
				continue // it exited meanwhile
			case errors.Is(err, unix.EPERM):
				// Attached already, as a thread that a seized one created.
			default:
				return fmt.Errorf("attach to thread %d of %d: %w", tid, s.pid, err)
			}
			s.threads[tid] = &thread{tid: tid}
			added = true
		}
		if !added {
			return nil
		}
	}
}

// launch starts cmd held at a pipe read in /bin/sh, seizes that shell, and
// returns a function that lets it exec the command: recording starts at the
// exec, so not one instruction of the program runs unrecorded.
func (s *session) launch(argv []string) (*exec.Cmd, func() error, error) {
	// The shell below would say "not found" and exit 127, which looked
	// like a recording of a program that ended.
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, nil, fmt.Errorf("launch %s: %w", argv[0], err)
	}
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
	s.pid, s.ctl = sh.Process.Pid, sh.Process.Pid
	s.threads[s.pid] = &thread{tid: s.pid}
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
// None does while a crash handler is left alone (quiet): a stop there sets
// recording up afresh, which is what the quiet is for not doing.
func (s *session) wanted() bool {
	if s.state == stateStarting {
		return !s.quiet()
	}
	return s.want.boundary || s.want.dump
}

// crashQuiet is how long tprec leaves a process alone after a crash its
// handler runs for, before it stops the process to record it afresh. A
// crash handler may do what nothing else does: redis-server's crash report
// runs a memory test over every anonymous mapping, its thread's own
// control block and rseq area included, patterns written and then put back.
// A thread stopped while its rseq area holds such a pattern is killed by the
// kernel with SIGSEGV on its way back (the critical-section pointer no
// longer points anywhere): the recording's stops cut redis's bug report off
// in 3 of 7 runs under load, and tprec then dumped a second crash of its
// own making. Unrecorded, nothing stops the thread there. A process that
// survives its handler (a JVM's, say) is recorded again after this long.
const crashQuiet = 5 * time.Second

// quiet reports whether a crash handler may still be running (crashQuiet).
func (s *session) quiet() bool {
	if s.quietUntil.IsZero() {
		return false
	}
	return time.Now().Before(s.quietUntil) || s.handlerStillRuns()
}

// crashQuietMax bounds how long a crash handler still running at the end
// of crashQuiet is left alone (handlerStillRuns).
const crashQuietMax = 60 * time.Second

// handlerStillRuns extends the quiet time, once, to crashQuietMax after the
// crash, when the handler has not finished at its end: the thread that
// took the signal is still there, and either the handler put the signal
// back to its default on delivery (SA_RESETHAND: a crash report that ends
// by raising it again) or the signal is still blocked (a handler that
// runs). redis-server's memory test covers every anonymous mapping, and
// takes seconds for a large data set, or on a machine other processes
// keep busy: with four CPU hogs it ran past the 5 s, tprec stopped the
// process to record it afresh, and redis then died of a SIGSEGV it had not
// raised (most likely the kernel's, its rseq area holding a test pattern:
// crashQuiet), its crash report cut off, of which tprec wrote a second
// checkpoint. A process whose
// one-shot handler returned and that goes on is recorded again only
// after crashQuietMax.
func (s *session) handlerStillRuns() bool {
	if s.quietLong || s.state != stateStarting || !s.crashCaught || s.crashTid == 0 || s.crashed == 0 {
		return false
	}
	s.quietLong = true
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", s.pid, s.crashTid)); err != nil {
		return false
	}
	if _, caught := disposition(s.pid, s.crashed); caught && !s.crashBlocked() {
		return false
	}
	s.quietUntil = s.quietUntil.Add(crashQuietMax - crashQuiet)
	s.logf("process %d is still in the handler of its %v after %v: left alone until it ends, for up to %v", s.pid, unix.SignalName(unix.Signal(s.crashed)), crashQuiet, crashQuietMax)
	return true
}

// fatal reports whether a signal the process is about to take is a crash
// to write a checkpoint of: one of fatalSignals, unless the process has
// shown it survives it (survived): a handler of it returned once and is
// still installed. A JVM takes a handled SIGSEGV at start-up, and its
// compiled code one per null pointer it meets; a checkpoint each, the
// process held for it, would be a flood. Such a signal is recorded as any
// signal the program catches, and a checkpoint is written when the process
// dies (a JVM's crash report ends in abort: SIGABRT).
func (s *session) fatal(sig int) bool {
	if !fatalSignals[unix.Signal(sig)] {
		return false
	}
	if s.survived[sig] {
		_, caught := disposition(s.pid, sig)
		return !caught
	}
	return true
}

// handlerReturned reports whether the handler of the crash has returned and
// the process goes on: the handler is still installed (not reset by
// SA_RESETHAND, as those of crash reports that end by raising the signal
// again are) and the signal is no longer blocked in the thread that
// crashed (the kernel blocks it while its handler runs, sigreturn unblocks
// it). The quiet time then ends at once: a python3 whose SIGSEGV handler
// returned, and that died of SIGABRT 3 s later, was not recorded in
// between and got no checkpoint of that (found by a sweep).
//
// Nor has a handler returned that has not run yet: the crash's signal,
// queued again by the dump, waits for its delivery (requeuedTid) or is
// still pending in the thread. Looked at then, the handler of redis-server's
// crash log (SA_RESETHAND, SA_NODEFER: the signal is never blocked in it)
// seemed installed and left, and its checkpoint was dropped (2 of 28 soak
// runs, 1 of 8 by hand; the process died of its SIGSEGV right after).
func (s *session) handlerReturned() bool {
	if s.crashTid == 0 || s.crashed == 0 || s.requeuedTid != 0 || s.crashPending() || !s.crashRan() {
		return false
	}
	if _, caught := disposition(s.pid, s.crashed); !caught {
		return false
	}
	if blocked, ok := s.crashSigBlk(); !ok || blocked&(1<<(s.crashed-1)) != 0 || s.inHandlerMask(blocked) {
		return false
	}
	s.survivedCrash()
	return true
}

// inHandlerMask reports whether the thread that took the crash, whose
// blocked signals are now blocked, still has other signals blocked than
// before its handler ran: the kernel blocks the
// handler's sa_mask while it runs, and its return (sigreturn) puts back
// the mask it interrupted. A JVM's SIGSEGV handler blocks every signal but
// the synchronous ones, and its crash report then unblocks SIGSEGV itself
// (a crash within the report is caught too): seen by the signal alone, the
// handler had returned, the checkpoint of the crash was dropped, and the
// process died of the report's abort() a moment later (2 of 3 runs by hand,
// and in the third tprec kept only the report's own last moments).
func (s *session) inHandlerMask(blocked uint64) bool {
	return s.crashMaskOK && blocked != s.crashMask
}

// letCrashGo notes that thread tid, stopped in the delivery of the crash's
// signal, is let go with it: the handler runs once the thread has run
// (crashRan).
func (s *session) letCrashGo(tid int) {
	s.crashTid = tid
	s.crashRuntime, _ = threadRuntime(s.pid, tid)
	s.crashMaskOK = false
	if st, err := procStatus(tid); err == nil {
		s.crashMask, s.crashMaskOK = statusMask(st, "SigBlk")
	}
}

// crashRan reports whether the thread that takes the crash's signal has
// run since it was let go with it: until then its handler is not even set
// up (the kernel applies SA_RESETHAND when the thread runs), and on a
// machine the process fills that can take a while.
func (s *session) crashRan() bool {
	ns, err := threadRuntime(s.pid, s.crashTid)
	return err == nil && ns > s.crashRuntime
}

// threadRuntime is the CPU time thread tid has run, in nanoseconds: the
// first field of /proc/PID/task/TID/schedstat, which the kernel brings up
// to date at each switch and tick.
func threadRuntime(pid, tid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("schedstat of thread %d: %q", tid, b)
	}
	return strconv.ParseUint(f[0], 10, 64)
}

// crashPending reports whether the signal of the crash waits for its
// delivery, in the thread that took it or in the process's shared queue, or
// that cannot be told.
func (s *session) crashPending() bool {
	st, err := procStatus(s.crashTid)
	if err != nil {
		return true
	}
	pnd, ok := pendingSignals(st)
	return !ok || pnd&(1<<(s.crashed-1)) != 0
}

// pendingSignals is the mask of the signals pending in a thread, its own
// and its process's, from its /proc status.
func pendingSignals(st map[string]string) (uint64, bool) {
	pnd, ok1 := statusMask(st, "SigPnd")
	shd, ok2 := statusMask(st, "ShdPnd")
	return pnd | shd, ok1 && ok2
}

// crashBlocked reports whether the signal of the crash is blocked in the
// thread that took it (its handler runs), or that cannot be told.
func (s *session) crashBlocked() bool {
	blocked, ok := s.crashSigBlk()
	return !ok || blocked&(1<<(s.crashed-1)) != 0
}

// crashSigBlk reads the signals blocked in the thread that took the crash.
func (s *session) crashSigBlk() (uint64, bool) {
	st, err := procStatus(s.crashTid)
	if err != nil {
		return 0, false
	}
	return statusMask(st, "SigBlk")
}

// threadExits is called at the PTRACE_EVENT_EXIT stop of thread tid,
// wherever the tracer meets it (the event loop, or holding the threads for
// a boundary or a dump). When it is the thread that took a crash signal
// with a handler, and its checkpoint may still be dropped: the process
// ends before a tick looked at its handler (a JVM's `java -version` in 0.7
// s; both it and python3 put their handlers back to the default on the way
// out), and an exit with status 0 from outside the handler ends a process
// that went on. The stop was met while holding the threads in 1 of 5
// runs of a python3 whose thread took a SIGSEGV, returned from the handler
// and ended at once, and was passed over then.
func (s *session) threadExits(tid int) {
	if s.crashDrop == nil || tid != s.crashTid {
		return
	}
	msg, err := proc.EventMsg(tid)
	if err != nil {
		return // killed out of the stop: no exit status to judge, the checkpoint stays
	}
	if ws := unix.WaitStatus(msg); ws.Exited() && ws.ExitStatus() == 0 && (!s.crashBlocked() || s.leftHandler(tid)) {
		s.survivedCrash()
	}
}

// leftHandler reports, for the thread that took the crash's signal and now
// exits with that signal blocked, whether it does so from outside its
// handler: glibc blocks nearly every signal in a thread whose function
// returned, before its exit (start_thread), so a blocked signal there says
// nothing about the handler. The stack does: a handler runs below the
// signal frame, below the stack pointer the signal interrupted, while a
// thread ending in start_thread is above it. (`java -version`'s JavaMain
// thread, which takes the JVM's own SIGSEGV at start-up and returns at its
// end, kept its checkpoint in 3 of 12 runs, those where no tick came in
// between: SigBlk fffffffefffbfeff, its stack pointer 3.9 KB above the
// crash's.) A handler on an alternate stack higher up would pass for gone;
// exiting with status 0 from one is no crash either.
func (s *session) leftHandler(tid int) bool {
	regs, err := proc.GetRegs(tid)
	return err == nil && s.crashSP != 0 && regs.Rsp > s.crashSP
}

// survivedCrash drops the checkpoint of the crash the process went on after,
// and has that signal recorded as a caught one from then on (fatal).
func (s *session) survivedCrash() {
	if s.survived == nil {
		s.survived = map[int]bool{}
	}
	name := unix.SignalName(unix.Signal(s.crashed))
	if s.crashDrop != nil {
		s.crashDrop.dropNow()
		s.crashDrop = nil
		s.logf("process %d handled its %v and goes on: no crash, its checkpoint is dropped", s.pid, name)
	}
	if !s.survived[s.crashed] {
		s.survived[s.crashed] = true
		s.logf("process %d: from now on %v is recorded as a signal it catches, and a checkpoint is written when the process dies", s.pid, name)
	}
}

// waiters say "a wait event is pending" for each thread of the target
// without consuming it (waitid with WNOWAIT, one goroutine per thread): the
// tracer thread can then select on the interval timer and on events at once.
// Any thread of the process may wait for tracees of any of its threads
// (kernel/exit.c: do_wait walks the group).
//
// They wait for the target's threads only: the process also has other
// children and tracees (shadows, the stub of a trial replay running in the
// background), whose events belong to whoever waits for them by pid.
type waiters struct {
	ready chan int // the thread with a pending event
	ack   chan struct{}
}

func newWaiters() *waiters {
	return &waiters{ready: make(chan int), ack: make(chan struct{})}
}

// add starts waiting for tid. A thread's waiter ends when the thread is gone;
// the leader's keeps reporting, so that the loop sees the process end.
func (w *waiters) add(tid int, leader bool) {
	go func() {
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, tid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if !leader {
					return
				}
				// ECHILD: nothing left to wait for; the loop ends on its own.
				time.Sleep(10 * time.Millisecond)
			}
			w.ready <- tid
			<-w.ack
		}
	}()
}

func (s *session) loop(ctx context.Context, tick <-chan time.Time, requests <-chan struct{}) error {
	var status <-chan time.Time
	if s.o.StatusEvery > 0 {
		t := time.NewTicker(s.o.StatusEvery)
		defer t.Stop()
		status = t.C
	}
	for !s.gone && s.state != stateStopped {
		select {
		case <-ctx.Done():
			if s.want.dump {
				// Asked for, not taken yet (the process was stopped by
				// job control, or the interrupt came first): said, not
				// dropped in silence.
				s.errorf("interrupted before the checkpoint asked for of process %d could be taken: none written", s.pid)
			}
			return s.detach("interrupted")
		case <-requests:
			s.want.dump = true
			if s.jobStopped {
				s.logf("process %d is stopped by job control: the checkpoint is taken once it is continued", s.pid)
				continue
			}
			if err := s.interrupt(); err != nil {
				return s.fail(err)
			}
		case <-status:
			if s.state == stateRecording {
				now, cpu := time.Now(), cpuNow()
				s.logf("%s%s", s.statusLine(now), s.costSince(now, cpu))
			}
		case <-tick:
			if dying(s.pid) {
				s.adoptThreads()
			}
			if s.jobStopped {
				// Stopped by SIGSTOP or SIGTSTP: nothing to record until
				// SIGCONT. An interrupt would wake the listening thread,
				// which then took the signals queued meanwhile (a shell's
				// SIGCHLD) and ran their handlers: the process ran on as if
				// never stopped (found by a sweep).
				continue
			}
			// A tick of a recording with no boundary or dump asked for
			// may be let go by.
			optional := s.state == stateRecording && !s.want.boundary && !s.want.dump
			if optional && s.cur != nil && time.Since(s.cur.meta.Start) < s.o.Interval/2 {
				// A tick that waited in the channel while tprec saved a
				// long boundary's originals, come right after the next
				// boundary: the interval has barely begun. Taken, it
				// made an interval of a few milliseconds; looked at for
				// activity, the process seemed idle (a python3 rewriting
				// 1 GB under ptrace: "boundaries skipped (the process
				// was idle)").
				continue
			}
			if optional && s.skipTick() {
				s.skipped++
				continue
			}
			if optional && s.cur != nil && s.stretchHolds() {
				continue
			}
			if s.state == stateStarting && s.quiet() && !s.handlerReturned() {
				continue
			}
			s.quietUntil, s.crashDrop = time.Time{}, nil // a checkpoint of the crash is kept
			s.yield.off()
			if s.state == stateRecording || s.state == stateStarting {
				// Starting: setup was put off (a thread did not stop in
				// time, act); ask again.
				s.want.boundary = s.state == stateRecording
				if err := s.interrupt(); err != nil && !proc.Gone(err) {
					return s.fail(err)
				}
			}
		case tid := <-s.waiters.ready:
			err := s.drain(tid)
			if proc.Gone(err) {
				// A thread was killed between its stop and a request
				// about it (a crash in another thread ends the whole
				// group): its exit is reported next.
				if debugStops {
					s.logf("thread %d: %v", tid, err)
				}
				err = nil
			}
			s.waiters.ack <- struct{}{}
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

// drain handles every pending stop of a thread.
func (s *session) drain(tid int) error {
	for {
		st, ok, err := proc.WaitNoHang(tid)
		if err == unix.ECHILD {
			if tid == s.pid {
				s.gone = true
			} else {
				delete(s.threads, tid)
			}
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
		s.nameNewShadow()
		if len(s.deferred) > 0 {
			// The target runs again: the saving waits for a CPU nothing
			// else wants (lowered), at most lowWait. Not for every stop:
			// under ptrace, every call is one.
			s.deferLow.lower()
			s.runDeferred()
			s.deferLow.raise()
		}
		if s.gone || s.state == stateStopped {
			return nil
		}
	}
}

func (s *session) handle(st proc.Stop) error {
	if os.Getenv("TPREC_DEBUG") == "stops" {
		s.logf("stop: %v status %#x", st, uint32(st.Status))
	}
	s.stops++
	t := s.threads[st.Tid]
	if t == nil {
		// A shadow, or a killed one reporting its exit.
		return nil
	}
	if !st.SyscallStop() {
		s.calm.stops++
	}
	if st.Exited() {
		if t.tid == s.requeuedTid {
			s.requeuedTid = 0
		}
		if t.tid != s.pid {
			delete(s.threads, t.tid)
			return nil
		}
		s.gone = true
		s.exitStatus = st.Status
		s.logf("process %d %s", s.pid, exitText(st.Status))
		// Its shadow, now a stopped orphan, goes with it.
		s.killShadow()
		return nil
	}
	if t.tid == s.pid && s.jobStopped && s.continued(st) {
		s.jobStopped = false
	}
	if st.SyscallStop() {
		return s.onSyscall(t)
	}
	switch ev := st.Event(); ev {
	case unix.PTRACE_EVENT_STOP:
		return s.onEventStop(t, st)
	case unix.PTRACE_EVENT_EXEC:
		s.logf("process %d called exec: recording starts over in the new program", s.pid)
		// Every other thread is gone; the one that called exec goes on as
		// the leader (kernel/exec: de_thread).
		for tid := range s.threads {
			if tid != s.pid {
				delete(s.threads, tid)
			}
		}
		clear(s.restarts)
		s.glibcRseq = nil // the new program's loader says anew
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
		s.dropClock()
		s.state = stateStarting
		s.entry, s.entryInt3, s.ownWrites = 0, false, nil // exec dropped the breakpoint, if any
		s.armEntry()
		if err := proc.Resume(s.src.resumeRequest(), s.pid, 0); err != nil {
			return err
		}
		// Setup waits for a stop; without syscall stops (eBPF) ask for one.
		return s.interrupt()
	case unix.PTRACE_EVENT_CLONE:
		child, err := proc.EventMsg(t.tid)
		if err != nil {
			return err
		}
		s.onClone(t, int(child))
		return s.resume(t.tid, 0)
	case unix.PTRACE_EVENT_VFORK:
		child, err := proc.EventMsg(t.tid)
		if err != nil {
			return err
		}
		s.onVfork(t, int(child))
		return s.resume(t.tid, 0)
	case unix.PTRACE_EVENT_VFORK_DONE:
		s.onVforkDone(t)
		return s.resume(t.tid, 0)
	case unix.PTRACE_EVENT_EXIT:
		s.threadExits(t.tid)
		if t.tid == s.pid && s.o.OnExit && s.state == stateRecording {
			msg, _ := proc.EventMsg(s.pid)
			regs, err := proc.GetRegs(s.pid)
			if err != nil {
				return err
			}
			end := format.EndState{Kind: format.EndExit, Tid: s.pid, ExitCode: int(unix.WaitStatus(msg).ExitStatus()), Regs: regs}
			err = s.holdPatiently(s.pid)
			if err == nil {
				err = s.dump(end, format.EndExit)
			}
			if err != nil {
				s.logf("dump at exit: %v", err)
			}
			if err := s.releaseOthers(); err != nil {
				return err
			}
		}
		return s.resume(t.tid, 0)
	case 0:
	default:
		return s.resume(t.tid, 0)
	}
	return s.onSignal(t, st.Signal())
}

// resume restarts a thread after a stop; a thread that vanished meanwhile
// (killed) is not an error: its exit is reported next.
func (s *session) resume(tid int, sig int) error {
	if err := proc.Resume(s.src.resumeRequest(), tid, sig); err != nil && !proc.Gone(err) {
		return err
	}
	return nil
}

// onClone follows a clone of the target: a new thread is recorded from now
// on (replay creates it where the clone returns, replayer/threads.go); a
// new process is let go.
func (s *session) onClone(t *thread, child int) {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", s.pid, child)); err != nil {
		// A child process (clone without CLONE_THREAD and without SIGCHLD
		// as its exit signal): not this recording's. It starts in a stop
		// of its own; let it run untraced.
		if _, err := proc.Wait(child); err == nil {
			proc.Detach(child, 0)
		}
		return
	}
	if s.threads[child] == nil {
		s.threads[child] = &thread{tid: child}
		s.waiters.add(child, false)
	}
	s.vforks.startedThread(child)
}

func (s *session) onSyscall(t *thread) error {
	si, err := proc.GetSyscallInfo(t.tid)
	if err != nil {
		return err
	}
	if si.Op == proc.SyscallEntry {
		if !t.reentry && si.Nr != unix.SYS_RESTART_SYSCALL {
			s.calm.stops++
		}
		t.entry, t.reentry = &si, false
		if err := s.resume(t.tid, 0); err != nil {
			return err
		}
		if t.tid == s.pid && s.wanted() {
			// Nothing can be injected at a syscall-entry stop; the exit stop
			// will do. A blocking call is cut short (and restarted by the
			// kernel later) by a new interrupt.
			return s.interrupt()
		}
		return nil
	}
	if si.Op == proc.SyscallExit {
		// A call cut short to be restarted (a boundary's interrupt)
		// did nothing yet, and its restart is no news either.
		t.reentry = restarting(si.Ret)
		if !t.reentry {
			s.calm.stops++
		}
		entry := t.entry
		s.syscallExit(t, si)
		if entry != nil {
			if err := s.afterSeccompInstall(t, entry.Nr, entry.Args[0], si.Ret); err != nil {
				return err
			}
		}
	}
	if t.tid == s.pid && s.wanted() {
		if err := s.act(); err != nil {
			return err
		}
	}
	return s.resume(t.tid, 0)
}

// syscallExit logs the call a thread completes (ptrace backend).
func (s *session) syscallExit(t *thread, si proc.SyscallInfo) {
	if t.entry != nil && si.Ret == -516 && t.entry.Nr != unix.SYS_RESTART_SYSCALL {
		e := *t.entry
		s.restarts[t.tid] = &e // ERESTART_RESTARTBLOCK: restart_syscall will finish it
	}
	if t.entry != nil && s.cur != nil && !restarting(si.Ret) {
		s.logPtraceSyscall(t.tid, t.entry, si)
	}
	t.entry = nil
}

func (s *session) onEventStop(t *thread, st proc.Stop) error {
	if sig := st.Status.StopSignal(); sig != unix.SIGTRAP {
		// A group stop (SIGSTOP, SIGTSTP...): stay stopped until SIGCONT, as
		// without tprec.
		if t.tid == s.pid {
			s.jobStopped = true
		}
		return proc.Listen(t.tid)
	}
	if t.tid == s.pid && s.wanted() {
		if err := s.act(); err != nil {
			return err
		}
	}
	return s.resume(t.tid, 0)
}

// act does what waits for a stop. The leader is in an event stop or a
// syscall-exit stop: both let the recorder inject syscalls. The other
// threads are held meanwhile.
func (s *session) act() error {
	if time.Now().Before(s.holdRetry) {
		return nil
	}
	if err := s.holdOthers(s.pid, holdTimeout); err != nil {
		if proc.Gone(err) {
			return nil // the process is going away; its exits come next
		}
		if !errors.Is(err, errThreadBusy) {
			return err
		}
		// Tried again after an interval, at the stop the timer asks for
		// (not at every syscall stop of the ptrace backend meanwhile).
		s.holdRetry = time.Now().Add(s.o.Interval)
		s.logf("%v: the boundary waits for the next interval", err)
		return s.releaseOthers()
	}
	err := s.actHeld()
	if rerr := s.releaseOthers(); err == nil {
		err = rerr
	}
	if proc.Gone(err) {
		// Killed meanwhile (a crash in another thread ends the whole
		// group): its exits come next.
		return nil
	}
	return err
}

func (s *session) actHeld() error {
	switch {
	case s.state == stateStarting:
		return s.start()
	case s.want.dump:
		s.want.dump, s.want.boundary = false, false
		// collect reads its registers, after the close.
		end := format.EndState{Kind: format.EndRequest, Tid: s.pid}
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

// suppressed reports whether a signal stop is one the program must not see:
// the eBPF programs' own signal, or the SIGCHLD of a shadow after an exec.
// It does what that signal was for; an error ends the recording (a seccomp
// filter that would refuse tprec's calls), the thread held.
func (s *session) suppressed(t *thread, sig int) (bool, error) {
	if sig == int(unix.SIGCHLD) && len(s.execOrphans) > 0 {
		if info, err := proc.GetSiginfo(t.tid); err == nil && s.execOrphans[int(int32(le32(info[16:])))] {
			delete(s.execOrphans, int(int32(le32(info[16:]))))
			return true, nil
		}
	}
	if s.src.ownSignal(sig) {
		// The eBPF programs signal a thread that installed a seccomp
		// filter, as one that mapped a file.
		if regs, err := proc.GetRegs(t.tid); err == nil {
			if err := s.afterSeccompInstall(t, regs.OrigRax, regs.Rdi, int64(regs.Rax)); err != nil {
				return true, err
			}
		}
		s.openMarkedMmap(t.tid)
		s.src.catchUp()
		return true, nil
	}
	return false, nil
}

func (s *session) onSignal(t *thread, sig int) error {
	s.giveSiginfoBack(t.tid, sig)
	if s.requeuedTid != 0 && sig == s.crashed {
		// The crash's own signal, queued again by the dump: delivered as
		// it would have been without tprec (a signal sent to the process
		// may go to another of its threads, whose handler it is then).
		s.requeuedTid = 0
		if regs, err := proc.GetRegs(t.tid); err == nil {
			s.crashSP = regs.Rsp
		}
		s.letCrashGo(t.tid)
		return s.resume(t.tid, sig)
	}
	if sig == 0 {
		return s.resume(t.tid, 0)
	}
	if sup, err := s.suppressed(t, sig); err != nil || sup {
		if err != nil {
			return err
		}
		s.backToJobStop(t, sig)
		return s.resume(t.tid, 0)
	}
	if s.atEntry(t, sig) {
		return s.onEntry(t)
	}
	if s.state == stateRecording && s.fatal(sig) {
		return s.crash(t, sig)
	}
	if s.cur != nil {
		if _, caught := disposition(s.pid, sig); caught {
			return s.deliver(t, sig)
		}
	}
	s.noteSignal(t, sig)
	s.backToJobStop(t, sig)
	return s.resume(t.tid, sig)
}

// continued reports whether a stop of the leader of a process stopped by
// job control shows it running again: SIGCONT came (the kernel reports
// it to the listening thread with a trap of its own, then delivers it), or
// a syscall or an event a running thread reaches. The delivery of another
// signal does not (backToJobStop).
func (s *session) continued(st proc.Stop) bool {
	switch {
	case st.Event() == unix.PTRACE_EVENT_STOP:
		return st.Status.StopSignal() == unix.SIGTRAP
	case st.Signal() != 0:
		return st.Signal() == int(unix.SIGCONT)
	}
	return true
}

// backToJobStop makes a thread of a process stopped by job control stop
// again right after the delivery of a signal it is in the delivery stop of,
// before any code of the program runs. A thread listening in its group stop
// is woken by the kernel for every signal it is sent (a shell's SIGCHLD),
// and resumed with it, it ran on as if SIGCONT had come: a pending
// interrupt traps it on its way back to user code, in its group stop
// again, with a handler's frame (if any) in place to run at SIGCONT, as
// without tprec.
func (s *session) backToJobStop(t *thread, sig int) {
	if s.jobStopped && sig != int(unix.SIGCONT) && sig != int(unix.SIGKILL) {
		proc.Interrupt(t.tid)
	}
}

// noteSignal records a non-fatal signal delivered during the interval. One
// the program ignores (SIGPIPE set to SIG_IGN by most servers, SIGCHLD left
// at its default by redis-server, whose background saves end with one) does
// nothing to it and is not recorded: the window goes on through it.
func (s *session) noteSignal(t *thread, sig int) {
	if s.cur == nil || ignoredSignal(s.pid, sig) {
		return
	}
	regs, info, _ := signalStop(t.tid)
	// The last call of the process as deliver numbers it: with the eBPF
	// backend s.seq is that of the interval's start until its end, and a
	// signal numbered so after one deliver numbered would come before it
	// in the file, which the encoder refuses (the checkpoint was lost).
	seq, err := s.src.lastSeq(s)
	if err != nil {
		seq = s.seq
	}
	s.cur.signals = append(s.cur.signals, format.SignalEvent{Seq: seq, Tid: t.tid, Signo: sig, Siginfo: info, Regs: regs, Interval: s.cur.meta.Index})
	why := "it was not seen reaching a handler"
	if t.held {
		why = "it arrived while tprec held the threads for a boundary"
	}
	s.notReplayable(fmt.Sprintf("signal %s delivered to thread %d after syscall %d: %s", unix.SignalName(unix.Signal(sig)), t.tid, seq, why))
}

// signalStop reads a thread's registers and siginfo at a signal-delivery
// stop.
func signalStop(tid int) (format.Regs, []byte, error) {
	regs, err := proc.GetRegs(tid)
	if err != nil {
		return regs, nil, err
	}
	info, err := proc.GetSiginfo(tid)
	return regs, info, err
}

// crash writes the checkpoint of a fatal signal that stopped thread t in its
// delivery, the other threads held, then lets the signal proceed.
func (s *session) crash(t *thread, sig int) error {
	regs, info, err := signalStop(t.tid)
	if err != nil {
		return err
	}
	if sig == s.crashed && (selfSent(info, s.pid) || selfSent(info, os.Getpid())) {
		// A crash handler (redis-server's crash log, for one) that ran
		// after the checkpoint of the crash and now raises the same signal
		// again to die of it: the first checkpoint is the one that matters.
		s.logf("process %d raised %v itself after its handler ran: no second checkpoint", s.pid, unix.SignalName(unix.Signal(sig)))
		return s.resume(t.tid, sig)
	}
	s.logf("process %d received %v at rip %#x: writing checkpoint", s.pid, unix.SignalName(unix.Signal(sig)), regs.Rip)
	s.crashed, s.crashTid, s.crashSP = sig, t.tid, regs.Rsp
	_, s.crashCaught = disposition(s.pid, sig)
	if err := s.holdPatiently(t.tid); err != nil {
		if rerr := s.releaseOthers(); rerr != nil {
			s.logf("resume the other threads: %v", rerr)
		}
		return err
	}
	if moved, err := s.clockSignalRunOut(t, sig, regs.Rip, info); moved {
		if err != nil {
			s.logf("%v", err)
		}
		regs, _ = proc.GetRegs(t.tid)
	}
	s.ctl, s.heldSignal = t.tid, sig
	end := format.EndState{Kind: format.EndSignal, Tid: t.tid, Signo: sig, Siginfo: info, Regs: regs}
	if err := s.dump(end, format.EndSignal); err != nil {
		s.logf("dump at %v: %v", unix.SignalName(unix.Signal(sig)), err)
	}
	requeued := s.heldSignal == 0
	s.ctl, s.heldSignal = s.pid, 0
	// If a handler survives the signal, recording starts afresh, once
	// the handler had time to run undisturbed (crashQuiet). A boundary a
	// tick asked for just before the crash is moot: its interval went
	// into the checkpoint. Left standing, it had the stop its interrupt
	// brought, in the handler, set recording up again (gawk, whose
	// handler prints a message and aborts: found by a sweep).
	s.state = stateStarting
	s.want.boundary = false
	if s.crashCaught {
		s.quietUntil, s.quietLong = time.Now().Add(crashQuiet), false
		s.yield.on()
	}
	s.ring.reset()
	// The other threads go on whatever happens.
	if err := s.releaseOthers(); err != nil {
		return err
	}
	if requeued {
		// The dump shadow's injection gave the signal back to the kernel,
		// with its siginfo: the thread takes it as soon as it runs, as if
		// nothing had happened in between (onSignal).
		s.requeuedTid = t.tid
		if err := s.resume(t.tid, 0); err != nil && !proc.Gone(err) {
			return err
		}
		return nil
	}
	s.letCrashGo(t.tid)
	return s.resumeFatal(t.tid, sig)
}

// resumeFatal resumes a thread held at a fatal signal with that signal. A
// thread that is no longer in a stop of tprec's cannot take it that way, and
// the signal would be lost (a signal sent from outside is not raised again
// by the program): it is sent again instead. The program must end as it
// would have without tprec.
func (s *session) resumeFatal(tid, sig int) error {
	err := proc.Resume(s.src.resumeRequest(), tid, sig)
	if err == nil {
		return nil
	}
	if !proc.Gone(err) {
		return err
	}
	if _, serr := os.Stat(fmt.Sprintf("/proc/%d/task/%d", s.pid, tid)); serr == nil {
		s.logf("thread %d was not stopped to take its %v: sending it again", tid, unix.SignalName(unix.Signal(sig)))
		if kerr := unix.Tgkill(s.pid, tid, unix.Signal(sig)); kerr != nil && kerr != unix.ESRCH {
			return fmt.Errorf("send %v again: %w", unix.SignalName(unix.Signal(sig)), kerr)
		}
	}
	return nil
}

// holdTimeout bounds how long a boundary or a dump request waits for the
// other threads to stop. A thread in an uninterruptible sleep (I/O on a
// network file system, a vfork waiting for its child to exec) stops only when
// the sleep ends, and the leader, stopped meanwhile, must not wait for it:
// the boundary is tried again at the next tick. A crash, a dump at exit and a
// detach wait longer (holdPatiently), and then go on without that thread.
const (
	holdTimeout  = 100 * time.Millisecond
	holdPatience = 2 * time.Second
)

// errThreadBusy says a thread did not stop within holdTimeout.
var errThreadBusy = errors.New("a thread did not stop in time")

// holdOthers stops every thread but except, and keeps them stopped until
// releaseOthers: a boundary or a dump sees the whole process at one instant,
// and the shadow forked then holds no half-done write of another thread.
// Whatever a thread reports on its way to the stop is taken into account: a
// syscall it completes is logged, a thread it creates is held too, a signal
// waits in its delivery stop (a fatal one is handled when it is released).
//
// With a timeout, a thread that has not stopped by then makes it return
// errThreadBusy (the threads it holds stay held, for releaseOthers); the
// thread's stop comes later and is handled as any other.
func (s *session) holdOthers(except int, timeout time.Duration) error {
	var pending []*thread
	for tid, t := range s.threads {
		if tid == except || t.held {
			continue
		}
		if err := proc.Interrupt(tid); err != nil && !proc.Gone(err) {
			return fmt.Errorf("stop thread %d: %w", tid, err)
		}
		pending = append(pending, t)
	}
	deadline := time.Now().Add(timeout)
	for _, t := range pending {
		if err := s.holdThread(t, deadline); err != nil {
			return err
		}
	}
	return nil
}

// holdThread waits until thread t, asked to stop, is held (holdStop) or
// gone, and so for the threads it creates meanwhile.
func (s *session) holdThread(t *thread, deadline time.Time) error {
	pending := []*thread{t}
	for len(pending) > 0 {
		t := pending[0]
		pending = pending[1:]
		for !t.held && s.threads[t.tid] != nil {
			st, err := s.waitHeld(t.tid, deadline)
			if errors.Is(err, errThreadBusy) {
				return fmt.Errorf("thread %d: %w", t.tid, err)
			}
			if err != nil || st.Exited() {
				delete(s.threads, t.tid)
				break
			}
			nt, err := s.holdStop(t, st)
			if err != nil {
				return err
			}
			if nt != nil {
				pending = append(pending, nt)
			}
		}
	}
	return nil
}

// holdStop takes one stop of a thread being held into account (holdOthers):
// the thread is held at it, except after its own signal (the eBPF programs',
// suppressed), which resumes it and asks it to stop again. A thread it
// created is returned, to be held too.
func (s *session) holdStop(t *thread, st proc.Stop) (*thread, error) {
	req := s.src.resumeRequest()
	var created *thread
	switch {
	case st.SyscallStop():
		si, err := proc.GetSyscallInfo(t.tid)
		if err != nil {
			return nil, err
		}
		if si.Op == proc.SyscallEntry {
			t.entry = &si
		} else if si.Op == proc.SyscallExit {
			s.syscallExit(t, si)
		}
		t.hold(req, 0)
	case st.Event() == unix.PTRACE_EVENT_STOP:
		t.hold(req, 0)
		t.listen = st.Status.StopSignal() != unix.SIGTRAP // in a group stop
	case st.Event() == unix.PTRACE_EVENT_CLONE:
		child, err := proc.EventMsg(t.tid)
		if err != nil {
			return nil, err
		}
		s.onClone(t, int(child))
		if nt := s.threads[int(child)]; nt != nil && !nt.held {
			created = nt
		}
		t.hold(req, 0)
	case st.Event() == unix.PTRACE_EVENT_EXIT && t.tid != s.pid:
		s.threadExits(t.tid)
		// On its way out: it finishes first, so that what its end writes
		// is in memory when the boundary reads it (the kernel clears the
		// id CLONE_CHILD_CLEARTID names, which pthread_join reads; a
		// replay from here, without the thread, would find it still set).
		// Its exit is the next thing holdOthers waits for.
		if err := s.resume(t.tid, 0); err != nil {
			return nil, err
		}
	case st.Event() == unix.PTRACE_EVENT_EXIT:
		s.threadExits(t.tid)
		t.exiting = true
		t.hold(req, 0)
	case st.Event() != 0:
		t.hold(req, 0)
	default:
		sig := st.Signal()
		s.giveSiginfoBack(t.tid, sig)
		if sup, err := s.suppressed(t, sig); err != nil {
			return nil, err
		} else if sup {
			if err := s.resume(t.tid, 0); err != nil {
				return nil, err
			}
			if err := proc.Interrupt(t.tid); err != nil && !proc.Gone(err) {
				return nil, err
			}
			return nil, nil
		}
		t.hold(req, sig)
		t.fatal = s.state == stateRecording && s.fatal(sig)
		if !t.fatal {
			// A signal the program catches waits in its delivery stop:
			// released, the thread takes it as any other (deliver), in
			// the interval open then. Before that was done, one that a
			// thread met while held cut every window that ended after it,
			// a signal during a crash's hold the whole checkpoint.
			// Also when recording starts: held for the first interval,
			// the thread takes it in that interval.
			if _, caught := disposition(s.pid, sig); caught {
				t.caught = true
			} else {
				s.noteSignal(t, sig)
			}
		}
	}
	return created, nil
}

// holdPatiently is holdOthers for what cannot be put off (a crash, a dump
// at exit, a detach): a thread that does not stop within holdPatience is
// left running, and said so; whatever needs its registers then fails on its
// own, with that thread named.
func (s *session) holdPatiently(except int) error {
	err := s.holdOthers(except, holdPatience)
	if errors.Is(err, errThreadBusy) {
		s.logf("%v: going on without it", err)
		return nil
	}
	return err
}

// waitHeld waits for the next stop of a thread being held, polling until
// deadline (most threads stop within a few tens of microseconds).
func (s *session) waitHeld(tid int, deadline time.Time) (proc.Stop, error) {
	var pause backoff
	for {
		st, ok, err := proc.WaitNoHang(tid)
		if err != nil || ok {
			return st, err
		}
		if time.Now().After(deadline) {
			return proc.Stop{}, errThreadBusy
		}
		pause.wait()
	}
}

// backoff is the pause between two polls of a thread's stop: from 20 us
// (most threads stop within a few tens of microseconds), doubling up to 5 ms.
type backoff time.Duration

func (b *backoff) wait() {
	*b = backoff(min(max(2*time.Duration(*b), 20*time.Microsecond), 5*time.Millisecond))
	time.Sleep(time.Duration(*b))
}

// releaseOthers resumes the threads holdOthers stopped, each as its stop
// requires; a thread held in the delivery of a fatal signal is handled as a
// crash first.
func (s *session) releaseOthers() error {
	var crashed, caught []*thread
	for _, t := range s.threads {
		if !t.held {
			continue
		}
		if t.fatal {
			crashed = append(crashed, t)
			continue
		}
		if t.caught {
			caught = append(caught, t)
			continue
		}
		t.held = false
		var err error
		if t.listen {
			err = proc.Listen(t.tid)
		} else {
			err = proc.Resume(t.req, t.tid, t.sig)
		}
		t.sig, t.listen = 0, false
		if err != nil && !proc.Gone(err) {
			return fmt.Errorf("resume thread %d: %w", t.tid, err)
		}
	}
	for _, t := range caught {
		t.held, t.caught = false, false
		sig := t.sig
		t.sig = 0
		var err error
		if s.state == stateRecording && s.cur != nil {
			err = s.deliver(t, sig)
		} else {
			// After a crash or at the end: nothing is recorded any more.
			err = s.resume(t.tid, sig)
		}
		if err != nil && !proc.Gone(err) {
			return err
		}
	}
	for _, t := range crashed {
		t.held, t.fatal = false, false
		sig := t.sig
		t.sig = 0
		if s.state != stateRecording {
			if err := s.resume(t.tid, sig); err != nil {
				return err
			}
			continue
		}
		if err := s.crash(t, sig); err != nil {
			return err
		}
	}
	return nil
}

// start sets recording up at the first stop: header, vDSO patch, interval 0.
func (s *session) start() error {
	if s.requeuedTid != 0 {
		// A crash's signal waits for its delivery (onSignal): a handler
		// that survives it is recorded afresh from a stop after that.
		return nil
	}
	if s.crashed != 0 && s.crashTid != 0 {
		// A process that had a handler at its crash runs it now (the
		// signal was given back to the thread in its delivery stop, or
		// queued again with its siginfo): it is not dying, even when
		// SA_RESETHAND has put the signal back to its default, and a
		// second signal would kill it in the middle of its handler (a
		// crash report half written).
		if _, caught := disposition(s.pid, s.crashed); !caught && !s.crashCaught {
			// Not yet: the process is most likely dying of its signal,
			// its threads on their way out. An interval opened now
			// injects calls into the leader, which a kill pending in it
			// turns into a zombie that no wait reports while another
			// thread waits in a stop for tprec: both hung, and the
			// process with them (seen in clean-clone runs).
			s.resendCrash()
			return nil
		}
		s.crashTid = 0
	}
	if dying(s.pid) {
		return nil // its exits come next
	}
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
		if err := s.seccompAllowsRecording(vdsoStart(maps)); err != nil {
			return fmt.Errorf("process %d cannot be recorded: %w", s.pid, err)
		}
		s.stepOutOfVDSO(maps)
		var rips []uint64
		for tid := range s.threads {
			if r, err := proc.GetRegs(tid); err == nil {
				rips = append(rips, r.Rip)
			}
		}
		if s.vdso, err = patchVDSO(s.mem, maps, rips); err != nil {
			return err
		}
		if s.vdso == nil {
			s.logf("a thread is stopped inside the vDSO: recording starts at the next stop")
			return nil
		}
		s.installClock(maps)
	}
	s.fillHeader()
	s.shadowCgroup = shadowPidsCgroup(s.pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.pid)); err == nil {
		s.memDirs, s.memV2 = memoryCgroup(string(b), "/sys/fs/cgroup")
	}
	s.state = stateRecording
	s.mark = costMark{at: time.Now(), cpu: cpuNow(), held: s.heldAll}
	if s.crashed != 0 {
		s.logf("process %d goes on after its %v (a handler, or threads not dead yet): recording it afresh", s.pid, unix.SignalName(unix.Signal(s.crashed)))
	} else {
		s.logf("recording process %d (%s), interval %v, keeping %d intervals", s.pid, s.hdr.ExePath, s.o.Interval, s.o.Keep)
	}
	return s.openInterval(time.Now())
}

// runOutTries bounds the rounds of proc.RunOut that take a thread out of
// the vDSO or the clock log's code. A clock read lasts well under a
// microsecond and a round at least 20 us, so the first round takes a
// thread out unless the program does little else than read the clock; one
// that does is found inside at nine rounds in ten (testdata/slowalarm.c:
// up to 93 rounds, 20 ms), and only after all of them stepped out, at most
// vdsoStepMax instructions (a clock read is a few hundred at most, a retry
// loop against a concurrent clock update a few more). With 30 rounds, a
// fifth of slowalarm's run-outs ended in steps, and a tprec killed during
// one killed the program with the step's SIGTRAP (1 kill in 10).
const (
	runOutTries = 300
	vdsoStepMax = 20000
)

// runOut lets thread t, stopped where inside says yes, run until it stops
// elsewhere (proc.RunOut), and reports whether it did. It single-steps the
// thread only as RunOut's last resort, for a thread that does nothing but
// read the clock (a tprec killed during a step kills the process with the
// step's SIGTRAP). A signal that comes meanwhile is not delivered inside, where
// its handler would return into code that is about to change or that a
// replay does not have: it is taken from its delivery stop and sent to the
// thread again once it is out (sendAgain), but for the eBPF programs' own
// signal, dropped as always. An event stop that comes first (a clone, an
// exit) ends the run, t held there when it was held (holdStop), else left
// in it; a clone of a thread not held is followed, and the run goes on.
//
// t must be in a stop it can be resumed from without a signal (not in a
// group stop, not at a syscall's entry, no signal held for it).
func (s *session) runOut(t *thread, inside func(uint64) bool) (bool, error) {
	other := func(st proc.Stop) (proc.RunOn, error) {
		if st.Signal() != 0 || !t.held {
			return s.heldOn(t, st)
		}
		nt, err := s.holdStop(t, st)
		if err == nil {
			err = s.holdThread(t, time.Now().Add(holdTimeout))
		}
		if err == nil && nt != nil {
			err = s.holdThread(nt, time.Now().Add(holdTimeout))
		}
		return proc.RunOn{Stay: true}, err
	}
	out, held, err := proc.RunOut(t.tid, inside, runOutTries, vdsoStepMax, other)
	s.sendAgain(t, held)
	return out, err
}

// heldOn says what proc.RunOut or proc.SendAgain does with a stop of
// thread t that came first (an event of a held thread aside, which runOut
// holds it at): a signal is held back, but for the
// eBPF programs' own, dropped as always; a clone is followed, and the run
// goes on; another event ends it.
func (s *session) heldOn(t *thread, st proc.Stop) (proc.RunOn, error) {
	if sig := st.Signal(); sig != 0 {
		if sup, err := s.suppressed(t, sig); err != nil || sup {
			return proc.RunOn{}, err
		}
		return proc.RunOn{Hold: true}, nil
	}
	if st.Event() == unix.PTRACE_EVENT_CLONE {
		child, err := proc.EventMsg(t.tid)
		if err != nil {
			return proc.RunOn{}, err
		}
		s.onClone(t, int(child))
		return proc.RunOn{}, nil
	}
	return proc.RunOn{Stay: true}, nil
}

// sendAgain sends thread t the signals runOut took from their delivery
// stops, and notes the siginfo each came with, which giveSiginfoBack sets
// again at its next delivery stop.
func (s *session) sendAgain(t *thread, held []proc.HeldSignal) {
	for _, h := range held {
		if err := unix.Tgkill(s.pid, t.tid, unix.Signal(h.Signo)); err != nil {
			s.logf("send %v to thread %d again: %v", unix.SignalName(unix.Signal(h.Signo)), t.tid, err)
			continue
		}
		if s.resent == nil {
			s.resent = map[int][]proc.HeldSignal{}
		}
		s.resent[t.tid] = append(s.resent[t.tid], h)
	}
}

// giveSiginfoBack gives a signal that sendAgain sent thread tid, now in its
// delivery stop, the siginfo it first came with.
func (s *session) giveSiginfoBack(tid, sig int) {
	list := s.resent[tid]
	for i, h := range list {
		if h.Signo != sig {
			continue
		}
		if info, err := proc.GetSiginfo(tid); err != nil || !selfSent(info, os.Getpid()) {
			return // another instance, sent by someone else
		}
		if err := proc.SetSiginfo(tid, h.Siginfo); err != nil && !proc.Gone(err) {
			s.logf("give %v its siginfo back: %v", unix.SignalName(unix.Signal(sig)), err)
		}
		s.resent[tid] = slices.Delete(list, i, i+1)
		return
	}
}

// canRunOut reports whether thread t, stopped, is in a stop runOut takes.
func canRunOut(t *thread) bool {
	if t.listen || t.exiting || t.fatal || t.caught || t.sig != 0 {
		return false
	}
	si, err := proc.GetSyscallInfo(t.tid)
	return err == nil && si.Op != proc.SyscallEntry
}

// stepOutOfVDSO runs out of the vDSO every thread stopped inside it
// (runOut), so that the patch goes in at this stop. Without that a program that
// spends its time reading the clock (python3 looping on time.time()) was
// found there again stop after stop, and a short one exited unrecorded.
// This runs before recording starts; a thread that cannot be run out
// (in a syscall's entry stop, in a group stop) is left, and the patch
// waits for a later stop as before.
func (s *session) stepOutOfVDSO(maps []format.Mapping) {
	var lo, hi uint64
	for _, m := range maps {
		if m.Path == "[vdso]" {
			lo, hi = m.Start, m.End
		}
	}
	if lo == 0 {
		return
	}
	inside := func(rip uint64) bool { return rip >= lo && rip < hi }
	for tid, t := range s.threads {
		r, err := proc.GetRegs(tid)
		if err != nil || !inside(r.Rip) || !canRunOut(t) {
			continue
		}
		if out, err := s.runOut(t, inside); (err != nil || !out) && debugStops {
			s.logf("thread %d stays in the vDSO at %#x: out %v, %v", tid, r.Rip, out, err)
		}
	}
}

// resendCrash sends the fatal signal of the crash again, once.
func (s *session) resendCrash() {
	// No handler: the process is dying of it, or the signal given
	// back was lost on the way. A process must not outlive its crash
	// because of tprec: the signal goes again, which changes nothing
	// for one already dying. (The process that seemed to survive its
	// crash in a few runs was in fact hung by tprec: start, below.)
	name := unix.SignalName(unix.Signal(s.crashed))
	to := fmt.Sprintf("thread %d", s.crashTid)
	err := unix.Tgkill(s.pid, s.crashTid, unix.Signal(s.crashed))
	if err == unix.ESRCH {
		// That thread is gone: to the process, whose default
		// action for the signal ends every thread.
		to = fmt.Sprintf("process %d", s.pid)
		err = unix.Kill(s.pid, unix.Signal(s.crashed))
	}
	if err == nil {
		s.logf("sent %v to %s again, in case its delivery was lost", name, to)
	} else {
		s.logf("send %v again: %v", name, err)
	}
	s.crashTid = 0
}

// dying reports whether process pid is being killed: SIGKILL pending in its
// leader (a group exit sends it to every thread), or its leader a zombie.
func dying(pid int) bool {
	st, err := procStatus(pid)
	if err != nil {
		return true
	}
	if strings.HasPrefix(st["State"], "Z") || strings.HasPrefix(st["State"], "X") {
		return true
	}
	kill := uint64(1) << (unix.SIGKILL - 1)
	pnd, _ := pendingSignals(st)
	return pnd&kill != 0
}

// detach leaves the process running as if tprec had never been there.
func (s *session) detach(why string) error {
	if s.gone {
		return nil
	}
	if err := s.stopForDetach(); err != nil {
		return err
	}
	if s.gone {
		return nil
	}
	if err := s.holdPatiently(s.pid); err != nil {
		return err
	}
	s.killShadow()
	s.killStray()
	s.reapZombie(true)
	s.disarmEntry()
	if s.vdso != nil && s.mem != nil {
		s.clockStepOut()
		s.removeClock()
		s.leaveVDSO()
		if err := s.vdso.undo(s.mem); err != nil {
			s.logf("restore vdso: %v", err)
		}
	}
	for tid, t := range s.threads {
		if tid != s.pid && t.held {
			// A thread in a group stop stays stopped, as without tprec.
			proc.Detach(tid, t.sig)
		}
	}
	err := proc.DetachGiving(s.pid, s.pid, s.detachHeld)
	if err == nil {
		s.logf("detached from process %d (%s); it runs on", s.pid, why)
	}
	return err
}

// leaveVDSO moves every stopped thread out of the vDSO stubs before they
// are undone (vdsoPatch.leave).
func (s *session) leaveVDSO() {
	for tid, t := range s.threads {
		if tid != s.pid && !t.held {
			continue
		}
		regs, err := proc.GetRegs(tid)
		if err != nil {
			continue
		}
		moved, err := s.vdso.leave(&regs, s.mem)
		if err == nil && moved {
			err = proc.SetRegs(tid, regs)
		}
		if err != nil {
			s.logf("thread %d inside the patched vDSO: %v", tid, err)
		}
	}
}

// stopForDetach gets the target into an event stop, handling whatever else
// arrives first (a syscall in progress completes and is discarded).
//
// The leader may already be stopped, in a stop tprec took and did not resume
// (a boundary or a dump that failed with the target held for it, the shadow's
// clone refused): an interrupt then makes no stop to wait for, and tprec
// waited forever, the target stopped with it. That stop is used as it is.
func (s *session) stopForDetach() error {
	st, ok, err := proc.WaitNoHang(s.pid)
	if err != nil {
		return err
	}
	if !ok {
		st, ok = proc.StoppedAt(s.pid)
	}
	if !ok {
		if err := s.interrupt(); err != nil {
			return err
		}
	}
	for {
		if !ok {
			if st, err = s.waitLeader(); err != nil {
				return err
			}
		}
		ok = false
		if st.Exited() {
			s.gone = true
			return nil
		}
		if st.Event() == unix.PTRACE_EVENT_STOP {
			// An interrupt's stop, or a group stop (job control): the
			// detach leaves a process stopped so stopped, as it found it.
			// Resumed and interrupted again, a stopped process came back
			// to its group stop for ever, and Ctrl-C hung.
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
		give := st.Signal()
		if s.src.ownSignal(give) {
			give = 0 // the eBPF programs', for a recording that ends
		}
		if info, err := proc.GetSiginfo(s.pid); give != 0 && err == nil && !readFault(give, info) {
			// Delivered here, a handler could return into code the
			// detach takes away (the clock log's, unmapped; a thread
			// inside it is run out first): held back, and given with
			// the detach, once the process is as it was.
			s.detachHeld = append(s.detachHeld, proc.HeldSignal{Signo: give, Siginfo: info})
			give = 0
		}
		if err := proc.Resume(s.src.resumeRequest(), s.pid, give); err != nil {
			return err
		}
		if err := s.interrupt(); err != nil {
			return err
		}
	}
}

// adoptThreads takes in the threads of a dying target that tprec was never
// told about. A thread cloned just as its group was killed (a crash in
// another thread, a SIGKILL) may never be reported: its parent dies
// without stopping at its clone event. The new thread is traced all the
// same, and stops at its exit event like any other; the process cannot
// finish dying until tprec lets it go. tprec used to wait for the leader's
// exit forever, the process a zombie holding its threads' resources (a
// listening socket among them), seen with redis-server's jemalloc starting
// a background thread as it crashed.
func (s *session) adoptThreads() {
	tids, _ := proc.Tids(s.pid)
	for _, tid := range tids {
		if s.threads[tid] != nil {
			continue
		}
		s.threads[tid] = &thread{tid: tid}
		s.waiters.add(tid, false)
		if debugStops {
			s.logf("thread %d of the dying process was never reported: waiting for it too", tid)
		}
	}
}

// waitLeader waits for the leader's next stop outside the loop. Meanwhile
// it lets the other threads finish dying, and holds those that stop: the
// leader of an exiting thread group is reported only once every other
// thread is gone, and a traced thread is gone only when its tracer has let it
// past its exit stop and collected it.
func (s *session) waitLeader() (proc.Stop, error) {
	var pause backoff
	for {
		st, ok, err := proc.WaitNoHang(s.pid)
		if err != nil || ok {
			return st, err
		}
		if dying(s.pid) {
			s.adoptThreads()
		}
		for tid, t := range s.threads {
			if tid == s.pid || t.held {
				continue
			}
			ts, ok, err := proc.WaitNoHang(tid)
			switch {
			case err != nil || (ok && ts.Exited()):
				delete(s.threads, tid)
			case !ok:
			case ts.Event() == unix.PTRACE_EVENT_EXIT:
				s.threadExits(tid)
				s.resume(tid, 0)
			default:
				if _, err := s.holdStop(t, ts); err != nil {
					return proc.Stop{}, err
				}
			}
		}
		pause.wait()
	}
}

func (s *session) fail(err error) error {
	if debugStops {
		s.logf("failing: %v", err)
	}
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

// errorf reports what the user must see even with --quiet.
func (s *session) errorf(f string, args ...any) {
	fmt.Fprintf(s.o.Errors, "tprec: "+f+"\n", args...)
}

// defaultIgnored are the signals whose default action is to ignore them.
var defaultIgnored = map[unix.Signal]bool{unix.SIGCHLD: true, unix.SIGURG: true, unix.SIGWINCH: true,
	// Job control, at its default action, stops or continues the process
	// and leaves its memory and registers alone (a call it cut short
	// returns EINTR, and that is recorded).
	unix.SIGSTOP: true, unix.SIGCONT: true, unix.SIGTSTP: true, unix.SIGTTIN: true, unix.SIGTTOU: true}

// ignoredSignal reports whether process pid ignores sig: its disposition is
// SIG_IGN, or the default one of a signal ignored by default (the SigIgn and
// SigCgt masks of /proc/PID/status). Delivering it changes nothing in the
// program, so a replay has nothing to reproduce.
func ignoredSignal(pid, sig int) bool {
	ignored, _ := disposition(pid, sig)
	return ignored
}

// disposition reads from /proc/PID/status what the process does with sig:
// ignores it (ignoredSignal), or catches it with a handler.
func disposition(pid, sig int) (ignored, caught bool) {
	st, err := procStatus(pid)
	if err != nil || sig < 1 || sig > 64 {
		return false, false
	}
	ign, ok1 := statusMask(st, "SigIgn")
	cgt, ok2 := statusMask(st, "SigCgt")
	if !ok1 || !ok2 {
		return false, false
	}
	bit := uint64(1) << (sig - 1)
	return ign&bit != 0 || (cgt&bit == 0 && defaultIgnored[unix.Signal(sig)]), cgt&bit != 0
}

// procStatus reads the fields of /proc/PID/status, by name.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st, nil
}

// statusMask parses a signal mask field of procStatus (hexadecimal).
func statusMask(st map[string]string, key string) (uint64, bool) {
	m, err := strconv.ParseUint(st[key], 16, 64)
	return m, err == nil
}

// selfSent reports whether a siginfo is that of a signal the process pid
// sent itself (kill, tgkill, raise, abort: si_code <= 0 with its own pid as
// the sender).
func selfSent(info []byte, pid int) bool {
	if len(info) < 20 {
		return false
	}
	code := int32(le32(info[8:]))
	return code <= 0 && int(int32(le32(info[16:]))) == pid
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

// kernelRelease is the running kernel's release (uname -r), or empty.
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func (s *session) fillHeader() {
	h := &s.hdr
	h.Arch = "x86_64"
	h.Pid = s.pid
	h.Backend = s.src.name()
	h.Interval = s.o.Interval
	h.FullPages = true
	h.KernelRelease = kernelRelease()
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

// noteMemoryDrops tells the user, at most every 10 s, that the ring dropped
// intervals to stay within --max-memory: history asked for by --keep and
// not kept, which the checkpoint's window will lack.
func (s *session) noteMemoryDrops(now time.Time) {
	n := s.ring.memDropped - s.dropNoted
	if n == 0 || now.Sub(s.dropNote) < 10*time.Second {
		return
	}
	s.dropNoted, s.dropNote = s.ring.memDropped, now
	newest := ""
	if k := len(s.ring.intervals); k > 0 {
		iv := s.ring.intervals[k-1]
		newest = fmt.Sprintf("; the newest logged %d calls in %.1f MiB", iv.calls(), float64(iv.logBytes)/(1<<20))
	}
	s.logf("pid %d: the ring dropped %d older interval(s) to stay within --max-memory %.0f MiB: %.1f s of history in %d interval(s) kept%s",
		s.pid, n, float64(s.o.MaxMemory)/(1<<20), s.history(now).Seconds(), len(s.ring.intervals), newest)
}

// history is how far back the ring reaches: to the start of its oldest
// interval, or of the interval being recorded when it holds none.
func (s *session) history(now time.Time) time.Duration {
	if len(s.ring.intervals) > 0 {
		return now.Sub(s.ring.intervals[0].meta.Start)
	}
	if s.cur != nil {
		return now.Sub(s.cur.meta.Start)
	}
	return 0
}

// statusLine says how much history the ring holds and what it costs.
func (s *session) statusLine(now time.Time) string {
	var lost uint64
	for _, iv := range s.ring.intervals {
		lost += iv.lost
	}
	over := ""
	if s.ring.bytes > s.o.MaxMemory {
		// "ring 119.9 of 64 MiB" alone read as a limit that does not hold.
		over = " (over --max-memory: the newest interval, which the ring keeps whatever its size)"
	}
	line := fmt.Sprintf("pid %d: %.1f s of history in %d intervals, ring %.1f of %.0f MiB%s (tprec resident %.0f MiB), %d syscalls logged, %d events lost",
		s.pid, s.history(now).Seconds(), len(s.ring.intervals)+1, float64(s.ring.bytes)/(1<<20), float64(s.o.MaxMemory)/(1<<20), over, float64(residentBytes())/(1<<20), s.seq, lost)
	if n, d := s.src.heldFor(); n > 0 {
		line += fmt.Sprintf(", held %d times (%v in all) for the eBPF reader to catch up", n, d.Round(time.Millisecond))
	}
	if s.skipped > 0 {
		line += fmt.Sprintf(", %d boundaries skipped (the process was idle)", s.skipped)
	}
	if s.stretch > s.o.Interval {
		line += fmt.Sprintf(", intervals stretched to %v (boundaries cost %v)", s.stretch, (s.costStop + s.costSave).Round(time.Millisecond))
	}
	if s.noShadow > 0 {
		line += fmt.Sprintf(", no shadow for the last %d intervals (%s)", s.noShadow, s.noShadowKind)
	}
	if s.shadowsDied > 0 {
		line += fmt.Sprintf(", %d shadows killed (out of memory)", s.shadowsDied)
	}
	return line
}

// cpuNow is cpuUsed's total.
func cpuNow() time.Duration {
	cpu, _, _ := cpuUsed()
	return cpu
}

// costMark is where the cost a status line gives starts: the time, tprec's
// CPU time and session.heldAll then.
type costMark struct {
	at        time.Time
	cpu, held time.Duration
}

// costSince says what the recording cost since the last status line (or
// the start), given tprec's CPU time now (cpuNow: with the trial replays
// it waited for): tprec's CPU in percent of one,
// and the share of the time the boundaries held the process. An engineer
// deciding whether to keep a recorder on a loaded server asks that first.
func (s *session) costSince(now time.Time, cpu time.Duration) string {
	m := s.mark
	s.mark = costMark{now, cpu, s.heldAll}
	wall := now.Sub(m.at)
	if m.at.IsZero() || wall <= 0 {
		return ""
	}
	return fmt.Sprintf("; over the last %v tprec took %.1f%% of a CPU and its boundaries held the process %.1f%% of the time",
		wall.Round(time.Second), 100*float64(cpu-m.cpu)/float64(wall), 100*float64(s.heldAll-m.held)/float64(wall))
}

// residentBytes is tprec's own resident memory (0 if unknown).
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		return 0
	}
	return rss * int64(os.Getpagesize())
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
