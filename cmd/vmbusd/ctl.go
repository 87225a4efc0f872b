package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/control"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/pcapfilter"
	"github.com/vmbusd/vmbusd/internal/pcapng"
)

// controlFlag adds --control with the default the daemon uses.
func controlFlag(fs *pflag.FlagSet) *string {
	return envString(fs, "control", "VMBUSD_CONTROL", config.DefaultControlSocket, "the daemon's control socket")
}

func getJSON(ctx context.Context, sock, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := control.NewClient(sock).Get(ctx, path)
	if err != nil {
		return err
	}
	defer body.Close()
	return json.NewDecoder(body).Decode(v)
}

func runStatus(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "status", "status [--control PATH] [--json]")
	sock := controlFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var st daemon.Status
	if err := getJSON(ctx, *sock, "/v1/status", &st); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, st)
	}
	fmt.Fprintf(out, "vmbusd pid %d, up %s, root %s", st.PID, time.Since(st.Started).Round(time.Second), st.Root)
	if st.Metrics != "" {
		fmt.Fprintf(out, ", metrics http://%s/metrics", st.Metrics)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NIC\tSTATE\tSINCE\tINSTANCE\tMAC\tMTU\tQUEUES\tLINK\tATTACH\tMODE\tRESETS\tRESCINDS")
	for _, n := range st.NICs {
		link := "down"
		if n.LinkUp {
			link = fmt.Sprintf("up %s", humanBits(n.LinkSpeed))
		}
		attach := n.Attach
		if n.Attach == "tap" {
			attach = "tap " + n.TAP
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\n", n.Name, n.State,
			time.Since(n.Since).Round(time.Second), dash(n.Instance), dash(n.MAC), n.MTU, n.Queues, link, attach, n.Mode, n.Resets, n.Rescinds)
	}
	tw.Flush()
	for _, n := range st.NICs {
		if n.Error != "" {
			fmt.Fprintf(out, "%s: %s\n", n.Name, n.Error)
		}
	}
	printVFTable(out, st.NICs)
	if len(st.HvSock) > 0 {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HV_SOCK FORWARD\tACCEPTED\tACTIVE\tBYTES IN\tBYTES OUT\tDIAL FAILED")
		for _, f := range st.HvSock {
			t := f.Totals
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", f.Name, t.Accepted, t.Active, t.BytesIn, t.BytesOut, t.DialFailed)
		}
		tw.Flush()
	}
	return nil
}

// printVFTable shows each NIC's VF pairing and data path, one line per
// NIC whose vf is not off.
func printVFTable(out io.Writer, nics []daemon.NICStatus) {
	var rows []daemon.NICStatus
	for _, n := range nics {
		if n.VF.Mode != "off" {
			rows = append(rows, n)
		}
	}
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NIC\tVF MODE\tVF STATE\tPATH\tVF IFNAME\tPCI\tDRIVER\tMATCHED BY\tXDP\tRX SYN/VF PKTS\tTX SYN/VF PKTS\tSWITCHES")
	for _, n := range rows {
		v := n.VF
		xdp := "-"
		if v.XDPAttach != "" {
			xdp = v.XDPAttach + " " + v.XDPBind
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%d\n", n.Name, v.Mode, v.State, dash(v.Path),
			dash(v.IfName), dash(v.PCI), dash(v.Driver), dash(v.MatchedBy), xdp,
			v.Paths.Synthetic.RxPackets, v.Paths.VF.RxPackets, v.Paths.Synthetic.TxPackets, v.Paths.VF.TxPackets, v.Switches)
	}
	tw.Flush()
	for _, n := range rows {
		if n.VF.LastError != "" && n.VF.State != "active" {
			fmt.Fprintf(out, "%s: VF: %s\n", n.Name, n.VF.LastError)
		}
	}
}

// printPaths shows a NIC's traffic per path, its time on each and its
// switches by reason.
func printPaths(out io.Writer, v daemon.VFStatus) {
	fmt.Fprintf(out, "  data path: %s (vf %s, %s)\n", dash(v.Path), v.Mode, v.State)
	for _, p := range []struct {
		name string
		c    daemon.PathCounters
		secs float64
	}{{"synthetic", v.Paths.Synthetic, v.SecondsSynthetic}, {"vf", v.Paths.VF, v.SecondsVF}} {
		fmt.Fprintf(out, "    %-9s rx %d pkts %d bytes, tx %d pkts %d bytes, tx dropped %d; %.1f s\n", p.name,
			p.c.RxPackets, p.c.RxBytes, p.c.TxPackets, p.c.TxBytes, p.c.TxDropped, p.secs)
	}
	if v.Switches > 0 {
		reasons := make([]string, 0, len(v.SwitchReasons))
		for r, n := range v.SwitchReasons {
			if n > 0 {
				reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
			}
		}
		slices.Sort(reasons)
		fmt.Fprintf(out, "    switches %d (%s)\n", v.Switches, strings.Join(reasons, ", "))
	}
}

func runCapture(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "capture", "capture [-i DEVICE] [-Q in|out|inout] [--queue N] [-c COUNT] [-s SNAPLEN] [-w FILE|-] [filter expression...]")
	sock := controlFlag(fs)
	dev := fs.StringP("interface", "i", "", "the NIC: its configured device, instance GUID, TAP name or index (default: the first NIC)")
	file := fs.StringP("write", "w", "-", "write pcapng to FILE, or - for standard output, which must not be a terminal (pipe it: '| tshark -r -', '| wireshark -k -i -')")
	dir := fs.StringP("direction", "Q", "inout", "direction: in (from the host), out (to the host) or inout")
	queue := fs.Int("queue", -1, "capture only this queue (-1: all)")
	quiet := fs.BoolP("quiet", "q", false, "not a queue flag: the queue is --queue N")
	fs.MarkHidden("quiet")
	snaplen := fs.IntP("snapshot-length", "s", 0, "bytes kept per frame (0: whole frames)")
	count := fs.IntP("count", "c", 0, "stop after this many frames (0: until interrupted)")
	words, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *quiet:
		return fmt.Errorf("%w: -q is tcpdump's quiet flag, which vmbusd capture does not have; a queue is --queue N", errUsage)
	case *queue < -1:
		return fmt.Errorf("%w: --queue %d: want a queue number, or -1 for every queue", errUsage, *queue)
	case *snaplen < 0 || *count < 0:
		return fmt.Errorf("%w: -s and -c must not be negative", errUsage)
	}
	direction, err := daemon.ParseDirection(*dir)
	if err != nil {
		return fmt.Errorf("%w: -Q: %v", errUsage, err)
	}
	// The filter is compiled here too, so that a typo is reported before
	// anything starts (the daemon compiles it again for its data path).
	expr := strings.Join(words, " ")
	if expr != "" {
		if _, err := pcapfilter.New(expr, pcapfilter.LinkEthernet, *snaplen); err != nil {
			return fmt.Errorf("%w: filter %q: %v", errUsage, expr, err)
		}
	}
	if *file == "-" && isTerminal(out) {
		return fmt.Errorf("%w: refusing to write binary pcapng to a terminal: give -w FILE, or pipe it (vmbusd capture ... | tshark -r -)", errUsage)
	}
	q := url.Values{"queue": {fmt.Sprint(*queue)}, "direction": {direction.String()}, "snaplen": {fmt.Sprint(*snaplen)},
		"count": {fmt.Sprint(*count)}}
	if *dev != "" {
		q.Set("device", *dev)
	}
	if expr != "" {
		q.Set("filter", expr)
	}
	body, err := control.NewClient(*sock).Get(ctx, "/v1/capture?"+q.Encode())
	if err != nil {
		return err
	}
	defer body.Close()
	w := out
	if *file != "-" {
		f, err := os.Create(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	sum, err := copyCapture(w, body, func(name string) {
		fmt.Fprintf(os.Stderr, "vmbusd capture: listening on %s, direction %s, %s, snapshot length %s\n", name, direction,
			queueName(*queue), snapName(*snaplen))
	})
	if ctx.Err() != nil {
		err = nil // interrupted by the user: the capture is complete up to here
	}
	// As tcpdump ends: what was written, what the filter passed and what
	// could not be kept.
	fmt.Fprintf(os.Stderr, "%d packets captured, %d received by filter, %d dropped\n", sum.captured,
		max(sum.stats.Accepted, sum.captured), sum.stats.Dropped)
	if err != nil {
		return fmt.Errorf("the capture stream broke off: %w", err)
	}
	return nil
}

// captureSummary is what a capture stream said.
type captureSummary struct {
	captured uint64       // packets written
	stats    pcapng.Stats // the stream's last statistics
}

// copyCapture passes a capture stream to w block by block, counting the
// packets and keeping the statistics blocks back: the daemon sends one
// whenever its counters change, and the output gets only the last, at its
// end (as dumpcap writes one per interface when it stops). listening is
// called with the interface's name once its description arrives.
func copyCapture(w io.Writer, stream io.Reader, listening func(name string)) (captureSummary, error) {
	var sum captureSummary
	var last []byte
	r := pcapng.NewReader(stream)
	for {
		b, err := r.Next()
		if err != nil {
			if last != nil {
				if _, werr := w.Write(last); werr != nil && err == io.EOF {
					err = werr
				}
			}
			if err == io.EOF {
				err = nil
			}
			return sum, err
		}
		switch b.Type {
		case pcapng.BlockInterfaceStats:
			if _, st, err := b.Stats(); err == nil {
				sum.stats = st
				last = append(last[:0], b.Raw...)
			}
			continue
		case pcapng.BlockInterface:
			if name, err := b.InterfaceName(); err == nil {
				listening(name)
			}
		case pcapng.BlockEnhancedPacket:
			sum.captured++
		}
		if _, err := w.Write(b.Raw); err != nil {
			return sum, err
		}
	}
}

// parseInterleaved parses flags wherever they are among the arguments,
// as GNU getopt does (tcpdump -i eth1 udp -c 5), and returns the other
// words in order; everything after "--" is a word.
func parseInterleaved(fs *pflag.FlagSet, args []string) ([]string, error) {
	if err := parseArgs(fs, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return fs.Args(), nil
}

func queueName(q int) string {
	if q < 0 {
		return "every queue"
	}
	return fmt.Sprintf("queue %d", q)
}

func snapName(n int) string {
	if n == 0 {
		return "262144 bytes"
	}
	return fmt.Sprintf("%d bytes", n)
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func humanBits(bps uint64) string {
	switch {
	case bps >= 1e9:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(bps)/1e9), ".0") + "Gb/s"
	case bps >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(bps)/1e6), ".0") + "Mb/s"
	}
	return fmt.Sprintf("%db/s", bps)
}
