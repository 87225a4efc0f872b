// Package skipped is in a hidden directory: missing.md is not read.
package skipped
