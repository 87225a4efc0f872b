//go:build !purego

#include "textflag.h"

// k2 = 0xD1B54A32D192ED03 and 2*k2 mod 2^64 = 0xA36A9465A325DA06, the step
// between the words of the payload pattern.
#define K2 $0xD1B54A32D192ED03
#define K2X2 $0xA36A9465A325DA06

// SETUP loads X0..X3 with the words v .. v+7*k2 (two per register) and X4
// with the step 8*k2 in both lanes; v is in AX.
#define SETUP \
	MOVQ AX, X0 \
	MOVQ K2, BX \
	ADDQ BX, AX \
	MOVQ AX, X5 \
	PUNPCKLQDQ X5, X0 \
	MOVQ K2X2, BX \
	MOVQ BX, X4 \
	PUNPCKLQDQ X4, X4 \
	MOVO X0, X1 \
	PADDQ X4, X1 \
	MOVO X1, X2 \
	PADDQ X4, X2 \
	MOVO X2, X3 \
	PADDQ X4, X3 \
	PADDQ X4, X4 \
	PADDQ X4, X4

// func fill8(p *uint64, n int, v uint64)
TEXT ·fill8(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ v+16(FP), AX
	TESTQ CX, CX
	JLE done
	SETUP

loop:
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	PADDQ X4, X0
	PADDQ X4, X1
	PADDQ X4, X2
	PADDQ X4, X3
	ADDQ $64, DI
	DECQ CX
	JNZ loop

done:
	RET

// func diff8(p *uint64, n int, v uint64) uint64
TEXT ·diff8(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ v+16(FP), AX
	XORQ DX, DX
	TESTQ CX, CX
	JLE done
	SETUP
	PXOR X6, X6
	PXOR X7, X7

loop:
	MOVOU 0(DI), X8
	MOVOU 16(DI), X9
	MOVOU 32(DI), X10
	MOVOU 48(DI), X11
	PXOR X0, X8
	PXOR X1, X9
	PXOR X2, X10
	PXOR X3, X11
	POR X8, X6
	POR X9, X7
	POR X10, X6
	POR X11, X7
	PADDQ X4, X0
	PADDQ X4, X1
	PADDQ X4, X2
	PADDQ X4, X3
	ADDQ $64, DI
	DECQ CX
	JNZ loop
	POR X7, X6
	MOVQ X6, DX
	PSHUFD $0xEE, X6, X6
	MOVQ X6, BX
	ORQ BX, DX

done:
	MOVQ DX, ret+24(FP)
	RET
