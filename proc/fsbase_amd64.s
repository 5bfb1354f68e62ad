#include "textflag.h"

// func rdfsbase() uint64
TEXT ·rdfsbase(SB), NOSPLIT, $0-8
	// rdfsbase rax (F3 REX.W 0F AE /0)
	BYTE $0xF3; BYTE $0x48; BYTE $0x0F; BYTE $0xAE; BYTE $0xC0
	MOVQ AX, ret+0(FP)
	RET
