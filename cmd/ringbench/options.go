package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// options are the flags shared by send and recv.
type options struct {
	host    bool
	cpu     int
	waitUS  int
	timeout float64
	seqOnly bool // -x
	plain   bool // -P, accepted and ignored
}

func (o *options) role() string {
	if o.host {
		return "host"
	}
	return "guest"
}

// parseOptions reads options like getopt("+r:c:w:t:xP"): clustered flags,
// values attached or separate, stop at the first non-option or "--".
func parseOptions(args []string) (*options, []string) {
	o := &options{cpu: -1, timeout: 30}
	for len(args) > 0 {
		a := args[0]
		if a == "--help" || a == "-help" {
			fmt.Print(help)
			os.Exit(0)
		}
		if a == "--" {
			return o, args[1:]
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		args = args[1:]
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 'x':
				o.seqOnly = true
				continue
			case 'P':
				o.plain = true
				continue
			case 'h':
				fmt.Print(help)
				os.Exit(0)
			case 'r', 'c', 'w', 't':
			default:
				usage()
			}
			val := a[j+1:]
			if val == "" {
				if len(args) == 0 {
					usage()
				}
				val, args = args[0], args[1:]
			}
			if !setOption(o, c, val) {
				usage()
			}
			break
		}
	}
	return o, args
}

func setOption(o *options, c byte, val string) bool {
	var err error
	switch c {
	case 'r':
		if val != "guest" && val != "host" {
			return false
		}
		o.host = val == "host"
	case 'c':
		o.cpu, err = strconv.Atoi(val)
	case 'w':
		o.waitUS, err = strconv.Atoi(val)
		err = nonNegative(o.waitUS, err)
	case 't':
		o.timeout, err = strconv.ParseFloat(val, 64)
	}
	return err == nil
}

func nonNegative(v int, err error) error {
	if err == nil && v < 0 {
		return strconv.ErrRange
	}
	return err
}

// parseNum parses a count or size: decimal, 0x hex or 0 octal, with an
// optional K, M or G suffix (powers of 1024).
func parseNum(s string) uint64 {
	orig, shift := s, 0
	if i := strings.IndexAny(s, "KMG"); i >= 0 && i == len(s)-1 {
		shift = 10 * (1 + strings.IndexByte("KMG", s[i]))
		s = s[:i]
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil || v > ^uint64(0)>>shift {
		fatal("bad number '%s'", orig)
	}
	return v << shift
}
