package replayer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
	"golang.org/x/sys/unix"
)

func mapfileRecording(t *testing.T, touch bool) *recording {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "input"), []byte("file content"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{dir}
	if touch {
		args = append(args, "touch")
	}
	return record(t, fixture(t, "mapfile"), recordOpts{args: args})
}

// A file mapped during the window replays as long as the program does not
// read it (its content is not in the checkpoint); rt_sigaction runs for real.
func TestReplayFileMappingUntouched(t *testing.T) {
	needRoot(t)
	rec := mapfileRecording(t, false)
	if _, err := run(t, rec.c, rec.pages, Options{}); err != nil {
		t.Fatalf("replay: %v", err)
	}
}

func TestReplayFileMappingTouchedDiverges(t *testing.T) {
	needRoot(t)
	rec := mapfileRecording(t, true)
	var seq uint64
	for _, s := range rec.c.Syscalls {
		if s.Nr == unix.SYS_MMAP && s.Args[4] != ^uint64(0) {
			seq = s.Seq
		}
	}
	_, err := run(t, rec.c, rec.pages, Options{})
	// The mprotect that followed the mmap must not have opened the pages.
	wantDivergence(t, err, fmt.Sprintf("file-backed mmap at seq %d", seq))
	if !strings.Contains(err.Error(), "content not recorded") {
		t.Errorf("error %v", err)
	}
}

func TestPickStubBaseKeepsAway(t *testing.T) {
	used := [][2]uint64{{0x1000_0000_0000 - 4096, 0x1000_0000_1000}, {0x2000_0000_0000, 0x2000_4000_0000}}
	b, err := pickStubBase(used)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range used {
		if b+stubSize+1<<30 > u[0] && b < u[1]+1<<30 {
			t.Errorf("stub at %#x is within 1 GiB of %#x-%#x", b, u[0], u[1])
		}
	}
}

func TestGuardSet(t *testing.T) {
	var s guardSet
	s.add(guard{start: 0x1000, end: 0x5000, prot: 3})
	s.add(guard{start: 0x8000, end: 0x9000, prot: 1, reason: "file"})
	s.remove(0x2000, 0x3000)
	if got := fmt.Sprint(s.g); got != "[{4096 8192 3  false 0 0} {12288 20480 3  false 0 0} {32768 36864 1 file false 0 0}]" {
		t.Fatalf("after remove: %s", got)
	}
	if _, ok := s.find(0x2800); ok {
		t.Error("found a removed page")
	}
	if g, ok := s.find(0x8100); !ok || g.reason != "file" {
		t.Errorf("find: %+v %v", g, ok)
	}
	s.move(0x3000, 0x2000, 0x10000)
	// A moved guard says how far it moved (the pages of a file mapping
	// are named by their address in the mmap's record).
	if got := fmt.Sprint(s.g); got != "[{4096 8192 3  false 0 0} {32768 36864 1 file false 0 0} {65536 73728 3  false 0 53248}]" {
		t.Fatalf("after move: %s", got)
	}
	if w := s.within(0x0, 0x1800); len(w) != 1 || w[0].end != 0x1800 {
		t.Errorf("within: %+v", w)
	}
}

// The rebuilt stub holds no file descriptor, runs under the seccomp filter
// with no_new_privs, and shares one CPU with the tracer.
func TestStubIsolation(t *testing.T) {
	needRoot(t)
	rec := record(t, fixture(t, "exit"), recordOpts{})
	var status string
	var fds []os.DirEntry
	testHookReady = func(pid int) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		status = string(b)
		fds, _ = os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	}
	defer func() { testHookReady = nil }()
	if _, err := run(t, rec.c, rec.pages, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "Cpus_allowed_list:\t"} {
		if !strings.Contains(status, want) {
			t.Errorf("stub status lacks %q", want)
		}
	}
	if i := strings.Index(status, "Cpus_allowed_list:\t"); i >= 0 {
		if l := strings.Fields(status[i+len("Cpus_allowed_list:"):])[0]; strings.ContainsAny(l, ",-") {
			t.Errorf("stub runs on cpus %s, want one", l)
		}
	}
	if len(fds) != 0 {
		t.Errorf("stub holds %d file descriptors", len(fds))
	}
}

// The start state of an interval gets, from the mmap's record, the pages of
// a file mapped before it and still mapped there that it lacks (not present
// at the boundary), and only those: not over the start state's own, not
// outside the mapping, not of a mapping unmapped before the start.
func TestMappedAtStart(t *testing.T) {
	const base, pg = 0x7f0000000000, 4096
	h := func(b byte) format.Hash { return format.Hash{b} }
	mmapRec := func(seq, addr uint64, pages ...format.PageRef) format.Syscall {
		return format.Syscall{Seq: seq, Nr: unix.SYS_MMAP, Ret: int64(addr), Pages: pages,
			Args: [6]uint64{0, 2 * pg, unix.PROT_READ, unix.MAP_SHARED, 3, 0}}
	}
	c := &format.Checkpoint{
		Syscalls: []format.Syscall{
			mmapRec(1, base, format.PageRef{Addr: base, Hash: h(1)}, format.PageRef{Addr: base + pg, Hash: h(2)}),
			mmapRec(2, base+0x10000, format.PageRef{Addr: base + 0x10000, Hash: h(3)}),
			{Seq: 3, Nr: unix.SYS_MUNMAP, Args: [6]uint64{base + 0x10000, 2 * pg}},
			{Seq: 4, Nr: unix.SYS_GETPID},
			mmapRec(5, base+0x20000, format.PageRef{Addr: base + 0x20000, Hash: h(5)}),
		},
		Intervals: []format.Interval{{Index: 0, FirstSeq: 1}, {Index: 1, FirstSeq: 4}},
	}
	state := map[uint64]format.Hash{base + pg: h(9)}
	mappedAtStart(c, 1, state)
	want := map[uint64]format.Hash{base: h(1), base + pg: h(9)}
	if fmt.Sprint(state) != fmt.Sprint(want) {
		t.Fatalf("start state of interval 1: %v, want %v", state, want)
	}
	state = map[uint64]format.Hash{}
	mappedAtStart(c, 0, state)
	if len(state) != 0 {
		t.Fatalf("start state of interval 0 (nothing mapped before it): %v", state)
	}
}
