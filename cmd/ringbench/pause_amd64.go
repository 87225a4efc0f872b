package main

// pause executes the PAUSE instruction: a spin-wait hint that keeps a
// polling core from hammering the cache line it watches (DPDK's rte_pause).
func pause()
