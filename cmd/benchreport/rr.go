package main

// A TCP request/response latency test in the style of netperf's TCP_RR:
// benchreport re-executes itself inside a network namespace (`ip netns
// exec NS benchreport rr-server|rr-client ...`) as either end.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"time"
)

// rrServerMain echoes every byte on every connection until killed.
func rrServerMain(args []string) int {
	fs := flag.NewFlagSet("rr-server", flag.ContinueOnError)
	addr := fs.String("listen", "0.0.0.0:7001", "address to listen on")
	if fs.Parse(args) != nil {
		return 2
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rr-server:", err)
		return 1
	}
	fmt.Println("READY", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rr-server:", err)
			return 1
		}
		go func() {
			defer c.Close()
			c.(*net.TCPConn).SetNoDelay(true)
			io.Copy(c, c)
		}()
	}
}

// rrResult is what rr-client prints, one JSON line.
type rrResult struct {
	Rounds int     `json:"rounds"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	MeanUs float64 `json:"mean_us"`
}

// rrClientMain sends one byte and waits for it to come back, rounds
// times after a warm-up, and prints the round-trip percentiles.
func rrClientMain(args []string) int {
	fs := flag.NewFlagSet("rr-client", flag.ContinueOnError)
	addr := fs.String("addr", "", "server address")
	rounds := fs.Int("rounds", 2000, "measured round trips")
	warm := fs.Int("warmup", 100, "round trips before measuring")
	if fs.Parse(args) != nil || *addr == "" || *rounds < 1 {
		return 2
	}
	c, err := net.DialTimeout("tcp", *addr, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rr-client:", err)
		return 1
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	b := []byte{'r'}
	rtt := make([]time.Duration, 0, *rounds)
	for i := range *warm + *rounds {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			fmt.Fprintln(os.Stderr, "rr-client:", err)
			return 1
		}
		if _, err := io.ReadFull(c, b); err != nil {
			fmt.Fprintln(os.Stderr, "rr-client:", err)
			return 1
		}
		if i >= *warm {
			rtt = append(rtt, time.Since(t0))
		}
	}
	r := summarizeRTT(rtt)
	json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

func summarizeRTT(rtt []time.Duration) rrResult {
	if len(rtt) == 0 {
		return rrResult{}
	}
	s := slices.Clone(rtt)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return rrResult{Rounds: len(s), P50us: us(percentile(s, 50)), P99us: us(percentile(s, 99)), MeanUs: us(sum / time.Duration(len(s)))}
}

// percentile is the nearest-rank percentile of sorted values.
func percentile[T any](sorted []T, p float64) T {
	i := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
