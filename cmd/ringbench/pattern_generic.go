//go:build !amd64 || purego

package main

func fillFrom(q []uint64, v uint64)        { fillGo(q, v) }
func diffFrom(q []uint64, v uint64) uint64 { return diffGo(q, v) }
