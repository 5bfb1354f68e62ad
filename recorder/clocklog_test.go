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
	"github.com/tprec/tprec/format"
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
	return startPatched(t, true, stdout, nil, before, prog, args...)
}

// clockSetup runs on the stopped process before the clock log goes in.
type clockSetup func(pid int, mem *proc.Mem, inject func(nr int, args ...uint64) (int64, error), lo, hi uint64) error

// startPatched is startWithClockLog, or with the vDSO patch alone when
// install is false (the clock log then nil).
func startPatched(t *testing.T, install bool, stdout *bytes.Buffer, setup clockSetup, before func(pid int, l *clockLog) error, prog string, args ...string) (*exec.Cmd, *clockLog) {
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
		if setup != nil {
			if err := setup(pid, mem, inject, lo, hi); err != nil {
				return err
			}
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
		cmd, _ := startPatched(t, install, &out, nil, nil, prog)
		if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "ok") {
			t.Errorf("clock log %v: %v\n%s", install, err, out.String())
		}
	}
}

// fakeClockLog is a clock log whose region is a buffer here: put writes an
// entry as a stub does.
func fakeClockLog() *clockLog {
	l := &clockLog{view: make([]byte, clkSize), lo: 0x7000, hi: 0x9000,
		sites:     []clockSite{{entry: 0x7af0, nr: unix.SYS_CLOCK_GETTIME}, {entry: 0x7810, nr: unix.SYS_GETTIMEOFDAY}},
		fallbacks: map[uint64]uint64{0x100000 + 0x40: 0x7af0 + 7}}
	return l
}

func (l *clockLog) put(i, fs uint64, nr int, ns uint64, done bool) {
	le := binary.LittleEndian
	off := clkRing + int(i%clkEntries)*clkEntrySize
	le.PutUint64(l.view[off+ceFS:], fs)
	le.PutUint32(l.view[off+ceNr:], uint32(nr))
	le.PutUint64(l.view[off+ceRet:], 0)
	le.PutUint64(l.view[off+ceArg0:], 1)
	le.PutUint64(l.view[off+ceOutAddr:], 0x5000)
	le.PutUint64(l.view[off+ceOut:], ns)
	le.PutUint64(l.view[off+ceStamp:], i+1)
	if done {
		le.PutUint32(l.view[off+ceDone:], 1)
	}
	le.PutUint64(l.view[clkCounter:], max(le.Uint64(l.view[clkCounter:]), i+1))
}

// The open log merges the clock log's entries by the counter each call
// read: an entry goes before the first call that read more than its index
// (the largest counter so far, when one call read less than the one
// before it), numbered in that order; a call waits for an entry not done
// yet; the closing boundary takes the entries up to the counter; a
// stub's fallback syscall gets the rip of the vDSO patch's stub, and a
// logged function's own syscall inside the vDSO is dropped.
func TestOpenLogMergesClockReads(t *testing.T) {
	cl := fakeClockLog()
	cm := &clockMerge{l: cl, fsTid: map[uint64]int{}}
	cm.thread(0xa000, 10)
	cm.thread(0xb000, 11)
	l := &openLog{firstQ: 50, nextQ: 50, delta: 50 - 7, cm: cm}
	get := func(tid int) format.Syscall { return format.Syscall{Nr: unix.SYS_GETPID, Tid: tid} }
	cl.put(0, 0xa000, unix.SYS_CLOCK_GETTIME, 111, true)
	cl.put(1, 0xb000, unix.SYS_GETTIMEOFDAY, 222, true)
	l.add(50, new(get(10)), "", 1, 0xa000) // after entry 0
	l.add(51, new(get(11)), "", 0, 0xb000) // read the counter late: placed at 1, after entry 0
	l.add(52, new(get(11)), "", 2, 0xb000) // after entry 1
	cl.put(2, 0xa000, unix.SYS_CLOCK_GETTIME, 333, false)
	l.add(53, new(get(10)), "", 3, 0xa000) // waits: entry 2 is not done
	if n := l.calls.len(); n != 5 {
		t.Fatalf("%d records before entry 2 is done, want 5", n)
	}
	cl.put(2, 0xa000, unix.SYS_CLOCK_GETTIME, 333, true)
	// A fallback syscall of a stub, and a syscall of the vDSO's own code.
	l.add(54, &format.Syscall{Nr: unix.SYS_CLOCK_GETTIME, Tid: 10, Rip: 0x100000 + 0x40}, "", 3, 0xa000)
	l.add(55, &format.Syscall{Nr: unix.SYS_CLOCK_GETTIME, Tid: 10, Rip: 0x7b40}, "", 3, 0xa000)
	cl.put(3, 0xa000, unix.SYS_GETTIMEOFDAY, 444, true)
	l.closeGaps()
	want := []struct {
		nr, tid int
		rip     uint64
	}{
		{unix.SYS_CLOCK_GETTIME, 10, 0x7af7}, {unix.SYS_GETPID, 10, 0}, {unix.SYS_GETPID, 11, 0},
		{unix.SYS_GETTIMEOFDAY, 11, 0x7817}, {unix.SYS_GETPID, 11, 0},
		{unix.SYS_CLOCK_GETTIME, 10, 0x7af7}, {unix.SYS_GETPID, 10, 0},
		{unix.SYS_CLOCK_GETTIME, 10, 0x7af7}, // the fallback
		{unix.SYS_GETTIMEOFDAY, 10, 0x7817},  // at the close
	}
	if l.calls.len() != len(want) || l.reason != "" {
		t.Fatalf("%d records, want %d; reason %q", l.calls.len(), len(want), l.reason)
	}
	for i, w := range want {
		r := l.calls.at(i)
		if r.Seq != uint64(7+i) || r.Nr != w.nr || r.Tid != w.tid || r.Rip != w.rip {
			t.Errorf("record %d: seq %d nr %d tid %d rip %#x; want seq %d nr %d tid %d rip %#x", i, r.Seq, r.Nr, r.Tid, r.Rip, 7+i, w.nr, w.tid, w.rip)
		}
		if r.Nr == unix.SYS_CLOCK_GETTIME && r.Rip == 0x7af7 && i != 7 && (len(r.Out) != 1 || r.Out[0].Addr != 0x5000) {
			t.Errorf("record %d: outputs %+v", i, r.Out)
		}
	}
	if got := binary.LittleEndian.Uint64(cl.view[clkConsumed:]); got != 4 {
		t.Errorf("consumed %d, want 4", got)
	}
	// An entry of a thread the log never saw is a reason, not a record.
	l2 := &openLog{firstQ: 1, nextQ: 1, cm: &clockMerge{l: cl, next: 4, fsTid: map[uint64]int{}}}
	cl.put(4, 0xc000, unix.SYS_CLOCK_GETTIME, 555, true)
	l2.add(1, new(get(12)), "", 5, 0xd000)
	if l2.calls.len() != 1 || !strings.Contains(l2.reason, "thread the recorder does not know") {
		t.Errorf("unknown thread: %d records, reason %q", l2.calls.len(), l2.reason)
	}
}

// The region goes where nothing is mapped, whole: a page of the program's
// in the middle of the first place the recorder tries stays where it is,
// with its content, and the region goes to the next place. (Mapping the
// region's parts with MAP_FIXED once its first page was placed replaced a
// library's pages in the range, and python3 died.)
func TestClockLogLeavesOtherMappings(t *testing.T) {
	requireKernel(t)
	var page uint64
	want := bytes.Repeat([]byte("mine"), format.PageSize/4)
	setup := func(pid int, mem *proc.Mem, inject func(nr int, args ...uint64) (int64, error), lo, hi uint64) error {
		page = clockPlaces(lo, hi, 1)[0] + clkSize/2
		ret, err := inject(unix.SYS_MMAP, page, format.PageSize, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0)
		if err != nil || uint64(ret) != page {
			return fmt.Errorf("map the program's page at %#x: %#x, %v", page, ret, err)
		}
		return mem.WriteAt(want, page)
	}
	var out bytes.Buffer
	var got []byte
	var base uint64
	cmd, l := startPatched(t, true, &out, setup, func(pid int, l *clockLog) error {
		got = make([]byte, format.PageSize)
		base = l.base
		_, err := proc.ReadBytes(pid, page, got)
		return err
	}, buildFixture(t, "clockloop"), "100")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program failed: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the program's page at %#x lost its content", page)
	}
	if lo, hi := l.region(); page >= lo && page < hi {
		t.Errorf("the region [%#x, %#x) covers the program's page at %#x", lo, hi, page)
	}
	t.Logf("region at %#x, the program's page at %#x", base, page)
}

// The prologues the stubs displace: this kernel's vDSO functions (push
// rbp; lea r10, [rip-0x6818]), and the same after an endbr64, the first
// instruction of vDSO functions built for CET, which the disassembler
// alone does not know; the rip-relative lea still reads the same address
// from the stub.
func TestDisplacedPrologues(t *testing.T) {
	const addr, to = 0x7fff00000810, 0x7ffeffff0000
	lea := []byte{0x4c, 0x8d, 0x15, 0xe8, 0x97, 0xff, 0xff} // lea r10, [rip-0x6818]
	for _, tc := range []struct {
		name   string
		code   []byte
		n, lea int // bytes displaced; where the lea starts, -1 for none
	}{
		{"push, mov, push", []byte{0x55, 0x48, 0x89, 0xe5, 0x41, 0x56, 0x90}, 6, -1},
		{"push, lea", append([]byte{0x55}, lea...), 8, 1},
		{"endbr64, push", append([]byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}, lea...), 5, -1},
		{"endbr64, lea", append([]byte{0xf3, 0x0f, 0x1e, 0xfa}, lea...), 11, 4},
	} {
		moved, n, ok := displaced(tc.code, addr, to)
		if !ok || n != tc.n || len(moved) != n {
			t.Errorf("%s: %d bytes, ok %v; want %d", tc.name, n, ok, tc.n)
			continue
		}
		if tc.lea < 0 {
			if !bytes.Equal(moved, tc.code[:n]) {
				t.Errorf("%s: moved % x", tc.name, moved)
			}
			continue
		}
		rel := func(b []byte, at uint64) uint64 {
			return at + 7 + uint64(int64(int32(binary.LittleEndian.Uint32(b[3:]))))
		}
		if got, want := rel(moved[tc.lea:], to+uint64(tc.lea)), rel(lea, addr+uint64(tc.lea)); got != want {
			t.Errorf("%s: the moved lea reads %#x, want %#x", tc.name, got, want)
		}
	}
}
