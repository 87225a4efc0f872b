//go:build !purego

#include "textflag.h"

// func repMovsb(dst, src *byte, n int)
TEXT ·repMovsb(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	// Keep the first 64 bytes in registers.
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVQ DI, R8
	// Skip to the next 64-byte boundary of dst: 1 to 64 bytes.
	LEAQ 64(DI), AX
	ANDQ $-64, AX
	SUBQ DI, AX
	ADDQ AX, DI
	ADDQ AX, SI
	SUBQ AX, CX
	REP; MOVSB
	// Then store the head.
	MOVOU X0, 0(R8)
	MOVOU X1, 16(R8)
	MOVOU X2, 32(R8)
	MOVOU X3, 48(R8)
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
