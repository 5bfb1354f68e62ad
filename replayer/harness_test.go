package replayer

// A minimal test helper that turns a run of a C fixture into a one-interval
// checkpoint: it is not a recorder (no intervals, no shadow, no eBPF), only
// enough ptrace to give the replayer something real to replay while the
// recorder is elsewhere.

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"

	"golang.org/x/sys/unix"
)

var (
	fixtureDir  string
	fixtureMu   sync.Mutex
	fixtureBins = map[string]string{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "tpreplay-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// needRoot skips a test that needs ptrace and /proc/PID/mem of other
// processes, except under CI, where it must run.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("replay tests need root (ptrace, /proc/PID/mem); CI runs them as root")
	}
	t.Skip("replay tests need root (ptrace, /proc/PID/mem)")
}

// fixture compiles testdata/name.c once per test binary.
func fixture(t *testing.T, name string) string {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if p, ok := fixtureBins[name]; ok {
		return p
	}
	out := filepath.Join(fixtureDir, name)
	cmd := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o", out, filepath.Join("testdata", name+".c"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compile fixture %s: %v\n%s", name, err, b)
	}
	fixtureBins[name] = out
	return out
}

// recordOpts says how the helper ends the recording.
type recordOpts struct {
	args []string
	// requestSteps > 0: after the last syscall of Nr requestAfter completes,
	// single-step that many instructions and end with a dump request.
	requestAfter int
	requestSteps int
}

// recording is what the helper captured.
type recording struct {
	c      *format.Checkpoint
	pages  *format.MemStore
	marker uint64 // the argument of the marker syscall
	stdout []byte
}

func record(t *testing.T, exe string, o recordOpts) *recording {
	t.Helper()
	tr := proc.NewTracer()
	defer tr.Close()
	outPath := filepath.Join(t.TempDir(), "stdout")
	stdout, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	rec := &recording{pages: format.NewMemStore()}
	err = tr.Do(func() error {
		p, err := os.StartProcess(exe, append([]string{exe}, o.args...), &os.ProcAttr{
			// The kernel rewrites a registered rseq area (cpu_id, mm_cid) on
			// every return to user space after a migration, outside any
			// syscall; the checkpoint does not carry the registration yet, so
			// the fixtures run without it.
			Env:   []string{"GLIBC_TUNABLES=glibc.pthread.rseq=0"},
			Files: []*os.File{devnull, stdout, stdout},
			Sys:   &syscall.SysProcAttr{Ptrace: true},
		})
		if err != nil {
			return err
		}
		defer func() {
			_ = p.Kill()
			_, _ = p.Wait()
		}()
		return rec.trace(p.Pid, exe, o)
	})
	if err != nil {
		t.Fatalf("record %s: %v", exe, err)
	}
	rec.stdout, _ = os.ReadFile(outPath)
	return rec
}

func (rec *recording) trace(pid int, exe string, o recordOpts) error {
	st, err := proc.Wait(pid)
	if err != nil {
		return err
	}
	if st.Status.StopSignal() != unix.SIGTRAP {
		return fmt.Errorf("first stop: %v", st)
	}
	if err := proc.SetOptions(pid, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_EXITKILL); err != nil {
		return err
	}
	mem, err := proc.OpenMem(pid)
	if err != nil {
		return err
	}
	defer mem.Close()
	c := &format.Checkpoint{Header: format.Header{
		Arch: "x86_64", ExePath: exe, Pid: pid, Backend: "test", FullPages: true,
		StartTime: time.Now(), Reason: "test",
	}}
	rec.c = c
	if f, err := elf.Open(exe); err == nil {
		c.Header.BuildID, _ = buildID(f)
		f.Close()
	}
	if flags, err := localCPUFlags(); err == nil {
		for f := range flags {
			c.Header.CPUFlags = append(c.Header.CPUFlags, f)
		}
	}
	read := func(addr uint64, n int) ([]byte, error) {
		b := make([]byte, n)
		return b, mem.ReadAt(b, addr)
	}
	var (
		started bool
		snap    = map[uint64]format.Hash{}
		cur     format.Syscall
		seq     uint64
		steps   int
	)
	for {
		if err := proc.Resume(unix.PTRACE_SYSCALL, pid, 0); err != nil {
			return err
		}
		st, err := proc.Wait(pid)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("fixture ended before its end state: %v", st)
		}
		regs, err := proc.GetRegs(pid)
		if err != nil {
			return err
		}
		if sig := st.Signal(); sig != 0 {
			if sig != int(unix.SIGSEGV) || !started {
				return fmt.Errorf("unexpected %v", st)
			}
			info, err := proc.GetSiginfo(pid)
			if err != nil {
				return err
			}
			c.End = format.EndState{Kind: format.EndSignal, Tid: pid, Signo: sig, Siginfo: info}
			return rec.finish(c, pid, mem, regs, snap, seq)
		}
		if !st.SyscallStop() {
			continue
		}
		info, err := proc.GetSyscallInfo(pid)
		if err != nil {
			return err
		}
		if info.Op == proc.SyscallEntry {
			cur = format.Syscall{Tid: pid, Nr: int(info.Nr), Args: info.Args}
			if started && (cur.Nr == unix.SYS_EXIT_GROUP) {
				c.End = format.EndState{Kind: format.EndExit, Tid: pid, ExitCode: int(cur.Args[0] & 0xff)}
				return rec.finish(c, pid, mem, regs, snap, seq)
			}
			continue
		}
		if !started {
			if cur.Nr == unix.SYS_GETPPID {
				started = true
				rec.marker = cur.Args[0]
				if err := rec.snapshot(c, pid, mem, regs, snap); err != nil {
					return err
				}
			}
			continue
		}
		seq++
		cur.Seq, cur.Ret, cur.Rip = seq, info.Ret, regs.Rip
		if d, ok := syscalls.Lookup(cur.Nr); ok {
			ranges, err := syscalls.Outputs(d, cur.Args, cur.Ret, read)
			if err != nil {
				return err
			}
			for _, r := range ranges {
				b, err := read(r.Addr, r.Len)
				if err != nil {
					return err
				}
				cur.Out = append(cur.Out, format.OutBuf{Addr: r.Addr, Data: b})
			}
		}
		c.Syscalls = append(c.Syscalls, cur)
		if o.requestSteps > 0 && cur.Nr == o.requestAfter {
			for steps = 0; steps < o.requestSteps; steps++ {
				if err := proc.Resume(unix.PTRACE_SINGLESTEP, pid, 0); err != nil {
					return err
				}
				if st, err := proc.Wait(pid); err != nil || st.Status.StopSignal() != unix.SIGTRAP {
					return fmt.Errorf("single-step: %v %v", st, err)
				}
			}
			if regs, err = proc.GetRegs(pid); err != nil {
				return err
			}
			c.End = format.EndState{Kind: format.EndRequest, Tid: pid}
			return rec.finish(c, pid, mem, regs, snap, seq)
		}
	}
}

// snapshot captures the start of the window: registers, map, every readable page.
func (rec *recording) snapshot(c *format.Checkpoint, pid int, mem *proc.Mem, regs proc.Regs, snap map[uint64]format.Hash) error {
	xs, err := proc.GetXState(pid)
	if err != nil {
		return err
	}
	mask, err := proc.GetSigmask(pid)
	if err != nil {
		return err
	}
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return err
	}
	page := make([]byte, pageSize)
	for _, m := range maps {
		if proc.Special(m) {
			continue
		}
		for a := m.Start; a < m.End; a += pageSize {
			if mem.ReadAt(page, a) != nil {
				continue
			}
			snap[a] = rec.pages.Put(page)
			c.Final = append(c.Final, format.PageRef{Addr: a, Hash: snap[a]})
		}
	}
	c.Intervals = []format.Interval{{
		Index: 0, Start: time.Now(), FirstSeq: 1, Maps: maps, Replayable: true,
		Threads: []format.Thread{{Tid: pid, Regs: regs, XState: xs, SigMask: mask}},
	}}
	return nil
}

// finish fills the end state: registers, and the digests of the stack page
// and of every page that changed since the snapshot. A page that changed
// gets its original in the interval's written list and its content at the
// end in Final, as a recording stores them.
func (rec *recording) finish(c *format.Checkpoint, pid int, mem *proc.Mem, regs proc.Regs, snap map[uint64]format.Hash, seq uint64) error {
	xs, err := proc.GetXState(pid)
	if err != nil {
		return err
	}
	c.End.Regs, c.End.XState, c.End.LastSeq = regs, xs, seq
	page := make([]byte, pageSize)
	stack := pageDown(regs.Rsp)
	for a, h := range snap {
		if mem.ReadAt(page, a) != nil {
			continue
		}
		changed := format.HashPage(page) != h
		if changed || a == stack {
			c.End.Digests = append(c.End.Digests, format.PageRef{Addr: a, Hash: format.DigestPage(a, page, c.RseqAreas(), regs.Rsp)})
		}
		if changed {
			c.Intervals[0].Written = append(c.Intervals[0].Written, format.PageRef{Addr: a, Hash: h})
			i := sort.Search(len(c.Final), func(i int) bool { return c.Final[i].Addr >= a })
			c.Final[i].Hash = rec.pages.Put(page)
		}
	}
	sort.Slice(c.Intervals[0].Written, func(i, j int) bool { return c.Intervals[0].Written[i].Addr < c.Intervals[0].Written[j].Addr })
	c.Intervals[0].End = time.Now()
	c.Header.DumpTime = time.Now()
	return nil
}

// children lists the live child processes of the test binary.
func children(t *testing.T) []string {
	t.Helper()
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var out []string
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		if s := string(b); s != "" {
			out = append(out, s)
		}
	}
	return out
}
