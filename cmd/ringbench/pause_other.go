//go:build !amd64

package main

// pause is a no-op where no spin-wait hint is wired up.
func pause() {}
