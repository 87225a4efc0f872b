//go:build !amd64 || purego

package netvsp

func prefetchw128(*byte) {}
