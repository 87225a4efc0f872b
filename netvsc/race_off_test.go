//go:build !race

package netvsc_test

const raceEnabled = false
