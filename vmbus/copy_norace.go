//go:build !race && amd64 && !purego

package vmbus

const raceBuild = false
