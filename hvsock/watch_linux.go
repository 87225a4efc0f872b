package hvsock

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Offers of hv_sock channels reach the VMBus transport as devices under
// R/sys/bus/vmbus/devices. A real offer carries if_type (the service id),
// if_instance (the endpoint id), the TLNPI flag and, in its pipe area,
// whether the host initiated the connection (docs/protocol/hvsock.md §1.2). sysfs shows
// the first two as class_id and device_id; the simulated host adds
// chn_flags and is_for_guest_accept for the other two (sim/hvsockhost/hvsock.go).
//
// One watcher per root follows the directory for every listener and dialer
// of the process: inotify when the file system supports it, and a rescan
// every scanInterval regardless (the real sysfs raises no inotify events
// for devices the kernel adds). Each offer is handed to at most one
// subscriber, the first whose filter matches; an offer nobody wants stays
// unopened, and the host rescinds it after its open timeout, as with Linux.

// scanInterval is the fallback rescan period.
const scanInterval = 20 * time.Millisecond

// tlnpiProviderOffer is VMBUS_CHANNEL_TLNPI_PROVIDER_OFFER in chn_flags:
// the offer is an hv_sock channel (is_hvsock_offer).
const tlnpiProviderOffer = 0x2000

// offer is an hv_sock channel offer as sysfs shows it.
type offer struct {
	name           string     // directory name under devices/
	class          vmbus.GUID // if_type: the service id
	instance       vmbus.GUID // if_instance: the endpoint id
	forGuestAccept bool       // the host connected to a guest listener
}

// remotePort is the port a host-initiated connection comes from: Data1 of
// the host's endpoint id (hvs_open_connection).
func (o offer) remotePort() uint32 { return binary.BigEndian.Uint32(o.instance[:4]) }

// subscriber receives the offers its match accepts, on the watcher's
// goroutine: deliver must not block.
type subscriber struct {
	match   func(offer) bool
	deliver func(offer)
}

type busWatcher struct {
	root, dir string
	log       *slog.Logger
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}

	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	known map[string]*watchEntry
	// claimed holds the devices handed to a subscriber. It outlives the
	// watcher (it is the root's, in watchers.claims): a listener that
	// comes back must not be handed a channel a connection still has.
	claimed map[string]bool
}

type watchEntry struct {
	off    offer
	hvsock bool // a TLNPI offer
}

var watchers struct {
	mu     sync.Mutex
	m      map[string]*busWatcher
	claims map[string]map[string]bool // root -> device names handed out
}

// watch subscribes s to the offers under root and returns the function
// that unsubscribes it; the watcher runs while it has subscribers.
func watch(root string, log *slog.Logger, s *subscriber) (cancel func()) {
	watchers.mu.Lock()
	defer watchers.mu.Unlock()
	if watchers.m == nil {
		watchers.m = map[string]*busWatcher{}
		watchers.claims = map[string]map[string]bool{}
	}
	w := watchers.m[root]
	if w == nil {
		claimed := watchers.claims[root]
		if claimed == nil {
			claimed = map[string]bool{}
			watchers.claims[root] = claimed
		}
		w = &busWatcher{root: root, dir: filepath.Join(root, "sys", "bus", "vmbus", "devices"), log: log,
			kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
			subs: map[*subscriber]struct{}{}, known: map[string]*watchEntry{}, claimed: claimed}
		watchers.m[root] = w
		go w.run()
	}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	w.poke()
	return func() {
		watchers.mu.Lock()
		defer watchers.mu.Unlock()
		w.mu.Lock()
		delete(w.subs, s)
		last := len(w.subs) == 0
		w.mu.Unlock()
		if last && watchers.m[root] == w {
			delete(watchers.m, root)
			close(w.stop)
			<-w.done
		}
	}
}

func (w *busWatcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run follows the devices directory until stopped.
func (w *busWatcher) run() {
	defer close(w.done)
	w.log.Debug("hvsock: offer watcher started", "dir", w.dir)
	defer w.log.Debug("hvsock: offer watcher stopped", "dir", w.dir)
	var ino *os.File
	if fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err == nil {
		ino = os.NewFile(uintptr(fd), "inotify")
		defer ino.Close()
		if _, err := unix.InotifyAddWatch(fd, w.dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE|unix.IN_MOVED_FROM); err != nil {
			ino.Close()
			ino = nil
		}
	}
	if ino != nil {
		go w.readInotify(ino)
	}
	// The rescan is a poll backing up inotify, not a timeout: real time.
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-t.C:
		}
		w.scan()
		t.Reset(scanInterval)
	}
}

// readInotify forgets removed entries at once (so that a device removed
// and offered again under the same name is seen as new) and pokes the scan
// for any event, until the file is closed.
func (w *busWatcher) readInotify(f *os.File) {
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return // closed
		}
		var gone []string
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nlen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			end := min(off+unix.SizeofInotifyEvent+nlen, n)
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:end], "\x00"))
			if mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 {
				gone = append(gone, name)
			}
			off = end
		}
		w.forget(gone)
		w.poke()
	}
}

func (w *busWatcher) forget(names []string) {
	w.mu.Lock()
	for _, n := range names {
		delete(w.known, n)
		delete(w.claimed, n)
	}
	w.mu.Unlock()
}

// scan reads new devices and hands unclaimed hv_sock offers to subscribers.
func (w *busWatcher) scan() {
	ents, err := os.ReadDir(w.dir)
	if err != nil {
		return
	}
	present := make(map[string]bool, len(ents))
	type delivery struct {
		s *subscriber
		o offer
	}
	var out []delivery
	w.mu.Lock()
	for _, e := range ents {
		name := e.Name()
		present[name] = true
		if _, ok := w.known[name]; ok {
			continue
		}
		off, hv, err := readOffer(filepath.Join(w.dir, name))
		if err != nil {
			continue // vanished or half-written: look again next time
		}
		off.name = name
		w.known[name] = &watchEntry{off: off, hvsock: hv}
	}
	for name := range w.claimed {
		if !present[name] {
			delete(w.claimed, name)
		}
	}
	for name, e := range w.known {
		if !present[name] {
			delete(w.known, name)
			continue
		}
		if !e.hvsock || w.claimed[name] {
			continue
		}
		for s := range w.subs {
			if s.match(e.off) {
				w.claimed[name] = true
				out = append(out, delivery{s, e.off})
				break
			}
		}
	}
	w.mu.Unlock()
	for _, d := range out {
		d.s.deliver(d.o)
	}
}

// readOffer reads what the guest needs of an offer from its device
// directory; hv is false for a device that is not an hv_sock channel.
func readOffer(dir string) (o offer, hv bool, err error) {
	flags, err := os.ReadFile(filepath.Join(dir, "chn_flags"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return offer{}, false, serr
		}
		return offer{}, false, nil // not an hv_sock offer
	}
	if err != nil {
		return offer{}, false, err
	}
	f, err := strconv.ParseUint(strings.TrimSpace(string(flags)), 0, 16)
	if err != nil {
		return offer{}, false, fmt.Errorf("chn_flags %q: %w", flags, err)
	}
	if f&tlnpiProviderOffer == 0 {
		return offer{}, false, nil
	}
	for _, a := range []struct {
		name string
		dst  *vmbus.GUID
	}{{"class_id", &o.class}, {"device_id", &o.instance}} {
		b, err := os.ReadFile(filepath.Join(dir, a.name))
		if err != nil {
			return offer{}, false, err
		}
		if *a.dst, err = vmbus.ParseGUID(string(b)); err != nil {
			return offer{}, false, err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "is_for_guest_accept"))
	if err != nil {
		return offer{}, false, err
	}
	o.forGuestAccept = strings.TrimSpace(string(b)) == "1"
	return o, true, nil
}

// openOffer opens an offered hv_sock channel with the given ring sizes,
// once uio_hv_generic has bound it (the device appears first).
func openOffer(ctx context.Context, cfg *Config, o offer, snd, rcv int) (*vmbus.Handle, error) {
	root := cfg.root()
	wait := time.Millisecond
	for {
		dev, err := vmbus.LookupDevice(root, o.instance)
		if err == nil && dev.UIO != "" {
			return vmbus.Open(dev, vmbus.Options{
				RingSizes: [2]uint32{uint32(snd), uint32(rcv)},
				MaxPacket: wire.MaxPacketBody,
				Mode:      cfg.Mode,
				Logger:    cfg.Logger,
			})
		}
		if err != nil && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("hvsock: offer %s rescinded before it was opened: %w", o.instance, err)
		}
		// A poll of sysfs while uio_hv_generic binds, not a timeout
		// (ctx is): real time, so that a fake Config.Clock does not
		// stall it.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, scanInterval)
	}
}
