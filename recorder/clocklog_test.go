package recorder

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/tprec/tprec/bpf"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// The clock log installed in a C program at its start: every clock read
// of its two threads is an entry, in each thread's order, with the value
// the program got and the thread's fs base; a clock the vDSO does not
// read itself (an invalid one here), a gettimeofday with a timezone and
// the reads of a forked child are not entries.
//
// With more reads than the ring holds and nobody reading it, the stubs
// fall back to the syscall once it is nearly full: each thread's entries
// are the first of its reads, the rest is as the vDSO patch makes it.
func TestClockLogEntries(t *testing.T) {
	requireKernel(t)
	for _, n := range []int{1500, 20000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { clockLogEntries(t, n) })
	}
}

func clockLogEntries(t *testing.T, n int) {
	var out bytes.Buffer
	cmd, l := startWithClockLog(t, &out, nil, buildFixture(t, "clockloop"), strconv.Itoa(n))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program failed with the clock log: %v", err)
	}

	// What each thread got, in order: "nr ret value".
	want := map[uint64][]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		fs, _ := strconv.ParseUint(f[1], 16, 64)
		switch f[0] {
		case "C":
			want[fs] = append(want[fs], fmt.Sprintf("%d %s %s %s %s", unix.SYS_CLOCK_GETTIME, f[2], f[3], f[4], f[5]))
		case "G":
			want[fs] = append(want[fs], fmt.Sprintf("%d x %s %s %s", unix.SYS_GETTIMEOFDAY, f[2], f[3], f[4]))
		case "E":
			if f[2] != "-1" {
				t.Errorf("clock_gettime of an invalid clock returned %s", f[2])
			}
		}
	}
	if len(want) != 2 {
		t.Fatalf("output of %d threads, want 2:\n%.500s", len(want), out.String())
	}
	got := map[uint64][]string{}
	total := l.counter()
	for i := range total {
		e, ok := l.entry(i)
		if !ok {
			t.Fatalf("entry %d of %d has no stamp", i, total)
		}
		le := binary.LittleEndian
		a, b := int64(le.Uint64(e.out[:])), int64(le.Uint64(e.out[8:]))
		var s string
		switch {
		case e.ret != 0:
			s = fmt.Sprintf("%d error %d", e.nr, e.ret)
			if e.outAddr != 0 {
				t.Errorf("entry %d: an error with output at %#x", i, e.outAddr)
			}
		case e.nr == unix.SYS_CLOCK_GETTIME:
			s = fmt.Sprintf("%d %d 0 %d %d", e.nr, e.arg0, a, b)
		default:
			s = fmt.Sprintf("%d x 0 %d %d", e.nr, a, b)
		}
		got[e.fs] = append(got[e.fs], s)
	}
	for fs, w := range want {
		g := got[fs]
		if len(g) != len(w) && (len(g) > len(w) || total < clkEntries-clkSlack) {
			t.Errorf("thread %#x: %d entries, want %d", fs, len(g), len(w))
		}
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("thread %#x, call %d: entry %q, the program got %q", fs, i, g[i], w[i])
			}
		}
	}
	if limit := uint64(clkEntries - clkSlack); total >= limit {
		// Each thread may have passed the check for room once more.
		if total > limit+2 {
			t.Errorf("%d entries, more than the %d the ring takes before the stubs fall back", total, limit)
		}
	} else if want := uint64(2 * 2 * n); total != want {
		t.Errorf("%d entries, want %d (the child's reads, the invalid clock and the timezone call are not logged)", total, want)
	}
}

// startWithClockLog starts prog with args stopped at its exec, patches its
// vDSO, installs the clock log, runs before (if not nil) with the process
// still stopped, and lets it run. The view stays mapped until the test
// ends.
func startWithClockLog(t *testing.T, stdout *bytes.Buffer, before func(pid int, l *clockLog) error, prog string, args ...string) (*exec.Cmd, *clockLog) {
	return startPatched(t, true, stdout, before, prog, args...)
}

// startPatched is startWithClockLog, or with the vDSO patch alone when
// install is false (the clock log then nil).
func startPatched(t *testing.T, install bool, stdout *bytes.Buffer, before func(pid int, l *clockLog) error, prog string, args ...string) (*exec.Cmd, *clockLog) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	var l *clockLog
	tracer := proc.NewTracer()
	defer tracer.Close()
	err := tracer.Do(func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		pid := cmd.Process.Pid
		if _, err := proc.Wait(pid); err != nil { // the exec stop
			return err
		}
		mem, err := proc.OpenMem(pid)
		if err != nil {
			return err
		}
		defer mem.Close()
		maps, err := proc.ReadMaps(pid)
		if err != nil {
			return err
		}
		lo, hi, _, err := targetVDSO(pid)
		if err != nil {
			return err
		}
		p, err := patchVDSO(mem, maps, nil)
		if err != nil || p == nil {
			return fmt.Errorf("patch the vDSO: %v", err)
		}
		if !install {
			return proc.Detach(pid, 0)
		}
		fns := p.clockFuncs()
		if len(fns) != 2 {
			return fmt.Errorf("%d functions to log in the vDSO, want clock_gettime and gettimeofday", len(fns))
		}
		inject := func(nr int, args ...uint64) (int64, error) {
			res, err := proc.Inject(pid, p.insn, nr, args...)
			return res.Ret, err
		}
		if l, err = installClockLog(pid, mem, inject, lo, hi, lo+9, fns); err != nil {
			return err
		}
		if len(l.sites) != 2 {
			return fmt.Errorf("%d entries pointed at stubs, want 2", len(l.sites))
		}
		if before != nil {
			if err := before(pid, l); err != nil {
				return err
			}
		}
		return proc.Detach(pid, 0)
	})
	if err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		t.Fatal(err)
	}
	if l != nil {
		t.Cleanup(func() { unix.Munmap(l.view) })
	}
	return cmd, l
}

// The syscall program reads the clock log's counter at every call: merged
// by it, each thread's clock reads and calls of the order fixture
// alternate as the program made them, a call comes after the read whose
// value it passes on (another thread's, often), and the fs base the
// program reads for an entry is the one the syscall program sees for that
// thread.
func TestClockLogOrder(t *testing.T) {
	requireKernel(t)
	const n = 1500
	type call struct {
		tid        int
		nr         int
		arg, clock uint64
	}
	bySeq := map[uint64]call{} // two threads' records can come out of order
	fsTid := map[uint64]int{}
	var bad error
	testHookSyscall = func(h *bpf.TprecTpSyscall) {
		switch {
		case bad != nil:
		case h.Clock == clockNone || h.Clock == clockUnread:
			bad = fmt.Errorf("call %d (%d) read no counter: %#x", h.Seq, h.Nr, h.Clock)
		default:
			bySeq[h.Seq] = call{int(h.Tid), int(h.Nr), h.Args[0], h.Clock}
			fsTid[h.Fs] = int(h.Tid)
		}
	}
	defer func() { testHookSyscall = nil }()
	var e *ebpfSource
	cmd, l := startWithClockLog(t, nil, func(pid int, l *clockLog) error {
		var err error
		if e, err = newEBPFSource(pid, 64<<20, t.Logf); err != nil {
			return err
		}
		var p bpf.TprecTpProc
		if err := e.objs.Traced.Lookup(uint32(pid), &p); err != nil {
			return err
		}
		p.Clock = l.base + clkCounter
		return e.objs.Traced.Update(uint32(pid), p, ebpf.UpdateExist)
	}, buildFixture(t, "clockorder"), strconv.Itoa(n))
	defer e.close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program failed with the clock log: %v", err)
	}
	if err := e.drain(); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if bad != nil {
		t.Fatal(bad)
	}
	calls := make([]call, len(bySeq))
	for seq, c := range bySeq {
		if seq < 1 || seq > uint64(len(calls)) {
			t.Fatalf("call %d of %d", seq, len(calls))
		}
		calls[seq-1] = c
	}
	clocks := make([]uint64, len(calls))
	for i, c := range calls {
		clocks[i] = c.clock
	}
	eff := effectiveClocks(clocks)
	// The merged order: "C<tid>:<value>" for a read, the call otherwise.
	type ev struct {
		read  bool
		tid   int
		value uint64
		call  call
	}
	var merged []ev
	total, next := l.counter(), uint64(0)
	entry := func() {
		en, ok := l.entry(next)
		if !ok {
			t.Fatalf("entry %d has no stamp", next)
		}
		tid, ok := fsTid[en.fs]
		if !ok {
			t.Fatalf("entry %d: fs base %#x of no thread the syscall program saw", next, en.fs)
		}
		v := binary.LittleEndian.Uint64(en.out[:])*1e9 + binary.LittleEndian.Uint64(en.out[8:])
		merged = append(merged, ev{read: true, tid: tid, value: v})
		next++
	}
	for i, c := range calls {
		for next < total && next < eff[i] {
			entry()
		}
		merged = append(merged, ev{tid: c.tid, call: c})
	}
	for next < total {
		entry()
	}
	if total != 4*n {
		t.Fatalf("%d entries, want %d", total, 4*n)
	}
	readAt := map[uint64]int{}
	for i, m := range merged {
		if m.read {
			readAt[m.value] = i
		}
	}
	lastRead := map[int]bool{}
	checked := 0
	for i, m := range merged {
		if m.read {
			if lastRead[m.tid] {
				t.Fatalf("thread %d: two reads with no call between them (event %d)", m.tid, i)
			}
			lastRead[m.tid] = true
			continue
		}
		if m.call.nr != unix.SYS_GETPPID {
			continue
		}
		if !lastRead[m.tid] {
			t.Fatalf("thread %d: a call with no read before it (event %d)", m.tid, i)
		}
		lastRead[m.tid] = false
		if at, ok := readAt[m.call.arg]; ok {
			checked++
			if at > i {
				t.Fatalf("thread %d's call (event %d) passes on the value of a read placed after it (event %d)", m.tid, i, at)
			}
		}
	}
	if checked < n {
		t.Fatalf("only %d calls passed on a value a read logged", checked)
	}
	t.Logf("%d calls, %d reads, %d threads; %d calls after the read whose value they passed on", len(calls), total, len(fsTid), checked)
}

// A clock read through the clock log leaves the registers, the flags and
// the stack below the caller as the vDSO patch's stub does, which is what
// a replay runs: the fixture checks every register after each call, on
// the logged path and on the fallback one (a clock the vDSO does not read
// itself). The same fixture under the vDSO patch alone says what it
// checks holds there.
func TestClockLogLeavesWhatASyscallLeaves(t *testing.T) {
	requireKernel(t)
	prog := buildFixture(t, "clockregs")
	for _, install := range []bool{false, true} {
		var out bytes.Buffer
		cmd, _ := startPatched(t, install, &out, nil, prog)
		if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "ok") {
			t.Errorf("clock log %v: %v\n%s", install, err, out.String())
		}
	}
}
