// Package skipped is in a testdata directory: missing.md §1 is not read.
package skipped
