package replayer

import (
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// The end search steps through the iterations of a rep string instruction
// (a signal from outside lands between two of them), so it must know one
// when it sees its bytes.
func TestDecodeRepString(t *testing.T) {
	cases := []struct {
		name     string
		code     []byte
		size     uint64
		rsi, rdi bool
	}{
		{"rep movsb", []byte{0xf3, 0xa4}, 1, true, true},
		{"rep movsq", []byte{0xf3, 0x48, 0xa5}, 8, true, true},
		{"rep movsd", []byte{0xf3, 0xa5}, 4, true, true},
		{"rep movsw", []byte{0x66, 0xf3, 0xa5}, 2, true, true},
		{"rep stosb", []byte{0xf3, 0xaa, 0x90}, 1, false, true},
		{"rep stosq", []byte{0xf3, 0x48, 0xab}, 8, false, true},
		{"repne scasb", []byte{0xf2, 0xae}, 1, false, true},
		{"repe cmpsb", []byte{0xf3, 0xa6}, 1, true, true},
		{"rep lodsb", []byte{0xf3, 0xac}, 1, true, false},
		{"movsb without rep", []byte{0xa4, 0x90}, 0, false, false},
		{"rep ret", []byte{0xf3, 0xc3}, 0, false, false},
		{"pause", []byte{0xf3, 0x90}, 0, false, false},
		{"syscall", []byte{0x0f, 0x05}, 0, false, false},
		{"prefixes only", []byte{0xf3, 0x66}, 0, false, false},
	}
	for _, c := range cases {
		r := decodeRepString(c.code)
		if r.size != c.size || (c.size != 0 && (r.rsi != c.rsi || r.rdi != c.rdi)) {
			t.Errorf("%s (% x): got %+v, want size %d rsi %v rdi %v", c.name, c.code, r, c.size, c.rsi, c.rdi)
		}
	}
}

// A divergence in intervals that changed shared writable memory names the
// likely cause: another process writing it.
func TestSharedHint(t *testing.T) {
	ivs := []format.Interval{{
		Maps: []format.Mapping{
			{Start: 0x1000, End: 0x3000, Prot: format.ProtRead | format.ProtWrite},
			{Start: 0x5000, End: 0x6000, Prot: format.ProtRead | format.ProtWrite, Shared: true, Path: "/dev/zero (deleted)"},
		},
		Written: []format.PageRef{{Addr: 0x1000}},
	}}
	if h := sharedHint(ivs); h != "" {
		t.Errorf("private pages only: hint %q", h)
	}
	ivs[0].Written = append(ivs[0].Written, format.PageRef{Addr: 0x5000})
	if h := sharedHint(ivs); !strings.Contains(h, "1 pages of shared writable memory") {
		t.Errorf("hint %q", h)
	}
	// A read-only shared file mapping unmapped in the interval has its
	// pages among the interval's originals: no shared memory was changed
	// (python3 mapping a file with mmap.mmap(fd, 0, prot=PROT_READ), whose
	// divergence blamed "7424 pages of shared writable memory").
	ivs[0].Maps = append(ivs[0].Maps, format.Mapping{Start: 0x8000, End: 0x9000, Prot: format.ProtRead, Shared: true, Path: "/data"})
	ivs[0].Written = []format.PageRef{{Addr: 0x1000}, {Addr: 0x8000}}
	if h := sharedHint(ivs); h != "" {
		t.Errorf("a read-only shared mapping: hint %q", h)
	}
}

// The search reads the instruction at its goal's rip; one that starts on
// the last byte of a page must be read whole when it goes on in the next
// page, and alone, without an error, when it is one byte long or the next
// page is not mapped (python3 once met a goal there, and the short read
// panicked).
func TestInstructionBytesAtPageEnd(t *testing.T) {
	region, base, e := ownMemory(t, 2)
	last := base + pageSize - 1

	region[pageSize-1], region[pageSize] = 0x90, 0x05 // nop
	if code, err := e.instructionBytes(last); err != nil || len(code) != 1 || code[0] != 0x90 {
		t.Errorf("nop at a page end: %x, %v", code, err)
	}
	region[pageSize-1] = 0x0f // syscall: 0f 05 across the pages
	if code, err := e.instructionBytes(last); err != nil || len(code) != 6 || code[1] != 0x05 {
		t.Errorf("syscall across a page end: %x, %v", code, err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(base+pageSize), pageSize, 0); errno != 0 {
		t.Fatal(errno)
	}
	if code, err := e.instructionBytes(last); err != nil || len(code) != 1 {
		t.Errorf("escape byte before an unmapped page: %x, %v", code, err)
	}
	if code, err := e.instructionBytes(base + 16); err != nil || len(code) != 6 {
		t.Errorf("inside a page: %x, %v", code, err)
	}
}

// A divergence past a signal the recording had delivered by the last
// completed call, and the replay had not, names it and where it came.
func TestPendingSignalHint(t *testing.T) {
	e := &engine{
		c:   &format.Checkpoint{Intervals: []format.Interval{{FirstSeq: 930}}},
		log: []format.Syscall{{Seq: 935}, {Seq: 936}, {Seq: 937}},
		sigs: []format.SignalEvent{{Seq: 936, Signo: 14, Interval: 4,
			Regs: format.Regs{OrigRax: ^uint64(0), Rip: 0x7f0000000503}}},
	}
	e.next = 1 // #935 done
	if h := e.pendingSignalHint(); h != "" {
		t.Errorf("not due yet: hint %q", h)
	}
	e.next = 2 // #936 done: due
	h := e.pendingSignalHint()
	if !strings.Contains(h, "SIGALRM after syscall #936, in user code at rip 0x7f0000000503, in interval 4") {
		t.Errorf("hint %q", h)
	}
	e.nextSig = 1
	if h := e.pendingSignalHint(); h != "" {
		t.Errorf("delivered: hint %q", h)
	}
}

// A signal the recording delivered in user code on a syscall instruction
// that a stop had rewound (rcx just past it, as the interrupted call left
// it) is placed where the replay, which made the call once, arrives with
// its previous call's rcx and r11: those two are taken from the recording
// (the instruction overwrites them), on that instruction only, and only
// with every other register equal. A ptrace recording of
// testdata/pipeworkers.c once failed its trial replay for want of this.
func TestRewoundInUserCode(t *testing.T) {
	region, base, e := ownMemory(t, 1)
	e.c = &format.Checkpoint{}
	rip := base + 0x100
	region[0x100], region[0x101] = 0x0f, 0x05 // syscall
	region[0x200], region[0x201] = 0x0f, 0x0b // ud2

	rec := format.Regs{Rip: rip, Rax: 0, OrigRax: ^uint64(0), Rcx: rip + 2, R11: 0x246, Rdi: 5, Rsp: 0x7ffd0000}
	ev := &format.SignalEvent{Signo: 14, Regs: rec}
	now := rec
	now.Rcx, now.R11 = 0x401234, 0x202 // the previous call's
	got, ok := e.rewound(ev, now)
	if !ok || got.Rcx != rec.Rcx || got.R11 != rec.R11 || len(regsDiff(rec, got)) != 0 {
		t.Errorf("on the syscall instruction: %v, differences %v", ok, regsDiff(rec, got))
	}

	other := now
	other.Rdi = 6
	if got, ok := e.rewound(ev, other); ok && len(regsDiff(rec, got)) == 0 {
		t.Errorf("another register differs, yet the state matched")
	}

	atExit := *ev
	atExit.Regs.OrigRax = 0 // delivered at a call's exit: the first case's, which needs its interval
	if _, ok := e.rewound(&atExit, now); ok {
		t.Errorf("a delivery at a call's exit took the user-code case")
	}

	notSyscall := *ev
	notSyscall.Regs.Rip, notSyscall.Regs.Rcx = rip+0x100, rip+0x102
	there := now
	there.Rip = rip + 0x100
	if _, ok := e.rewound(&notSyscall, there); ok {
		t.Errorf("rcx and r11 taken on an instruction that is not a syscall")
	}
}

// ownMemory maps pages of fresh memory in the test process and returns
// them, their address, and an engine whose memory is the test process's own.
func ownMemory(t *testing.T, pages int) ([]byte, uint64, *engine) {
	t.Helper()
	region, err := unix.Mmap(-1, 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(region) })
	m, err := proc.OpenMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return region, uint64(uintptr(unsafe.Pointer(&region[0]))), &engine{mem: m}
}

func TestBytesDiffer(t *testing.T) {
	page := func(set map[int]byte) []byte {
		b := make([]byte, pageSize)
		for i, v := range set {
			b[i] = v
		}
		return b
	}
	for _, c := range []struct {
		rec, got map[int]byte
		want     string
	}{
		{nil, map[int]byte{0x908: 0x40}, "1 byte differs: at 0x1908 recorded 00 00 00 00 00 00 00 00, replayed 40 00 00 00 00 00 00 00"},
		{nil, map[int]byte{0x10: 1, 0x11: 2, 0x12: 3}, "3 bytes differ: at 0x1010 recorded 00 00 00 00 00 00 00 00, replayed 01 02 03 00 00 00 00 00"},
		{map[int]byte{7: 9}, map[int]byte{8: 1, 0x100: 5, 0x200: 6}, "4 bytes differ in 3 places: at 0x1000 recorded 00 00 00 00 00 00 00 09 00 00 00 00 00 00 00 00, replayed 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00; at 0x1100 recorded 00 00 00 00 00 00 00 00, replayed 05 00 00 00 00 00 00 00; ..."},
	} {
		if got := bytesDiffer(0x1000, page(c.rec), page(c.got)); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
