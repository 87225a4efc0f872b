//go:build race && amd64 && !purego

package vmbus

// Under the race detector bulkCopy is the builtin copy, which the detector
// instruments itself. Telling it about the assembly copy's accesses
// (runtime.RaceReadRange) would move every caller's stack buffer to the
// heap and break the ring's allocation budget; the assembly is covered by
// the tests without -race.
const raceBuild = true
