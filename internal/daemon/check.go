package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Finding is one result of Check.
type Finding struct {
	Error bool   // false: a warning
	Key   string // the setting, e.g. nic[0].netns; "" for the file as a whole
	Msg   string
}

func (f Finding) String() string {
	kind := "warning"
	if f.Error {
		kind = "error"
	}
	if f.Key == "" {
		return kind + ": " + f.Msg
	}
	return kind + ": " + f.Key + ": " + f.Msg
}

// Check looks at a validated configuration against the running system
// without touching anything (`vmbusd run --check-config`): the root has a
// VMBus, each NIC names a synthetic NIC that exists (and no two name one
// device), its network namespace exists, forward peers and hv_sock
// addresses resolve, the GPA pool it asks for can be had. It reads sysfs,
// /run/netns and DNS; it binds, opens and listens on nothing.
func Check(ctx context.Context, cfg config.Config) []Finding {
	var out []Finding
	add := func(isErr bool, key, format string, args ...any) {
		out = append(out, Finding{Error: isErr, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for _, w := range cfg.Warnings() {
		add(false, "", "%s", w)
	}
	devices := filepath.Join(cfg.Root, "sys/bus/vmbus/devices")
	if _, err := os.Stat(devices); err != nil && len(cfg.NICs) > 0 {
		add(true, "root", "%s: no VMBus here (not a Hyper-V guest, or the simulated host is not running)", devices)
	}
	seen := map[vmbus.GUID]int{}
	for i, n := range cfg.NICs {
		key := fmt.Sprintf("nic[%d]", i)
		g, err := bind.Identify(cfg.Root, cfg.State(), n.Device)
		switch {
		case err != nil && isGUID(n.Device):
			add(false, key+".device", "%s is not offered now; the daemon will wait for it", n.Device)
		case err != nil:
			add(true, key+".device", "%v", err)
		default:
			if j, dup := seen[g]; dup {
				add(true, key+".device", "%q is the same device (%s) as nic[%d] (%q)", n.Device, g, j, cfg.NICs[j].Device)
			}
			seen[g] = i
			if dev, err := vmbus.LookupDevice(cfg.Root, g); err == nil && dev.Class != vmbus.ClassNetwork {
				add(true, key+".device", "%s is a %s device, not a synthetic NIC", n.Device, dev.ClassName())
			}
		}
		if n.Attach == config.AttachTAP && n.NetNS != "" {
			if err := checkNetns(n.NetNS); err != nil {
				add(true, key+".netns", "%v", err)
			}
		}
	}
	for i, h := range cfg.HvSock {
		key := fmt.Sprintf("hvsock[%d]", i)
		if h.To.IsValid() {
			if f, bad := checkAddr(ctx, h.To, false); f != "" {
				add(bad, key+".to", "%s", f)
			}
		}
		if h.Listen.IsValid() {
			if f, bad := checkAddr(ctx, h.Listen, true); f != "" {
				add(bad, key+".listen", "%s", f)
			}
		}
	}
	switch cfg.GPA.Pool {
	case config.GPASim:
		if _, err := os.Stat(filepath.Join(cfg.Root, "dev/guestmem")); err != nil {
			add(true, "gpa.pool", "\"sim\": no simulated guest memory: %v", err)
		}
	case config.GPAHugepage:
		if n := hugepagesTotal(); n == 0 {
			add(true, "gpa.pool", "\"hugepage\": no hugepages are reserved (scripts/vmbus-hugepages)")
		}
	}
	return out
}

func isGUID(s string) bool {
	_, err := vmbus.ParseGUID(s)
	return err == nil
}

// checkAddr resolves a forward's address: a tcp host must resolve, a unix
// socket's directory must exist (for listen), and something should be
// listening at a unix address forwarded to (a warning only: it may start
// later). It returns "" when all is well.
func checkAddr(ctx context.Context, a config.Addr, listen bool) (string, bool) {
	switch a.Network {
	case "tcp":
		host, _, _ := net.SplitHostPort(a.Address)
		if host == "" {
			return "", false
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
			return fmt.Sprintf("%s: host %q does not resolve: %v", a, host, err), true
		}
	case "unix":
		if _, err := os.Stat(filepath.Dir(a.Address)); err != nil {
			return fmt.Sprintf("%s: directory %s: %v", a, filepath.Dir(a.Address), err), true
		}
		if !listen {
			if st, err := os.Stat(a.Address); err != nil || st.Mode()&os.ModeSocket == 0 {
				return fmt.Sprintf("%s: nothing listens there yet", a), false
			}
		}
	}
	return "", false
}

// hugepagesTotal reads HugePages_Total from /proc/meminfo.
func hugepagesTotal() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "HugePages_Total:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
