//go:build !purego

#include "textflag.h"

// func prefetchw128(p *byte)
TEXT ·prefetchw128(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW 0(AX); PREFETCHW 64(AX) (0F 0D /1), which the Go
	// assembler does not name.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	BYTE $0x0F; BYTE $0x0D; BYTE $0x48; BYTE $0x40
	RET
