package replayer

import (
	"strings"
	"testing"
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
	// Extensions no CPU has are named as missing here, those of the
	// instruction's encoding only.
	evex := []byte{0x62, 0xe1, 0xfe, 0x28, 0x6f, 0x06}
	got := illegalHint(evex, []string{"avx512nosuchthing", "shanosuchthing", "hypervisor"})
	if !strings.Contains(got, "this CPU lacks avx512nosuchthing, which the recording CPU had") {
		t.Errorf("%q: want avx512nosuchthing, alone, named as missing (not sha..., not of EVEX; not hypervisor, not an instruction set)", got)
	}
	got = illegalHint([]byte{0x0f, 0xc7, 0xf8}, []string{"avx512nosuchthing", "shanosuchthing"})
	if !strings.Contains(got, "this CPU lacks avx512nosuchthing, shanosuchthing, which") {
		t.Errorf("%q: want both missing extensions named for an instruction of unknown kind", got)
	}
}
