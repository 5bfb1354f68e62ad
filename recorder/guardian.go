package recorder

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// The guardian is a small process tprec starts next to a recording, in a
// session of its own, that undoes what a tprec killed with SIGKILL (or
// crashed) would leave in the target: the patched vDSO, which keeps every
// clock read a syscall for the rest of the process's life, and the dead
// shadows, zombie children of the target until it exits. tprec tells it,
// one line each over a pipe, the shadows it makes ("shadow PID") and those
// the target has collected ("reaped PID"), and "done" when it leaves the
// target as it found it. End of file without "done" means tprec is gone
// (the kernel closes the pipe whatever way tprec ends): the guardian waits
// for the kernel to release the target from tprec's trace, then stops it,
// runs every thread out of the vDSO, writes the vDSO's original bytes back
// (its own vDSO's: the kernel maps the same image into every process) and
// has the target collect its dead shadows, and lets it go.
type guardian struct {
	args []string
	pid  int
	logf func(string, ...any)

	mu  sync.Mutex
	w   *os.File  // the pipe to the running guardian; nil once finished
	cmd *exec.Cmd // the running guardian
	// shadows: the shadows noted and not reaped, told again to a guardian
	// started after one ended.
	shadows map[int]bool
	// ended is closed when the running guardian's process has ended;
	// finishing says tprec ended it (finish), any other end is reported
	// and a new guardian started (restarts counts them).
	ended     chan struct{}
	finishing bool
	restarts  int
}

// maxGuardianRestarts bounds the guardians started after one ended: one
// that cannot stay up (killed again and again) is not worth a loop.
const maxGuardianRestarts = 5

// startGuardian starts the guardian of process pid with the command line
// args (the tprec binary's hidden "guardian" command). It is best effort:
// without it, recording goes on as before.
func startGuardian(args []string, pid int, logf func(string, ...any)) *guardian {
	if len(args) == 0 {
		return nil
	}
	g := &guardian{args: args, pid: pid, logf: logf, shadows: map[int]bool{}}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.spawn(); err != nil {
		logf("no guardian for process %d: %v", pid, err)
		return nil
	}
	return g
}

// spawn starts a guardian process, tells it the shadows alive, and watches
// for its end. g.mu is held.
func (g *guardian) spawn() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(g.args[0], append(g.args[1:], "--pid", strconv.Itoa(g.pid), "--tprec", strconv.Itoa(os.Getpid()))...)
	cmd.Args[0] = "tprec-guardian" // what ps shows
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	// A session of its own: a Ctrl-C or a signal to tprec's process group
	// does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	g.w, g.cmd = w, cmd
	for p := range g.shadows {
		fmt.Fprintf(w, "shadow %d\n", p)
	}
	ended := make(chan struct{})
	g.ended = ended
	go func() {
		err := cmd.Wait()
		close(ended)
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.finishing {
			return
		}
		// Killed by someone (pkill -SEGV matching its name, say):
		// another one takes over, told the shadows alive.
		w.Close()
		g.w = nil
		if g.restarts < maxGuardianRestarts {
			g.restarts++
			serr := g.spawn()
			if serr == nil {
				g.logf("tprec's guardian (process %d) ended (%v): started another one (process %d)", cmd.Process.Pid, err, g.cmd.Process.Pid)
				return
			}
			err = fmt.Errorf("%v; no other one started: %v", err, serr)
		}
		g.logf("tprec's guardian (process %d) ended (%v): if tprec is killed from now on, nothing puts process %d's vDSO back or collects its dead shadows", cmd.Process.Pid, err, g.pid)
	}()
	return nil
}

// made tells the guardian of a shadow tprec made.
func (g *guardian) made(shadow int) { g.note(shadow, true) }

// reaped tells the guardian that the target collected a shadow.
func (g *guardian) reaped(shadow int) { g.note(shadow, false) }

func (g *guardian) note(shadow int, alive bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	word := "reaped"
	if alive {
		g.shadows[shadow] = true
		word = "shadow"
	} else {
		delete(g.shadows, shadow)
	}
	if g.w != nil {
		fmt.Fprintf(g.w, "%s %d\n", word, shadow)
	}
}

// finish tells the guardian whether tprec leaves the target as it found it
// (clean), closes the pipe and collects the guardian. Not clean, the
// guardian looks for itself.
func (g *guardian) finish(clean bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.w == nil {
		g.mu.Unlock()
		return
	}
	g.finishing = true
	if clean {
		fmt.Fprintf(g.w, "done\n")
	}
	g.w.Close()
	g.w = nil
	ended := g.ended
	g.mu.Unlock()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
	}
}

// guardTimeout bounds the guardian's wait for tprec's trace to go away.
const guardTimeout = 60 * time.Second

// Guard is the guardian's body: it follows tprec's notes on in until the
// end of file, then repairs process pid if tprec (process tprecPid) left it
// patched or with dead shadows. It writes what it did to log.
func Guard(pid, tprecPid int, in io.Reader, log io.Writer) error {
	runtime.LockOSThread() // ptrace requests come from one thread
	shadows := map[int]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "done":
			return nil
		case "shadow", "reaped":
			if len(f) == 2 {
				if n, err := strconv.Atoi(f[1]); err == nil {
					shadows[n] = f[0] == "shadow"
				}
			}
		}
	}
	var dead []int
	for p, live := range shadows {
		if live {
			dead = append(dead, p)
		}
	}
	return repair(pid, tprecPid, dead, log)
}

// repair undoes the vDSO patch of process pid and has it collect the given
// shadows, once no thread of tprecPid traces it.
func repair(pid, tprecPid int, shadows []int, log io.Writer) error {
	say := func(f string, args ...any) { fmt.Fprintf(log, "tprec guardian: "+f+"\n", args...) }
	deadline := time.Now().Add(guardTimeout)
	for {
		tr, err := tracerPid(pid)
		if err != nil {
			return nil // the process is gone: nothing to repair
		}
		if tr == 0 {
			break
		}
		// The tracer is a thread: of tprec, or (with tprec gone, once
		// the kernel has let go) of a debugger attached since. A tracer
		// thread already gone from /proc is tprec's, on its way out.
		if st, err := procStatus(tr); err == nil && st["Tgid"] != strconv.Itoa(tprecPid) {
			say("process %d is traced by process %s, not by tprec: left as it is", pid, st["Tgid"])
			return nil
		}
		if time.Now().After(deadline) {
			say("tprec still traces process %d after %v: left as it is", pid, guardTimeout)
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	orig, err := ownVDSO()
	if err != nil {
		return err
	}
	lo, hi, cur, err := targetVDSO(pid)
	if err != nil {
		return nil // gone, or no vDSO: nothing to restore
	}
	patched := len(cur) == len(orig) && !bytes.Equal(cur, orig)
	zombies := waitZombies(pid, append(shadows, unlistedShadows(pid)...))
	if !patched && len(zombies) == 0 {
		return nil
	}
	h, err := holdAll(pid)
	defer func() { h.release() }()
	if err != nil {
		say("cannot stop process %d to repair it: %v", pid, err)
		return nil
	}
	// A signal handler entered while its thread was in a stub (a ptrace
	// backend's clock read stops at the stub's syscall exit: a tprec killed
	// there lets the kernel deliver a pending signal at once) returns into
	// the patched code: restored under it, it runs the middle of an
	// original function (a SIGBUS, seen). The handler is waited for;
	// one that does not end in time keeps the patch, whose stubs are
	// correct syscalls.
	risky := returnsUnsafe(cur, orig)
	var waited int
	for try := 1; patched; try++ {
		tid, at, err := h.returnInto(lo, risky)
		if err != nil {
			say("process %d: the vDSO stays patched (its clock reads stay syscalls): its stacks cannot be read: %v", pid, err)
			patched = false
			break
		}
		if tid == 0 {
			break
		}
		if try == returnTries {
			say("process %d: the vDSO stays patched (its clock reads stay syscalls): after %v thread %d's stack still holds a return into the patched code (%#x), a signal handler's most likely", pid, returnTries*returnWait, tid, at)
			patched = false
			break
		}
		h.release()
		time.Sleep(returnWait)
		waited++
		if h, err = holdAll(pid); err != nil {
			say("cannot stop process %d to repair it: %v", pid, err)
			return nil
		}
	}
	var did []string
	if patched {
		if n, err := h.restoreVDSO(lo, hi, orig); err != nil {
			say("process %d: the vDSO stays patched: %v", pid, err)
		} else {
			d := fmt.Sprintf("restored its vDSO (%d bytes)", n)
			if waited > 0 {
				d += fmt.Sprintf(" once a signal handler had returned out of the patched code (%v later)", time.Duration(waited)*returnWait)
			}
			did = append(did, d)
		}
	}
	if len(zombies) > 0 {
		if n, err := h.collect(lo, orig, zombies); err != nil {
			say("process %d: %d dead shadow(s) stay its zombie children: %v", pid, len(zombies)-n, err)
		} else {
			did = append(did, fmt.Sprintf("collected %d dead shadow(s)", n))
		}
	}
	if len(did) > 0 {
		say("tprec ended without detaching from process %d: %s", pid, strings.Join(did, ", "))
	}
	return nil
}

func tracerPid(pid int) (int, error) {
	st, err := procStatus(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(st["TracerPid"])
}

func seccompFiltered(pid int) bool {
	st, err := procStatus(pid)
	return err != nil || st["Seccomp"] != "0"
}

// ownVDSO reads this process's vDSO: the image every process of this
// kernel maps, as the kernel made it.
func ownVDSO() ([]byte, error) {
	_, _, b, err := targetVDSO(os.Getpid())
	return b, err
}

func targetVDSO(pid int) (lo, hi uint64, img []byte, err error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return 0, 0, nil, err
	}
	for _, m := range maps {
		if m.Path == "[vdso]" {
			lo, hi = m.Start, m.End
		}
	}
	if lo == 0 {
		return 0, 0, nil, fmt.Errorf("process %d has no [vdso]", pid)
	}
	img = make([]byte, hi-lo)
	if _, err := proc.ReadBytes(pid, lo, img); err != nil {
		return 0, 0, nil, err
	}
	return lo, hi, img, nil
}

// waitZombies returns the shadows that are (or become, within a second:
// PTRACE_O_EXITKILL has killed them) zombie children of pid.
func waitZombies(pid int, shadows []int) []int {
	var out []int
	seen := map[int]bool{}
	deadline := time.Now().Add(time.Second)
	for _, s := range shadows {
		if seen[s] {
			continue
		}
		seen[s] = true
		for {
			st, ppid := statOf(s)
			if st == "Z" && ppid == pid {
				out = append(out, s)
				break
			}
			if st == "" || ppid != pid || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return out
}

// unlistedShadows finds the shadows tprec made but had not noted yet when
// it died (it was killed in the middle of the clone): children of pid that
// are dead or dying, with exit signal 0 as tprec's clone gives them (a
// program's own children have SIGCHLD), started since this guardian was.
func unlistedShadows(pid int) []int {
	self := procStat(os.Getpid())
	tids, _ := proc.Tids(pid)
	var out []int
	for _, tid := range tids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, tid))
		for _, c := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(c)
			f := procStat(n)
			if len(f) > 35 && len(self) > 19 && f[35] == "0" && atoi(f[19]) >= atoi(self[19]) {
				out = append(out, n)
			}
		}
	}
	return out
}

// procStat returns the fields of /proc/PID/stat after the command name
// (the state is the first).
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// statOf returns the state letter and the parent of a process ("" when
// there is none).
func statOf(pid int) (string, int) {
	f := procStat(pid)
	if len(f) < 2 {
		return "", 0
	}
	return f[0], atoi(f[1])
}

// holding is the set of threads of a process the guardian has stopped.
type holding struct {
	pid     int
	threads map[int]bool // tid → in a group stop (stays stopped, not run)
	// held: by thread, the signals that came while it was run out of the
	// vDSO, given back when it is let go.
	held map[int][]proc.HeldSignal
}

// How long the guardian waits for the handlers that would return into the
// patched vDSO (repair): returnTries holds of the process, returnWait apart.
const (
	returnTries = 40
	returnWait  = 50 * time.Millisecond
	// returnScan bounds the bytes of a stack read above its rsp.
	returnScan = 8 << 20
)

// returnsUnsafe tells, for each offset of the vDSO, whether a thread that
// returns there (a saved rip, a return address) once orig is back in place
// of cur would run something else than it was running: a differing byte
// lies in the 16 before it, or it differs and starts no function (a
// thread may always enter a function at its first byte, which the stubs
// and the original agree on: the same arguments, nothing done yet).
func returnsUnsafe(cur, orig []byte) []bool {
	entries := map[int]bool{}
	syms, _ := vdsoSymbols(orig) // none: every differing byte is unsafe
	for _, s := range syms {
		entries[int(s.Off)] = true
	}
	bad := make([]bool, len(orig))
	last := -1 << 30 // the last differing offset
	for k := range orig {
		if k-last <= 16 {
			bad[k] = true
		}
		if cur[k] != orig[k] {
			bad[k] = bad[k] || !entries[k]
			last = k
		}
	}
	return bad
}

// returnInto looks through the live part of every held thread's stack,
// from its rsp up (within the mapping, returnScan bytes at most), for a
// word that is an address of the vDSO at lo where risky says a return is
// unsafe. It gives the first thread found and the word, or tid 0. A word
// that only looks like one (a stale local) costs a wait, never a crash.
func (h *holding) returnInto(lo uint64, risky []bool) (tid int, at uint64, err error) {
	maps, err := proc.ReadMaps(h.pid)
	if err != nil {
		return 0, 0, err
	}
	mem, err := proc.OpenMem(h.pid)
	if err != nil {
		return 0, 0, err
	}
	defer mem.Close()
	hi := lo + uint64(len(risky))
	for t := range h.threads {
		r, err := proc.GetRegs(t)
		if err != nil {
			continue // gone
		}
		sp := r.Rsp &^ 7
		i := slices.IndexFunc(maps, func(m format.Mapping) bool { return sp >= m.Start && sp < m.End })
		if i < 0 {
			continue // no stack to return through
		}
		buf := make([]byte, min(maps[i].End-sp, returnScan))
		if err := mem.ReadAt(buf, sp); err != nil {
			return 0, 0, fmt.Errorf("thread %d's stack at %#x: %w", t, sp, err)
		}
		for o := 0; o+8 <= len(buf); o += 8 {
			w := binary.LittleEndian.Uint64(buf[o:])
			if w >= lo && w < hi && risky[w-lo] {
				return t, w, nil
			}
		}
	}
	return 0, 0, nil
}

// holdAll seizes and stops every thread of pid, the threads it creates
// meanwhile too.
func holdAll(pid int) (*holding, error) {
	h := &holding{pid: pid, threads: map[int]bool{}}
	for round := 0; round < 100; round++ {
		tids, err := proc.Tids(pid)
		if err != nil {
			return h, err
		}
		var fresh []int
		for _, tid := range tids {
			if _, ok := h.threads[tid]; ok {
				continue
			}
			if err := proc.Seize(tid, 0); err != nil {
				continue // exited meanwhile
			}
			if err := proc.Interrupt(tid); err != nil {
				continue
			}
			fresh = append(fresh, tid)
		}
		if len(fresh) == 0 {
			if len(h.threads) == 0 {
				return h, fmt.Errorf("no thread of process %d could be stopped", pid)
			}
			return h, nil
		}
		for _, tid := range fresh {
			if stopped, group := waitInterrupt(tid); stopped {
				h.threads[tid] = group
			}
		}
	}
	return h, fmt.Errorf("process %d keeps making threads", pid)
}

// waitInterrupt waits for the stop a PTRACE_INTERRUPT asked of tid,
// delivering a signal that comes first. It reports whether the thread is
// stopped, and whether in a group stop.
func waitInterrupt(tid int) (stopped, group bool) {
	for {
		st, err := proc.Wait(tid)
		if err != nil || st.Exited() {
			return false, false
		}
		if st.Event() == unix.PTRACE_EVENT_STOP {
			sig := st.Status.StopSignal()
			return true, sig == unix.SIGSTOP || sig == unix.SIGTSTP || sig == unix.SIGTTIN || sig == unix.SIGTTOU
		}
		if st.Event() != 0 {
			proc.Resume(unix.PTRACE_CONT, tid, 0)
			continue
		}
		// A signal on its way: delivered as without a tracer, the
		// interrupt's stop comes after it.
		proc.Resume(unix.PTRACE_CONT, tid, int(st.Status.StopSignal()))
	}
}

// holdSignal has proc.RunOut hold back a signal that comes while a thread
// is run out of the vDSO (delivered there, its handler would return into
// the original code about to be written back, in the middle of an
// instruction: a python3 died of SIGSEGV so); an event ends the run.
func holdSignal(st proc.Stop) (proc.RunOn, error) {
	if st.Signal() != 0 {
		return proc.RunOn{Hold: true}, nil
	}
	return proc.RunOn{Stay: true}, nil
}

// restoreVDSO runs every running thread out of [lo, hi) (proc.RunOut) and writes orig
// there where it differs. It refuses when a thread stays inside (a thread
// in a group stop there would resume in the middle of an original
// function).
func (h *holding) restoreVDSO(lo, hi uint64, orig []byte) (int, error) {
	for tid, group := range h.threads {
		r, err := proc.GetRegs(tid)
		if err != nil || r.Rip < lo || r.Rip >= hi {
			continue
		}
		if group {
			return 0, fmt.Errorf("thread %d is stopped by job control inside it", tid)
		}
		inside := func(rip uint64) bool { return rip >= lo && rip < hi }
		out, held, err := proc.RunOut(tid, inside, runOutTries, vdsoStepMax, holdSignal)
		if len(held) > 0 {
			if h.held == nil {
				h.held = map[int][]proc.HeldSignal{}
			}
			h.held[tid] = held
		}
		if err != nil || !out {
			return 0, fmt.Errorf("thread %d does not leave it (%v)", tid, err)
		}
	}
	mem, err := proc.OpenMem(h.pid)
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	cur := make([]byte, len(orig))
	if err := mem.ReadAt(cur, lo); err != nil {
		return 0, err
	}
	n := 0
	for i := 0; i < len(orig); {
		if cur[i] == orig[i] {
			i++
			continue
		}
		j := i
		for j < len(orig) && cur[j] != orig[j] {
			j++
		}
		if err := mem.WriteAt(orig[i:j], lo+uint64(i)); err != nil {
			return n, err
		}
		n += j - i
		i = j
	}
	return n, nil
}

// collect has the process reap its dead shadows: wait4(shadow, NULL,
// WNOHANG|__WALL) made by a stopped thread through a syscall instruction of
// the (restored) vDSO at lo. Not under a seccomp filter, which might kill
// the process for that call. It returns how many were collected.
func (h *holding) collect(lo uint64, orig []byte, zombies []int) (int, error) {
	if seccompFiltered(h.pid) {
		return 0, fmt.Errorf("the process runs under a seccomp filter")
	}
	off := bytes.Index(orig, []byte{0x0f, 0x05})
	if off < 0 {
		return 0, fmt.Errorf("no syscall instruction in the vDSO")
	}
	tid := -1
	for t, group := range h.threads {
		if !group {
			tid = t
			break
		}
	}
	if tid < 0 {
		return 0, fmt.Errorf("every thread is stopped by job control")
	}
	mask, err := proc.GetSigmask(tid)
	if err != nil {
		return 0, err
	}
	if err := proc.SetSigmask(tid, ^uint64(0)); err != nil {
		return 0, err
	}
	defer proc.SetSigmask(tid, mask)
	n := 0
	for _, z := range zombies {
		res, err := proc.Inject(tid, lo+uint64(off), unix.SYS_WAIT4, uint64(z), 0, unix.WNOHANG|unix.WALL, 0)
		if err != nil {
			return n, err
		}
		if res.Ret == int64(z) {
			n++
		}
	}
	return n, nil
}

// release lets every held thread go (one in a group stop stays stopped, as
// without a tracer).
func (h *holding) release() {
	if h == nil {
		return
	}
	for tid := range h.threads {
		proc.DetachGiving(h.pid, tid, h.held[tid])
	}
}
