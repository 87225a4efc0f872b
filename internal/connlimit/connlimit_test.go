package connlimit

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

// serve accepts on l and keeps every connection open until the client
// closes it, recording which arrived.
func serve(l net.Listener, got chan<- net.Conn) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		got <- c
		go func() {
			io.Copy(io.Discard, c)
			c.Close()
		}()
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (read EOF or reset).
func closedByServer(t *testing.T, c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	return err != nil
}

func TestTotalLimitClosesTheExcessAndFreesSlots(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan string, 100)
	l := New(raw, Config{Max: 3, OnRefuse: func(_ net.Conn, _, reason string) { refused <- reason }})
	defer l.Close()
	got := make(chan net.Conn, 100)
	go serve(l, got)
	var kept []net.Conn
	for range 3 {
		kept = append(kept, dial(t, raw.Addr().String()))
		<-got
	}
	extra := dial(t, raw.Addr().String())
	if r := <-refused; r != ReasonTotal {
		t.Fatalf("reason %q", r)
	}
	if !closedByServer(t, extra) {
		t.Fatal("the fourth connection was not closed")
	}
	if st := l.Stats(); st.Active != 3 || st.RefusedTotal != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A slot frees when a served connection closes.
	kept[0].Close()
	testutil.WaitFor(t, 0, func() bool { return l.Stats().Active == 2 }, "the slot to be freed")
	dial(t, raw.Addr().String())
	select {
	case <-got:
	case r := <-refused:
		t.Fatalf("refused (%s) with a free slot", r)
	}
}

func TestPerClientLimit(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Clients told apart by their source port's parity, standing for uids.
	client := func(c net.Conn) string { return []string{"even", "odd"}[c.RemoteAddr().(*net.TCPAddr).Port%2] }
	refused := make(chan string, 100)
	l := New(raw, Config{Max: 100, PerClient: 2, Client: client, OnRefuse: func(_ net.Conn, cl, reason string) { refused <- cl + " " + reason }})
	defer l.Close()
	got := make(chan net.Conn, 100)
	go serve(l, got)
	counts := map[string]int{}
	for counts["even"] < 3 || counts["odd"] < 3 {
		c := dial(t, raw.Addr().String())
		counts[client(localAsRemote(c))]++
		select {
		case <-got:
		case r := <-refused:
			if r != client(localAsRemote(c))+" "+ReasonPerClient {
				t.Fatalf("refusal %q", r)
			}
		}
	}
	if st := l.Stats(); st.Active != 4 || st.RefusedPerClient < 2 {
		t.Fatalf("stats %+v", st)
	}
}

// localAsRemote presents a client connection as the server sees it.
type flipped struct{ net.Conn }

func (f flipped) RemoteAddr() net.Addr { return f.Conn.LocalAddr() }

func localAsRemote(c net.Conn) net.Conn { return flipped{c} }
