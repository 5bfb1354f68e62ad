package recorder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// shadow is the stopped copy-on-write fork that keeps the interval-start
// content of every page the target writes during the interval.
type shadow struct {
	pid int
	pm  *proc.Pagemap
	// div: when the shadow was kept from an earlier interval (kept.go),
	// the pages that no longer shared their frame with it at this
	// interval's start, with their content then.
	div *diverged
	// maps are the target's mappings when the shadow was forked: its own
	// (keepShadow compares them with the target's now).
	maps []format.Mapping
}

// badStack is the stack pointer the shadow starts with: inside the first page,
// which mmap_min_addr keeps unmapped, so the shadow cannot run the target's code
// past its first stack access even if it were ever let go before EXITKILL.
const badStack = 0x1000

// createShadow injects clone() into the stopped target through the
// trampoline, which blocks the target's signals for the call: the shadow
// inherits that fully blocked mask, so a fault in it kills it (the kernel
// forces a blocked fatal signal to its default). A thread stopped in the
// delivery of a fatal signal (s.heldSignal) keeps it: the injection queues it
// again and it is delivered when the thread runs.
func (s *session) createShadow() (*shadow, error) {
	// Neither step fails the boundary: a shadow without those ranges is
	// what tprec made before it knew of them (the trial replay then
	// catches the originals it gets wrong).
	dontFork, err := s.allowFork()
	if err != nil {
		s.logf("process %d: the shadow will lack its ranges marked MADV_DONTFORK: %v", s.pid, err)
	}
	sh, err := s.cloneShadow()
	if rerr := s.restoreDontFork(dontFork); rerr != nil {
		s.logf("process %d: some of its ranges stay MADV_DOFORK: %v", s.pid, rerr)
	}
	return sh, err
}

// dontForkEvery: the first shadow looks for ranges marked MADV_DONTFORK
// while the target is stopped; a process in which none was marked at the
// last look is looked at again while it is stopped when its syscall log
// shows a madvise(MADV_DONTFORK) (dontForkCall), and every dontForkEvery
// shadows after the target resumes, for ranges marked otherwise (a
// driver's mapping): reading /proc/PID/smaps walks its page tables,
// milliseconds for a large process, which its stop would pay. A look
// after it resumed that found some makes the next shadow look in the stop.
const dontForkEvery = 8

// dontForkCall reports whether rec is a madvise that marked a range
// MADV_DONTFORK: the next shadow must look for such ranges in the stop.
// Without it, node launched under tprec (or attached while starting) marks
// its heap after the first shadow, and the next shadows, up to
// dontForkEvery of them, had none of it: every original saved there read
// as zeros and every trial replay of the window crashed in V8's code.
func dontForkCall(rec *format.Syscall) bool {
	return rec.Nr == unix.SYS_MADVISE && rec.Ret == 0 && rec.Args[2] == unix.MADV_DONTFORK
}

// allowFork lets the shadow get the target's ranges marked MADV_DONTFORK,
// which a fork's child does not get: V8 (node) marks its heap so, and the
// originals of the pages written there read as zeros from a shadow without
// them (a node replay crashed at its first instruction, loading a V8 object's
// map). It marks them MADV_DOFORK, in the stopped target, until
// restoreDontFork marks them again, and returns them.
func (s *session) allowFork() ([][2]uint64, error) {
	s.shadows++
	if len(s.dontFork) == 0 && !s.dontForkDue.Load() && s.shadows > 1 {
		if s.shadows%dontForkEvery == 0 {
			pid := s.pid
			s.deferred = append(s.deferred, func() {
				if rs, err := proc.DontForkRanges(pid); err == nil && len(rs) > 0 {
					s.dontForkDue.Store(true)
				}
			})
		}
		return nil, nil
	}
	s.dontForkDue.Store(false)
	rs, err := proc.DontForkRanges(s.pid)
	if err != nil {
		return nil, err
	}
	s.dontFork = rs
	var changed [][2]uint64
	for _, r := range rs {
		err := s.madvise(r, unix.MADV_DOFORK)
		if errors.Is(err, unix.EINVAL) {
			// A mapping of the kernel's that no fork copies (VM_IO:
			// the [uprobes] area), whatever its flags say.
			continue
		}
		if err != nil {
			// Back as they were, those already changed.
			_ = s.restoreDontFork(changed)
			return nil, err
		}
		changed = append(changed, r)
	}
	return changed, nil
}

// restoreDontFork marks the ranges allowFork changed MADV_DONTFORK again.
func (s *session) restoreDontFork(rs [][2]uint64) error {
	var first error
	for _, r := range rs {
		if err := s.madvise(r, unix.MADV_DONTFORK); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// madvise has the target call madvise on range r. A thread held in the
// delivery of a fatal signal gives it back to the kernel at the first
// injected call, as the clone does when it is the first (createShadow).
func (s *session) madvise(r [2]uint64, advice int) error {
	res, err := s.inject(proc.Call{Nr: unix.SYS_MADVISE, Args: []uint64{r[0], r[1] - r[0], uint64(advice)}, Signal: s.heldSignal})
	if res.Requeued {
		s.heldSignal = 0
	}
	if err == nil && res.Ret < 0 {
		err = unix.Errno(-res.Ret)
	}
	if err != nil {
		return fmt.Errorf("madvise %#x-%#x (%d) in the target: %w", r[0], r[1], advice, err)
	}
	return nil
}

// cloneShadow injects the clone that makes the shadow.
func (s *session) cloneShadow() (*shadow, error) {
	c := shadowClone()
	c.Signal = s.heldSignal
	res, err := s.inject(c)
	if res.Requeued {
		s.heldSignal = 0
	}
	if err != nil {
		if res.Child > 0 {
			unix.Kill(res.Child, unix.SIGKILL)
		}
		return nil, fmt.Errorf("create shadow: %w", err)
	}
	if res.Ret < 0 {
		return nil, cloneRefused{unix.Errno(-res.Ret)}
	}
	if res.Child <= 0 {
		return nil, fmt.Errorf("create shadow: clone returned %d and no child", res.Ret)
	}
	child := res.Child
	s.guard.made(child)
	if s.madeShadows == nil {
		s.madeShadows = map[int]string{}
	}
	s.madeShadows[child] = startTime(child)
	// The child is attached automatically (PTRACE_O_TRACECLONE) and starts in a
	// PTRACE_EVENT_STOP; wait for it before touching it.
	for {
		st, err := proc.Wait(child)
		if err != nil {
			return nil, fmt.Errorf("create shadow: %w", err)
		}
		if st.Exited() {
			s.zombie = child
			return nil, fmt.Errorf("create shadow: it died at once (%v)", st)
		}
		if st.Status.Stopped() {
			break
		}
	}
	if err := proc.SetOptions(child, unix.PTRACE_O_EXITKILL); err != nil {
		unix.Kill(child, unix.SIGKILL)
		return nil, fmt.Errorf("create shadow: set exit-kill: %w", err)
	}
	s.unchargeShadow(child)
	// The shadow holds the originals of the pages the target writes, charged
	// to the target's memory cgroup: when that runs out, the OOM killer takes
	// the shadow (its highest score), not the target. The interval then has
	// no originals (closeIntervalSnap says so).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", child), []byte("1000"), 0); err != nil && debugStops {
		s.logf("shadow %d: oom_score_adj: %v", child, err)
	}
	pm, err := proc.OpenPagemap(child)
	if err != nil {
		unix.Kill(child, unix.SIGKILL)
		return nil, err
	}
	return &shadow{pid: child, pm: pm}, nil
}

// shadowName is the name a shadow goes by (its comm: what ps, top, pgrep
// and killall show and match), instead of the target's.
const shadowName = "tprec-shadow"

// nameShadow renames the shadow (prctl(PR_SET_NAME)), so that `pgrep NAME`,
// `ps -C NAME` or `killall NAME` meant for the target do not find its
// stopped copy as well (`pgrep -n NAME` found the shadow alone). The name
// goes into the shadow's copy of the trampoline's data area, bytes no
// checkpoint holds. A process whose seccomp filter would refuse the call
// keeps shadows with its own name. Nothing else depends on it: a failure is
// logged only.
func (s *session) nameShadow(sh *shadow) {
	if s.vdso == nil || s.vdso.tramp == nil || s.unnameable {
		return
	}
	addr := s.vdso.tramp.Spare()
	args := []uint64{unix.PR_SET_NAME, addr}
	if err := s.seccompAllows(unix.SYS_PRCTL, args, s.vdso.insn+2, injectionPurpose(unix.SYS_PRCTL)); err != nil {
		// Filters are only ever added: no later shadow can be named.
		s.unnameable = true
		s.logf("the shadows keep the process's name: %v", err)
		return
	}
	err := func() error {
		mem, err := proc.OpenMem(sh.pid)
		if err != nil {
			return err
		}
		defer mem.Close()
		if err := mem.WriteAt(append([]byte(shadowName), 0), addr); err != nil {
			return err
		}
		res, err := proc.Inject(sh.pid, s.vdso.insn, unix.SYS_PRCTL, args...)
		if err == nil && res.Ret < 0 {
			err = unix.Errno(-res.Ret)
		}
		return err
	}()
	if err != nil && !s.nameFailed {
		// Said once: a shadow the OOM killer took before it was named
		// is said otherwise (shadowDied).
		s.nameFailed = true
		s.logf("shadow %d keeps the process's name: %v", sh.pid, err)
	}
}

// nameNewShadow names the shadow the last boundary forked, after the stop
// and before the saving that waits for an idle CPU: a busy machine (the
// trial replay of a dump on both CPUs) left it under the target's name for
// tens of milliseconds.
func (s *session) nameNewShadow() {
	if sh := s.unnamed; sh != nil {
		s.unnamed = nil
		s.nameShadow(sh)
	}
}

// shadowClone is the call that makes a shadow: clone(CLONE_FILES) with exit
// signal 0 (low byte of the flags), its stack pointer badStack.
func shadowClone() proc.Call {
	return proc.Call{Nr: unix.SYS_CLONE, Args: []uint64{unix.CLONE_FILES, badStack, 0, 0, 0}, Clone: true}
}

// reapCall is the wait4 that reaps dead shadow pid in the target.
func reapCall(pid int) proc.Call {
	return proc.Call{Nr: unix.SYS_WAIT4, Args: []uint64{uint64(pid), 0, unix.WNOHANG | unix.WALL, 0}}
}

// cloneRefused is a shadow's clone that the kernel refused in the target:
// EAGAIN when the target's pids cgroup or RLIMIT_NPROC is at its limit,
// ENOMEM. The target itself is unharmed, and the next attempt may succeed.
type cloneRefused struct{ errno unix.Errno }

func (e cloneRefused) Error() string {
	why := ""
	if e.errno == unix.EAGAIN {
		why = " (the process's pids cgroup or RLIMIT_NPROC is at its limit?)"
	}
	return fmt.Sprintf("create shadow: the kernel refused the clone: %v%s", e.errno, why)
}

// closeRangeUnshare is CLOSE_RANGE_UNSHARE (include/uapi/linux/close_range.h).
const closeRangeUnshare = 1 << 1

// dropFiles closes every descriptor of a dump shadow. A shadow shares the
// target's file table (CLONE_FILES) and needs none of it; but a dump shadow
// outlives a crashed target by the seconds its checkpoint takes, and would
// keep the table alive all that time: a listening socket still bound, so the
// restarted server cannot bind its port; client connections never closed; the
// pipe a supervisor waits on never at end of file. close_range with
// CLOSE_RANGE_UNSHARE gives the shadow a private copy of the table and closes
// that, leaving the target's own as it was.
func (s *session) dropFiles(sh *shadow) {
	// The shadow has the target's seccomp filters.
	if err := s.seccompAllows(unix.SYS_CLOSE_RANGE, []uint64{0, uint64(^uint32(0)), closeRangeUnshare}, s.vdso.insn+2, injectionPurpose(unix.SYS_CLOSE_RANGE)); err != nil {
		s.logf("warning: %v; the crashed process's descriptors (sockets, pipes) stay open until the checkpoint is written", err)
		return
	}
	res, err := proc.Inject(sh.pid, s.vdso.insn, unix.SYS_CLOSE_RANGE, 0, uint64(^uint32(0)), closeRangeUnshare)
	if err == nil && res.Ret < 0 {
		err = unix.Errno(-res.Ret)
	}
	if err != nil {
		s.logf("warning: could not close the dump shadow's files (%v): the crashed process's descriptors (sockets, pipes) stay open until the checkpoint is written", err)
	}
}

// killShadow kills the current shadow and waits until the tracer has seen it
// die. It stays a zombie child of the target until reapZombie.
func (s *session) killShadow() {
	s.dropKept()
	sh := s.shadow
	if sh == nil {
		return
	}
	s.shadow = nil
	sh.pm.Close()
	unix.Kill(sh.pid, unix.SIGKILL)
	for {
		st, err := proc.Wait(sh.pid)
		if err != nil || st.Exited() {
			break
		}
	}
	s.zombie = sh.pid
}

// killStray kills, at a detach, every shadow still alive that nothing
// else killed: one a failed boundary lost track of. A process that unmapped
// its vDSO (valgrind does), where tprec's calls can no longer be made, kept
// a shadow stopped as its child while tprec waited for it to end.
func (s *session) killStray() {
	for pid, started := range s.madeShadows {
		if started == "" || startTime(pid) != started {
			continue // gone, or its id reused by another process
		}
		// Still the target's child, alive and traced by a thread of tprec.
		st, err := procStatus(pid)
		if err != nil || st["PPid"] != fmt.Sprint(s.pid) || strings.HasPrefix(st["State"], "Z") || strings.HasPrefix(st["State"], "X") {
			continue
		}
		if _, err := os.Stat("/proc/self/task/" + st["TracerPid"]); st["TracerPid"] == "0" || err != nil {
			continue
		}
		unix.Kill(pid, unix.SIGKILL)
		for {
			st, err := proc.Wait(pid)
			if err != nil || st.Exited() {
				break
			}
		}
		s.mu.Lock()
		s.deadShadows = append(s.deadShadows, pid)
		s.mu.Unlock()
	}
}

// startTime returns when process pid started (field 22 of its stat, in
// clock ticks since boot), "" if it is gone: with the id, it names one
// process whatever ids were reused since.
func startTime(pid int) string {
	f := procStat(pid) // from field 3 on
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// retireShadow kills the current shadow without waiting for it to die. A
// large shadow takes tens of milliseconds to unmap its memory (25 ms for
// 1 GB here), which the target would otherwise spend stopped; it dies while
// the target runs, and a later boundary collects it (reapZombie).
func (s *session) retireShadow() {
	s.dropKept()
	if sh := s.shadow; sh != nil {
		s.shadow = nil
		s.retire(sh)
	}
}

// dropKept retires a shadow a close kept for an open that did not come.
func (s *session) dropKept() {
	if sh := s.kept; sh != nil {
		s.kept = nil
		if sh != s.shadow {
			s.retire(sh)
		}
	}
}

// retire kills a shadow (the interval's, or a dump shadow from the
// background) without waiting; the tracer thread collects its exit and the
// target reaps it at a later boundary (reapZombie).
func (s *session) retire(sh *shadow) {
	sh.pm.Close()
	unix.Kill(sh.pid, unix.SIGKILL)
	s.mu.Lock()
	s.deadShadows = append(s.deadShadows, sh.pid)
	s.mu.Unlock()
}

// reapZombie makes the target collect its dead shadows with an injected
// wait4(pid, NULL, WNOHANG|__WALL): the shadow's parent is the target, and only
// the parent can remove the zombie. Shadows killed in the background (retired
// ones, dump shadows) are first collected as their tracer; with wait false,
// one still dying is left for the next call.
func (s *session) reapZombie(wait bool) {
	s.mu.Lock()
	dead := s.deadShadows
	s.deadShadows = nil
	s.mu.Unlock()
	var dying []int
	for _, pid := range dead {
		if !wait && !exitedNoHang(pid) {
			dying = append(dying, pid)
			continue
		}
		for wait {
			st, err := proc.Wait(pid)
			if err != nil || st.Exited() {
				break
			}
		}
		s.reap(pid)
	}
	if len(dying) > 0 {
		s.mu.Lock()
		s.deadShadows = append(s.deadShadows, dying...)
		s.mu.Unlock()
	}
	if s.zombie != 0 && s.reap(s.zombie) {
		s.zombie = 0
	}
}

// exitedNoHang collects, without blocking, the stops of a killed tracee and
// reports whether its exit was among them (or it is gone already).
func exitedNoHang(pid int) bool {
	for {
		st, ok, err := proc.WaitNoHang(pid)
		if err != nil {
			return true
		}
		if !ok {
			return false
		}
		if st.Exited() {
			return true
		}
	}
}

// reap injects wait4(pid, NULL, WNOHANG|__WALL) into the target.
func (s *session) reap(pid int) bool {
	if s.vdso == nil {
		return false
	}
	res, err := s.inject(reapCall(pid))
	if err == nil && res.Ret == int64(pid) {
		s.guard.reaped(pid)
		delete(s.madeShadows, pid)
		return true
	}
	return false
}

// inject has the target's thread s.ctl make a call through the vDSO's
// trampoline, which leaves the target whole whatever instant tprec dies at
// (proc.Trampoline).
func (s *session) inject(c proc.Call) (proc.Injection, error) {
	if err := s.seccompAllows(c.Nr, c.Args, s.vdso.insn+2, injectionPurpose(c.Nr)); err != nil {
		return proc.Injection{}, err
	}
	res, err := s.vdso.tramp.Inject(s.mem, s.ctl, c)
	if res.Stopped {
		// A SIGSTOP came meanwhile (job control): the process gets it
		// again, to stop as soon as tprec lets it run.
		unix.Kill(s.pid, unix.SIGSTOP)
	}
	if err != nil && errors.Is(err, unix.EIO) && !s.vdsoMapped() {
		err = fmt.Errorf("process %d unmapped its vDSO, where tprec's calls are made (valgrind does): it cannot be recorded further (%w)", s.pid, err)
	}
	return res, err
}

// vdsoMapped reports whether the target still maps its vDSO.
func (s *session) vdsoMapped() bool {
	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		return true // gone, or unreadable: not the vDSO's doing
	}
	for _, m := range maps {
		if m.Path == "[vdso]" {
			return true
		}
	}
	return false
}

// shadowPidsCgroup finds where a shadow of process pid must go so that it
// does not take a task slot of the target's: the cgroup.procs file of the
// root of its pids hierarchy, when the target's pids cgroup or one above it
// has a limit ("" otherwise). Inside the target's cgroup, a shadow made
// while a container was one task below its pids.max took the last slot,
// and the program's own next thread or fork failed (python3 raised "can't
// start new thread"). A shadow does not fork, so the root's lack of a limit
// costs nothing.
//
// In a cgroup v2 hierarchy the move takes the shadow out of the target's
// memory cgroup too, where the OOM killer must find it first (cloneShadow's
// oom_score_adj): the OOM killer of a cgroup chooses among its own tasks
// only, and would kill the target. There a target under a memory limit
// keeps its shadows: a task slot is the lesser harm. (cgroup v1 keeps pids
// and memory in separate hierarchies, and the move leaves the memory
// cgroup as it is.)
func shadowPidsCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	return shadowPidsCgroupIn(string(b), "/sys/fs/cgroup")
}

// shadowPidsCgroupIn is shadowPidsCgroup for a process whose
// /proc/PID/cgroup says cgroups, with the cgroup file systems under sysfs.
func shadowPidsCgroupIn(cgroups, sysfs string) string {
	root, rel, v2 := cgroupOf(cgroups, sysfs, "pids")
	if root == "" {
		return ""
	}
	limited := func(file string) bool {
		for dir := filepath.Join(root, rel); len(dir) > len(root); dir = filepath.Dir(dir) {
			if m, err := os.ReadFile(filepath.Join(dir, file)); err == nil && strings.TrimSpace(string(m)) != "max" {
				return true
			}
		}
		return false
	}
	if !limited("pids.max") || v2 && limited("memory.max") {
		return ""
	}
	return filepath.Join(root, "cgroup.procs")
}

// cgroupOf finds a process's cgroup of controller, given its
// /proc/PID/cgroup and where the cgroup file systems are: the root of the
// hierarchy that has the controller, the cgroup's path in it, and whether it
// is the unified (v2) one; root is "" when no hierarchy has it.
func cgroupOf(cgroups, sysfs, controller string) (root, rel string, v2 bool) {
	for _, l := range strings.Split(strings.TrimSpace(cgroups), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case slices.Contains(strings.Split(f[1], ","), controller):
			root, rel, v2 = filepath.Join(sysfs, controller), f[2], false
		case f[0] == "0" && f[1] == "" && root == "":
			for _, r := range []string{sysfs, filepath.Join(sysfs, "unified")} {
				if c, err := os.ReadFile(filepath.Join(r, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(c)), controller) {
					root, rel, v2 = r, f[2], true
					break
				}
			}
		}
	}
	return root, rel, v2
}

// unchargeShadow moves a new shadow out of the target's limited pids cgroup
// (shadowPidsCgroup), while the target is still stopped.
func (s *session) unchargeShadow(child int) {
	if s.shadowCgroup == "" {
		return
	}
	if err := os.WriteFile(s.shadowCgroup, []byte(strconv.Itoa(child)), 0); err != nil && !s.shadowCgroupFailed {
		s.shadowCgroupFailed = true
		s.logf("process %d: cannot move its shadow out of its pids cgroup (%v): the shadow takes one of its task slots", s.pid, err)
	}
}
