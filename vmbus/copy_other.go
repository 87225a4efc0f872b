//go:build !amd64 || purego

package vmbus

// bulkCopyMin: elsewhere ring copies use the runtime's copy at every size.
const bulkCopyMin = noBulk

func bulkCopy(dst, src []byte) int { return copy(dst, src) }
