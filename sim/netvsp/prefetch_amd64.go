//go:build !purego

package netvsp

// prefetchw128 asks the CPU to fetch the 128 bytes at p for writing. A
// hint only: it never faults and changes no memory.
//
//go:noescape
func prefetchw128(p *byte)
