package gdb

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tprec/tprec/format"
)

func TestChecksum(t *testing.T) {
	// From the GDB manual's examples: "$OK#9a" and "$g#67".
	for _, c := range []struct {
		data string
		sum  byte
	}{{"OK", 0x9a}, {"g", 0x67}, {"", 0}} {
		if got := Checksum([]byte(c.data)); got != c.sum {
			t.Errorf("Checksum(%q) = %02x, want %02x", c.data, got, c.sum)
		}
	}
	if got := string(Frame([]byte("OK"))); got != "$OK#9a" {
		t.Errorf("Frame = %q", got)
	}
}

func TestNextToken(t *testing.T) {
	in := []byte("+$g#67-\x03$m10,4#")
	var toks []Token
	for {
		tok, n, err := NextToken(in)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		toks = append(toks, tok)
		in = in[n:]
	}
	if len(toks) != 4 || toks[0].Kind != Ack || string(toks[1].Payload) != "g" || toks[2].Kind != Nack || toks[3].Kind != Interrupt {
		t.Fatalf("tokens %+v", toks)
	}
	if string(in) != "$m10,4#" {
		t.Errorf("an incomplete packet must wait for more bytes, left %q", in)
	}
	// A wrong checksum is a typed error, and the bytes are consumed.
	_, n, err := NextToken([]byte("$g#00"))
	var pe *ProtocolError
	if !errors.Is(err, ErrChecksum) || !errors.As(err, &pe) || n != 5 {
		t.Errorf("bad checksum: n=%d err=%v", n, err)
	}
	if _, _, err := NextToken([]byte("$g#zz")); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad checksum digits: %v", err)
	}
}

func TestEscape(t *testing.T) {
	raw := []byte{'a', '#', '$', '}', '*', 0, 0xff}
	esc := Escape(raw)
	if bytes.ContainsAny(esc, "#$*") {
		t.Errorf("escaped %q still holds a special byte", esc)
	}
	back, err := Unescape(esc)
	if err != nil || !bytes.Equal(back, raw) {
		t.Errorf("round trip %q -> %q -> %q (%v)", raw, esc, back, err)
	}
	if _, err := Unescape([]byte("ab}")); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing escape: %v", err)
	}
}

func TestParseRequest(t *testing.T) {
	for _, c := range []struct {
		in   string
		op   Op
		addr uint64
		n    int
		len  int
	}{
		{"?", OpHaltReason, 0, 0, 0},
		{"g", OpReadRegs, 0, 0, 0},
		{"p10", OpReadReg, 0, 16, 0},
		{"m7fff0000,40", OpReadMem, 0x7fff0000, 0, 0x40},
		{"x1000,8", OpReadMemBin, 0x1000, 0, 8},
		{"M1000,1:00", OpWrite, 0, 0, 0},
		{"G00", OpWrite, 0, 0, 0},
		{"P10=00", OpWrite, 0, 0, 0},
		{"Z0,55c21284d1f9,1", OpInsert, 0x55c21284d1f9, 0, 1},
		{"z2,7ffe0010,8", OpRemove, 0x7ffe0010, 2, 8},
		{"vCont;c:p1.-1", OpContinue, 0, 0, 0},
		{"vCont;s:2a;c", OpStep, 0, 0, 0},
		{"vCont;t", OpStop, 0, 0, 0},
		{"bs", OpReverseStep, 0, 0, 0},
		{"bc", OpReverseCont, 0, 0, 0},
		{"qXfer:features:read:target.xml:0,ffb", OpXferRead, 0, 0, 0xffb},
		{"qSupported:multiprocess+;swbreak+", OpSupported, 0, 0, 0},
		{"QCatchSyscalls:1;1;e7", OpCatchSyscalls, 0, 0, 0},
	} {
		r, err := ParseRequest([]byte(c.in))
		if err != nil || r.Op != c.op || r.Addr != c.addr || r.N != c.n || r.Len != c.len {
			t.Errorf("ParseRequest(%q) = %+v, %v", c.in, r, err)
		}
	}
	for _, c := range []struct {
		in     string
		op     Op
		which  byte
		thread int
	}{{"Hg2a", OpSetThread, 'g', 0x2a}, {"Hc-1", OpSetThread, 'c', -1}, {"Hg0", OpSetThread, 'g', 0}, {"T4d2", OpThreadAlive, 0, 0x4d2}} {
		if r, err := ParseRequest([]byte(c.in)); err != nil || r.Op != c.op || r.Which != c.which || r.Thread != c.thread {
			t.Errorf("ParseRequest(%q) = %+v, %v", c.in, r, err)
		}
	}
	if r, err := ParseRequest([]byte("qGetTLSAddr:4d2,10,7ffff7fc1160")); err != nil || r.Op != OpTLSAddr || r.Thread != 0x4d2 || r.Addr != 0x10 || r.LM != 0x7ffff7fc1160 {
		t.Errorf("qGetTLSAddr: %+v, %v", r, err)
	}
	r, _ := ParseRequest([]byte("QCatchSyscalls:1;1;e7"))
	if !r.On || len(r.Nrs) != 2 || r.Nrs[1] != 0xe7 {
		t.Errorf("catch syscalls %+v", r)
	}
	for _, bad := range []string{"mzz,1", "m10", "Z0,1", "pxx", "QCatchSyscalls:2", "qXfer:auxv:read::1", "Hgzz", "H", "Tq", "qGetTLSAddr:1,2", "qGetTLSAddr:1,zz,3"} {
		if _, err := ParseRequest([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRequest(%q): %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := ParseRequest([]byte("qTStatus")); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown request: %v", err)
	}
}

func TestSplitWatch(t *testing.T) {
	got, ok := splitWatch(0x1003, 6)
	want := [][2]uint64{{0x1003, 1}, {0x1004, 4}, {0x1008, 1}}
	if !ok || len(got) != len(want) {
		t.Fatalf("splitWatch = %v %v", got, ok)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("piece %d = %v, want %v", i, got[i], want[i])
		}
	}
	if _, ok := splitWatch(0x1001, 31); ok {
		t.Error("31 unaligned bytes cannot fit 4 debug registers")
	}
}

func TestXferChunk(t *testing.T) {
	data := []byte("abcdef")
	if got := xferChunk(data, 0, 4); got != "mabcd" {
		t.Errorf("first chunk %q", got)
	}
	if got := xferChunk(data, 4, 4); got != "lef" {
		t.Errorf("last chunk %q", got)
	}
	if got := xferChunk(data, 6, 4); got != "l" {
		t.Errorf("past the end %q", got)
	}
}

func TestTargetXMLRegisterCount(t *testing.T) {
	// The 'g' reply and target.xml must agree: 60 registers without AVX
	// (gdb's amd64 Linux numbering up to gs_base), 76 with the ymm halves.
	if n := len(registers(false)); n != 60 {
		t.Errorf("%d registers without AVX", n)
	}
	if n := len(registers(true)); n != 76 {
		t.Errorf("%d registers with AVX", n)
	}
	x := make([]byte, 1024)
	for i := range registers(true) {
		if regBytes(i, format.Regs{}, x) == nil {
			t.Errorf("register %d has no encoding", i)
		}
	}
}
