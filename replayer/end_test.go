package replayer

import (
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
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
}
