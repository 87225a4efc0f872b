//go:build !purego

package vmbus

import "testing"

func TestBulkThreshold(t *testing.T) {
	for _, c := range []struct {
		erms, fsrm bool
		want       int
	}{{false, false, noBulk}, {true, false, 4096}, {true, true, 2048}} {
		if got := bulkThreshold(c.erms, c.fsrm); got != c.want {
			t.Errorf("erms %v fsrm %v: %d, want %d", c.erms, c.fsrm, got, c.want)
		}
	}
	if bulkCopyMin != noBulk && bulkCopyMin < 64 {
		t.Fatalf("bulkCopyMin %d is below the 64 bytes bulkCopy needs", bulkCopyMin)
	}
}
