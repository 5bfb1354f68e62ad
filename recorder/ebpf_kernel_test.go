package recorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/tprec/tprec/bpf"
	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/syscalls"
)

// requireKernel: the eBPF backend needs root on this kernel (6.18, BTF). A
// test skips only outside CI; in CI, which runs as root, it fails.
func requireKernel(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test loads eBPF programs and needs root; CI runs as root")
	}
	t.Skip("needs root to load eBPF programs")
}

// The Go mirrors bpf2go generated must have the layout of the C structs in
// the object's BTF: size, and every member's name and offset.
func TestEBPFLayoutMatchesBTF(t *testing.T) {
	spec, err := bpf.LoadTprec()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"tp_syscall": bpf.TprecTpSyscall{}, "tp_part": bpf.TprecTpPart{}, "tp_item": bpf.TprecTpItem{},
		"tp_fault": bpf.TprecTpFault{}, "tp_proc": bpf.TprecTpProc{}, "tp_counters": bpf.TprecTpCounters{},
		"tp_out": bpf.TprecTpOut{},
	} {
		var st *btf.Struct
		if err := spec.Types.TypeByName(name, &st); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		gt := reflect.TypeOf(v)
		if uintptr(st.Size) != gt.Size() {
			t.Errorf("%s: C size %d, Go size %d", name, st.Size, gt.Size())
		}
		var goFields []reflect.StructField
		for i := 0; i < gt.NumField(); i++ {
			if f := gt.Field(i); f.Name != "_" {
				goFields = append(goFields, f)
			}
		}
		if len(goFields) != len(st.Members) {
			t.Errorf("%s: %d C members, %d Go fields", name, len(st.Members), len(goFields))
			continue
		}
		for i, m := range st.Members {
			f := goFields[i]
			if uintptr(m.Offset.Bytes()) != f.Offset || !strings.EqualFold(strings.ReplaceAll(m.Name, "_", ""), f.Name) {
				t.Errorf("%s: C member %s at %d, Go field %s at %d", name, m.Name, m.Offset.Bytes(), f.Name, f.Offset)
			}
		}
	}
	// The decoder's sizes are the BTF ones too.
	if sizeSyscall != int(reflect.TypeOf(bpf.TprecTpSyscall{}).Size()) || sizeItem != 16 {
		t.Errorf("decoder sizes: syscall %d, item %d", sizeSyscall, sizeItem)
	}
}

// The compiled object's table (tp_outs in .rodata) says, for every syscall
// number, what syscalls.CaptureBound says: the C side and the Go table agree.
func TestEBPFTableMatchesGo(t *testing.T) {
	spec, err := bpf.LoadTprec()
	if err != nil {
		t.Fatal(err)
	}
	v := spec.Variables["tp_outs"]
	if v == nil {
		t.Fatal("no tp_outs in the object")
	}
	var st *btf.Struct
	if err := spec.Types.TypeByName("tp_out", &st); err != nil {
		t.Fatal(err)
	}
	per := int(st.Size)
	nOuts := 0
	for _, d := range syscalls.All() {
		nOuts = max(nOuts, len(syscalls.CaptureBound(d)))
	}
	rows := int(v.Size()) / (per * nOuts)
	table := make([]bpf.TprecTpOut, rows*nOuts)
	if err := v.Get(table); err != nil {
		t.Fatal(err)
	}
	for nr := 0; nr < rows; nr++ {
		var want []syscalls.Out
		if d, ok := syscalls.Lookup(nr); ok {
			want = syscalls.CaptureBound(d)
		}
		for i := 0; i < nOuts; i++ {
			got := table[nr*nOuts+i]
			if i >= len(want) {
				if got.Flags != 0 {
					t.Errorf("nr %d: C has output %d (%+v), Go has %d", nr, i, got, len(want))
				}
				continue
			}
			w := want[i]
			onErr := uint8(0)
			if w.OnError {
				onErr = 1
			}
			if got.Flags != 2|onErr || got.Kind != uint8(w.Kind) || got.Arg != uint8(w.Arg) || got.Size != uint8(w.Size.Kind) ||
				got.Sarg != uint8(w.Size.Arg) || got.N != uint32(w.Size.N) || got.Max != uint32(w.Size.Max) {
				t.Errorf("nr %d output %d: C %+v, Go %+v", nr, i, got, w)
			}
		}
	}
}

// buildFixture compiles a C test program once, into fixtureDir, which
// TestMain removes.
var (
	fixtureMu  sync.Mutex
	fixtures   = map[string]string{}
	fixtureDir string
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "tprec-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

func buildFixture(t *testing.T, name string) string {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if p, ok := fixtures[name]; ok {
		return p
	}
	out := filepath.Join(fixtureDir, name)
	if b, err := exec.Command("gcc", "-O1", "-o", out, filepath.Join("testdata", name+".c"), "-ldl", "-pthread").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	fixtures[name] = out
	return out
}

// In every interval the pages the fault stream saw written and the pages
// the pagemap found written agree on private mappings: the fixture writes
// anonymous pages from user code and has the kernel write others (pread).
// With a shadow forked at every boundary, every written page faults. With
// the shadow kept (kept.go), the pages the fixture rewrites are written in
// place from the third interval on, without a fault; every fault is still
// on a page the pagemap found written.
func TestEBPFFaultsAgreeWithPagemap(t *testing.T) {
	requireKernel(t)
	for _, kept := range []bool{false, true} {
		t.Run(map[bool]string{false: "forked", true: "kept"}[kept], func(t *testing.T) {
			faultsAgree(t, kept)
		})
	}
}

func faultsAgree(t *testing.T, kept bool) {
	prog := buildFixture(t, "writer")
	var mu sync.Mutex
	type res struct{ pm, inPlace, onlyPM, onlyF int }
	var got []res
	testHookWritten = func(maps []format.Mapping, pagemap, inPlace []uint64, faults map[uint64]uint8) {
		onlyPM, onlyF, _ := compareWritten(maps, pagemap, inPlace, faults)
		mu.Lock()
		got = append(got, res{len(pagemap), len(inPlace), len(onlyPM), len(onlyF)})
		if len(onlyPM)+len(onlyF) > 0 {
			t.Logf("only in pagemap %x, only in faults %x", onlyPM, onlyF)
		}
		mu.Unlock()
	}
	defer func() { testHookWritten = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var log strings.Builder
	err := Record(ctx, Options{Cmd: []string{prog}, Interval: 200 * time.Millisecond, Backend: "ebpf", OutputDir: t.TempDir(), Log: &log, KeepShadow: kept}, nil)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, log.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 4 {
		t.Fatalf("only %d intervals compared\n%s", len(got), log.String())
	}
	// The first interval ends at the program's entry point (the loader's
	// start-up, entry.go), the second at the first tick after it, which may
	// come at once: the program's own start-up. The later ones each hold
	// whole rounds of the fixture's writes.
	inPlace := 0
	for i, r := range got {
		if r.onlyPM != 0 || r.onlyF != 0 {
			t.Errorf("interval %d: %d pages only in pagemap, %d only in faults", i, r.onlyPM, r.onlyF)
		}
		if i < 2 {
			continue
		}
		if r.pm < 2*64 {
			t.Errorf("interval %d: pagemap found %d written pages, want at least %d", i, r.pm, 2*64)
		}
		if !kept && r.inPlace != 0 {
			t.Errorf("interval %d: %d pages written in place, shadow forked at every boundary", i, r.inPlace)
		}
		if kept && i >= 3 && r.inPlace < 2*64 {
			// The third interval may have a new shadow: most pages
			// the second (the program's start-up) wrote, it did not
			// write again.
			inPlace++
		}
	}
	if kept && inPlace > 1 {
		t.Errorf("%d intervals from the fourth on with fewer than %d pages written in place: %+v", inPlace, 2*64, got)
	}
}

// The traced map follows a process's children when asked to, and forgets a
// process when it exits: it never holds stale tgids.
func TestEBPFTracedMapFollowsForkAndExit(t *testing.T) {
	requireKernel(t)
	cmd := exec.Command("/bin/sh", "-c", `read x; /bin/sleep 0.3 & echo $!; wait`)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	e, err := newEBPFSource(cmd.Process.Pid, 1<<20, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	p := bpf.TprecTpProc{Flags: uint32(bpf.TprecTpProcFlagsTP_PROC_FOLLOW_FORK)}
	if err := e.objs.Traced.Update(uint32(cmd.Process.Pid), p, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in)
	var line [32]byte
	n, _ := out.Read(line[:])
	child, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("child pid %q: %v", line[:n], err)
	}
	var cp bpf.TprecTpProc
	if err := e.objs.Traced.Lookup(uint32(child), &cp); err != nil {
		t.Fatalf("child %d not in the traced map: %v", child, err)
	}
	bit := func(pid int) bool {
		var w uint64
		if err := e.objs.TracedBits.Lookup(uint32(pid/64), &w); err != nil {
			t.Fatal(err)
		}
		return w&(1<<(pid%64)) != 0
	}
	if !bit(child) || !bit(cmd.Process.Pid) {
		t.Errorf("traced bits: child %d %v, parent %d %v; want both set", child, bit(child), cmd.Process.Pid, bit(cmd.Process.Pid))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{child, cmd.Process.Pid} {
		if err := e.objs.Traced.Lookup(uint32(pid), &cp); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("exited process %d still in the traced map (%v)", pid, err)
		}
		if bit(pid) {
			t.Errorf("exited process %d still has its traced bit", pid)
		}
	}
}

// --backend ebpf loads, or fails with ErrEBPFUnavailable and one line why.
func TestEBPFSourceLoads(t *testing.T) {
	requireKernel(t)
	e, err := newEBPFSource(os.Getpid(), 0, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.drain(); err != nil {
		t.Fatal(err)
	}
	e.close()
}
