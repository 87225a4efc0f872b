//go:build !race

package hvsock_test

const raceEnabled = false
