package recorder

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/tprec/tprec/bpf"
	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// encodeSyscall builds a record as tp_sys_exit lays it out.
func encodeSyscall(h bpf.TprecTpSyscall, items ...item) []byte {
	h.Type = uint8(bpf.TprecTpEventTypeTP_EV_SYSCALL)
	b := append([]byte(nil), asBytes(&h)...)
	return appendItems(b, items...)
}

func appendItems(b []byte, items ...item) []byte {
	for _, it := range items {
		h := bpf.TprecTpItem{Kind: uint8(it.kind), Len: it.len, Addr: it.addr}
		if it.data != nil {
			h.Len = uint32(len(it.data))
		}
		b = append(b, asBytes(&h)...)
		b = append(b, it.data...)
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
	}
	return b
}

func TestDecodeSyscallRecord(t *testing.T) {
	data := []byte("hello, world")
	raw := encodeSyscall(bpf.TprecTpSyscall{Flags: uint8(bpf.TprecTpRecFlagsTP_F_END), Tid: 7, Tgid: 7, Nr: unix.SYS_READ, Seq: 3,
		Args: [6]uint64{3, 0x1000, 4096}, Ret: int64(len(data)), Rip: 0x401000},
		item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x1000, data: data})
	r, err := decodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	if r.syscall == nil || r.syscall.Seq != 3 || r.syscall.Nr != unix.SYS_READ || len(r.items) != 1 {
		t.Fatalf("decoded %+v", r)
	}
	c := &pendingCall{hdr: *r.syscall, have: true, end: true, items: r.items}
	rec, problem := buildSyscall(c)
	if problem != "" {
		t.Fatal(problem)
	}
	if len(rec.Out) != 1 || rec.Out[0].Addr != 0x1000 || !bytes.Equal(rec.Out[0].Data, data) {
		t.Fatalf("outputs %+v", rec.Out)
	}
}

// A call whose output was not copied is logged with the reason, never with
// guessed bytes.
func TestBuildSyscallMissingOutput(t *testing.T) {
	for _, tc := range []struct {
		it   item
		want string
	}{
		{item{kind: bpf.TprecTpItemKindTP_ITEM_TOOBIG, addr: 0x1000, len: 4 << 20}, "more than"},
		{item{kind: bpf.TprecTpItemKindTP_ITEM_UNREADABLE, addr: 0x1000, len: 4096}, "could not read"},
	} {
		c := &pendingCall{hdr: bpf.TprecTpSyscall{Nr: unix.SYS_READ, Args: [6]uint64{3, 0x1000, 4 << 20}, Ret: 4 << 20}, have: true, end: true,
			items: []item{tc.it}}
		_, problem := buildSyscall(c)
		if !bytes.Contains([]byte(problem), []byte(tc.want)) {
			t.Errorf("problem %q does not say %q", problem, tc.want)
		}
	}
	c := &pendingCall{hdr: bpf.TprecTpSyscall{Nr: unix.SYS_READ, Args: [6]uint64{3, 0x1000, 10}, Ret: 10}, have: true}
	if _, problem := buildSyscall(c); problem == "" {
		t.Error("an incomplete record has no problem")
	}
}

// Memory captured in several pieces serves a read that spans them.
func TestCapturedMemJoinsPieces(t *testing.T) {
	m := newCapturedMem([]item{
		{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x2000, data: []byte("world")},
		{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x1ffb, data: []byte("hello")},
	})
	b, err := m.read(0x1ffb, 10)
	if err != nil || string(b) != "helloworld" {
		t.Fatalf("read = %q, %v", b, err)
	}
	if _, err := m.read(0x1ffb, 11); err == nil {
		t.Fatal("read past the captured bytes succeeded")
	}
}

// A 16 MiB output arrives in 512 pieces of 32 KiB (the programs' records);
// they join into one segment whose bytes are the pieces' in order, with an
// overlap and a gap handled, and the pieces' own buffers are not written.
func TestCapturedMemJoinsManyPieces(t *testing.T) {
	const piece, n = 32 << 10, 512
	var items []item
	want := make([]byte, piece*n)
	for i := range want {
		want[i] = byte(i * 7 / 5)
	}
	for i := n - 1; i >= 0; i-- { // any order
		items = append(items, item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x100000 + uint64(i*piece), data: append([]byte(nil), want[i*piece:(i+1)*piece]...)})
	}
	// An overlapping piece, and one past a gap.
	items = append(items, item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x100000 + 10, data: append([]byte(nil), want[10:5000]...)})
	items = append(items, item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x100000 + uint64(len(want)) + 4096, data: []byte("after")})
	firstPiece := items[n-1].data
	m := newCapturedMem(items)
	if len(m.segs) != 2 {
		t.Fatalf("%d segments, want 2", len(m.segs))
	}
	b, err := m.read(0x100000, len(want))
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("read of the whole output: %v, equal %v", err, bytes.Equal(b, want))
	}
	if !bytes.Equal(firstPiece, want[:piece]) {
		t.Fatal("joining wrote into a piece's buffer")
	}
	if b, err := m.read(0x100000+uint64(len(want))+4096, 5); err != nil || string(b) != "after" {
		t.Fatalf("read past the gap = %q, %v", b, err)
	}
	if _, err := m.read(0x100000+uint64(len(want)), 10); err == nil {
		t.Fatal("a read in the gap succeeded")
	}
}

// restart_syscall's record is logged as the call it finished, with that
// call's outputs (nanosleep's remaining time when interrupted).
func TestBuildSyscallRestarted(t *testing.T) {
	ts := make([]byte, 16)
	binary.LittleEndian.PutUint64(ts, 1)
	var payload [56]byte
	binary.LittleEndian.PutUint64(payload[0:], unix.SYS_NANOSLEEP)
	binary.LittleEndian.PutUint64(payload[8:], 0x3000)
	binary.LittleEndian.PutUint64(payload[16:], 0x4000)
	raw := encodeSyscall(bpf.TprecTpSyscall{Flags: uint8(bpf.TprecTpRecFlagsTP_F_END | bpf.TprecTpRecFlagsTP_F_RESTARTED), Nr: unix.SYS_RESTART_SYSCALL, Seq: 1, Ret: -4},
		item{kind: bpf.TprecTpItemKindTP_ITEM_RESTART, data: payload[:]},
		item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x4000, data: ts})
	r, err := decodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	rec, problem := buildSyscall(&pendingCall{hdr: *r.syscall, have: true, end: true, items: r.items})
	if problem != "" || rec.Nr != unix.SYS_NANOSLEEP || rec.Args[1] != 0x4000 || len(rec.Out) != 1 || rec.Out[0].Addr != 0x4000 {
		t.Fatalf("rec %+v, problem %q", rec, problem)
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	good := encodeSyscall(bpf.TprecTpSyscall{Nr: unix.SYS_READ}, item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x1000, data: []byte("abcdefgh")})
	for i := 0; i < len(good); i++ {
		decodeRecord(good[:i]) // must not panic
	}
	bad := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bad[sizeSyscall+4:], 1<<30) // item longer than the record
	if _, err := decodeRecord(bad); err == nil {
		t.Fatal("an item longer than its record decoded")
	}
	if _, err := decodeRecord([]byte{99}); err == nil {
		t.Fatal("an unknown type decoded")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeSyscall(bpf.TprecTpSyscall{Nr: unix.SYS_READ, Ret: 8}, item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x1000, data: []byte("abcdefgh")}))
	f.Add(encodeSyscall(bpf.TprecTpSyscall{Nr: unix.SYS_RECVMSG, Ret: 3}, item{kind: bpf.TprecTpItemKindTP_ITEM_UNREADABLE, addr: 0x1000, len: 56}))
	part := bpf.TprecTpPart{Type: uint8(bpf.TprecTpEventTypeTP_EV_PART), Part: 1}
	f.Add(appendItems(append([]byte(nil), asBytes(&part)...), item{kind: bpf.TprecTpItemKindTP_ITEM_TOOBIG, addr: 0x1000, len: 1 << 30}))
	fault := bpf.TprecTpFault{Type: uint8(bpf.TprecTpEventTypeTP_EV_FAULT), Addr: 0x1000}
	f.Add(asBytes(&fault))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil || r.syscall == nil {
			return
		}
		// Whatever decoded must also go through output building safely.
		buildSyscall(&pendingCall{hdr: *r.syscall, have: true, end: true, items: r.items})
		if d, ok := syscalls.Lookup(int(r.syscall.Nr)); ok {
			_ = d
		}
	})
}

// A record reserved in place with room to spare ends its items with an item
// of kind 0; what follows is stale ring buffer memory and is not decoded.
func TestDecodeStopsAtEndItem(t *testing.T) {
	raw := encodeSyscall(bpf.TprecTpSyscall{Flags: uint8(bpf.TprecTpRecFlagsTP_F_END), Nr: unix.SYS_CLOCK_GETTIME, Seq: 1, Args: [6]uint64{1, 0x1000}},
		item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x1000, data: make([]byte, 16)})
	raw = append(raw, make([]byte, sizeItem)...) // kind 0
	raw = append(raw, bytes.Repeat([]byte{0xee}, 40)...)
	r, err := decodeRecord(raw)
	if err != nil || len(r.items) != 1 || r.items[0].addr != 0x1000 || len(r.items[0].data) != 16 {
		t.Fatalf("decoded %+v, %v", r.items, err)
	}
}

// buildSyscall turns a collected call into the log record with a fresh
// builder, as the reader does.
func buildSyscall(c *pendingCall) (format.Syscall, string) {
	var b builder
	var rec format.Syscall
	problem := b.build(&c.hdr, c.items, c.end, &rec)
	return rec, problem
}

// The open interval's log numbers calls from the interval's first sequence
// number, drops the recorder's own earlier calls, and turns a gap or an
// unsupported call into the reason the interval is not replayable.
func TestOpenLog(t *testing.T) {
	l := &openLog{firstQ: 100, nextQ: 100, delta: 100 - 7}
	get := format.Syscall{Nr: unix.SYS_GETPID}
	l.add(99, new(get), "", clockNone, 0)  // injected at the boundary: dropped
	l.add(100, new(get), "", clockNone, 0) // seq 7
	l.add(101, new(get), "", clockNone, 0) // seq 8
	if l.calls.len() != 2 || l.calls.at(0).Seq != 7 || l.calls.at(1).Seq != 8 || l.reason != "" {
		t.Fatalf("calls %+v, reason %q", l.calls, l.reason)
	}
	// Two threads' calls can reach the ring out of order: a call waits
	// for the ones numbered before it.
	l.add(103, &format.Syscall{Nr: unix.SYS_GETTID, Tid: 2}, "", clockNone, 0)
	l.add(102, new(get), "", clockNone, 0)
	if l.calls.len() != 4 || l.calls.at(2).Seq != 9 || l.calls.at(3).Seq != 10 || l.calls.at(3).Tid != 2 || l.reason != "" {
		t.Fatalf("out of order: %d calls, reason %q", l.calls.len(), l.reason)
	}
	// One that never comes is a gap once the interval's records are in.
	l.add(106, new(get), "", clockNone, 0)
	if l.calls.len() != 4 || l.reason != "" {
		t.Fatalf("a call waiting for its turn: %d calls, reason %q", l.calls.len(), l.reason)
	}
	l.closeGaps()
	if l.calls.len() != 5 || l.calls.at(4).Seq != 13 || !strings.Contains(l.reason, "calls 11 to 12 are missing") {
		t.Errorf("after a gap: %d calls, reason %q", l.calls.len(), l.reason)
	}
	l2 := &openLog{firstQ: 1, nextQ: 1}
	l2.add(1, &format.Syscall{Nr: unix.SYS_MMAP, Ret: 0x7000, Args: [6]uint64{0, 4096, 1, unix.MAP_PRIVATE, 3, 0}}, "", clockNone, 0)
	l2.add(2, &format.Syscall{Nr: 100000}, "", clockNone, 0)
	if len(l2.mmaps) != 1 || l2.mmaps[0] != 0 || !strings.Contains(l2.reason, "not in the syscall table") {
		t.Errorf("mmaps %v, reason %q", l2.mmaps, l2.reason)
	}
	l3 := &openLog{firstQ: 5, nextQ: 5, delta: 4, restarts: map[int]*proc.SyscallInfo{0: {Nr: unix.SYS_NANOSLEEP, Args: [6]uint64{0x10, 0x20}}}}
	l3.add(5, &format.Syscall{Nr: unix.SYS_RESTART_SYSCALL}, "", clockNone, 0)
	l3.add(6, &format.Syscall{Nr: unix.SYS_RESTART_SYSCALL}, "", clockNone, 0)
	if c0, c1 := l3.calls.at(0), l3.calls.at(1); c0.Nr != unix.SYS_NANOSLEEP || c0.Args[0] != 0x10 || c1.Nr != unix.SYS_RESTART_SYSCALL {
		t.Errorf("restart_syscall: %+v %+v", c0, c1)
	}
}

// A call that reaches the ring before its turn waits with its own copy of
// its outputs: the builder's buffers and the ring buffer's memory it aliased
// are reused by the calls read after it.
func TestOpenLogEarlyCallOwnsOutputs(t *testing.T) {
	l := &openLog{firstQ: 1, nextQ: 1}
	buf := []byte("request one")
	l.add(2, &format.Syscall{Nr: unix.SYS_READ, Ret: int64(len(buf)), Out: []format.OutBuf{{Addr: 0x1000, Data: buf}}}, "", clockNone, 0)
	copy(buf, "XXXXXXXXXXX")
	l.add(1, &format.Syscall{Nr: unix.SYS_GETPID}, "", clockNone, 0)
	if l.calls.len() != 2 || string(l.calls.at(1).Out[0].Data) != "request one" {
		t.Fatalf("the early call's output reads %q", l.calls.at(1).Out[0].Data)
	}
}

// The reader builds the record of a common call without allocating: a busy
// server makes hundreds of thousands a second, and each allocation is work
// for the collector on the CPUs the server needs.
func TestBuildSyscallDoesNotAllocate(t *testing.T) {
	calls := []*pendingCall{
		{hdr: bpf.TprecTpSyscall{Flags: uint8(bpf.TprecTpRecFlagsTP_F_END), Nr: unix.SYS_READ, Ret: 45, Args: [6]uint64{12, 0x5000, 20474}}, have: true, end: true,
			items: []item{{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x5000, data: bytes.Repeat([]byte("x"), 45)}}},
		{hdr: bpf.TprecTpSyscall{Flags: uint8(bpf.TprecTpRecFlagsTP_F_END), Nr: unix.SYS_CLOCK_GETTIME, Args: [6]uint64{1, 0x1000}}, have: true, end: true,
			items: []item{{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x1000, data: make([]byte, 16)}}},
		{hdr: bpf.TprecTpSyscall{Flags: uint8(bpf.TprecTpRecFlagsTP_F_END), Nr: unix.SYS_WRITE, Ret: 5, Args: [6]uint64{12, 0x6000, 5}}, have: true, end: true},
	}
	var b builder
	var rec format.Syscall
	for _, c := range calls { // first use sizes the reused lists
		if problem := b.build(&c.hdr, c.items, c.end, &rec); problem != "" || (rec.Nr != unix.SYS_WRITE && len(rec.Out) != 1) {
			t.Fatalf("%+v: %q", rec, problem)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, c := range calls {
			b.build(&c.hdr, c.items, c.end, &rec)
		}
	})
	if allocs != 0 {
		t.Errorf("building a read, a clock_gettime and a write allocates %.1f times", allocs)
	}
}
