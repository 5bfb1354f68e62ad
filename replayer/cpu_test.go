package replayer

import (
	"slices"
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
)

// A SIGILL the recording did not have names the instruction's kind, and the
// extensions the recording CPU had that this one lacks.
func TestIllegalHint(t *testing.T) {
	for _, c := range []struct {
		code []byte
		want string
	}{
		{[]byte{0x62, 0xe1, 0xfe, 0x28, 0x6f, 0x06}, "AVX-512"},       // vmovdqu64 ymm16, [rsi]
		{[]byte{0x67, 0x62, 0xe1, 0xfe, 0x28, 0x6f, 0x06}, "AVX-512"}, // with an address-size prefix
		{[]byte{0xc5, 0xfe, 0x6f, 0x06}, "AVX one (VEX"},              // vmovdqu ymm0, [rsi]
		{[]byte{0xc4, 0xe2, 0x7d, 0x58, 0xc0}, "AVX one (VEX"},        // vpbroadcastd
		{[]byte{0xf3, 0x48, 0x0f, 0xb8, 0xc0}, "popcnt"},              // popcnt rax, rax
		{[]byte{0x48, 0x0f, 0xc7, 0xf0}, "rdrand"},                    // rdrand rax (REX.W)
		{[]byte{0x0f, 0xc7, 0xf8}, "0f c7 f8"},                        // rdseed eax, which the decoder does not know: its bytes
	} {
		got := illegalHint(c.code, nil)
		if !strings.HasPrefix(got, "the instruction is ") || !strings.Contains(got, c.want) {
			t.Errorf("% x: %q, want it to name %q", c.code, got, c.want)
		}
	}
	// The missing extensions named are those of the instruction's
	// encoding only, or the one of its name.
	evex := []byte{0x62, 0xe1, 0xfe, 0x28, 0x6f, 0x06}
	missing := []string{"avx2", "avx512bw", "avx512f", "hle", "rtm", "sha_ni", "xsavec"}
	for _, c := range []struct {
		code []byte
		want string
	}{
		{evex, "AVX-512 one (EVEX-encoded), and this CPU lacks avx512bw, avx512f, which"},
		{[]byte{0xc5, 0xfe, 0x6f, 0x06}, "AVX one (VEX-encoded), and this CPU lacks avx2, avx512bw, avx512f, which"},
		// xsavec [rsp+0x40], in glibc's lazy-binding trampoline, and
		// with REX.W.
		{[]byte{0x0f, 0xc7, 0x64, 0x24, 0x40}, "the instruction is xsavec, and this CPU lacks xsavec, which"},
		{[]byte{0x48, 0x0f, 0xc7, 0x64, 0x24, 0x40}, "the instruction is xsavec64, and this CPU lacks xsavec, which"},
		// xtest, which glibc's *_rtm string functions end in: RTM (or
		// HLE), not the rest.
		{[]byte{0x0f, 0x01, 0xd6}, "the instruction is xtest, and this CPU lacks hle, rtm, which"},
		// xbegin rel32: RTM alone.
		{[]byte{0xc7, 0xf8, 0x10, 0x00, 0x00, 0x00}, "the instruction is xbegin, and this CPU lacks rtm, which"},
		// rdseed eax, unknown to the decoder: every missing extension.
		{[]byte{0x0f, 0xc7, 0xf8}, "this CPU lacks avx2, avx512bw, avx512f, hle, rtm, sha_ni, xsavec, which"},
	} {
		if got := illegalHint(c.code, missing); !strings.Contains(got, c.want) {
			t.Errorf("% x: %q, want %q", c.code, got, c.want)
		}
	}
	if got := illegalHint(evex, nil); got != "the instruction is an AVX-512 one (EVEX-encoded)" {
		t.Errorf("nothing missing: %q", got)
	}
}

// xsaveHint speaks when this CPU saves a component the recording CPU's
// layout lacks, and only then.
func TestXSaveHint(t *testing.T) {
	avx := []format.XComponent{{Index: 2, Offset: 576, Size: 256}}
	avx512 := append(slices.Clone(avx), format.XComponent{Index: 5, Offset: 1088, Size: 64},
		format.XComponent{Index: 6, Offset: 1152, Size: 512}, format.XComponent{Index: 7, Offset: 1664, Size: 1024})
	for _, c := range []struct {
		recorded []format.XComponent
		local    uint64
		want     string
	}{
		{avx, 0xe7, "this CPU saves AVX-512 state, which the recording CPU did not"},
		{avx, 0x2e7, "this CPU saves AVX-512 and protection keys state"},
		{avx512, 0xe7, ""},
		{avx512, 0x7, ""},
		{nil, 0xe7, ""}, // a file older than 7.2 names no layout
	} {
		got := xsaveHint(c.recorded, c.local)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("recorded %v, local %#x: %q, want %q", c.recorded, c.local, got, c.want)
		}
	}
}
