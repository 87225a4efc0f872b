package hvsockhost

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

// The host-side Unix socket front end (hybrid vsock, OpenVMM
// support/hybrid_vsock and vmbus_server hvsock.rs): "CONNECT <port>\n" or
// "CONNECT <service GUID>\n" on the socket SocketBase connects to a guest
// listener; the answer is "OK <n>\n" and then the bytes of the connection.

// maxConnectLine is the longest request line OpenVMM accepts:
// len("CONNECT 00000000-facb-11e6-bd58-64006a7986d3\n").
const maxConnectLine = len("CONNECT 00000000-facb-11e6-bd58-64006a7986d3\n")

// connectLineTimeout bounds how long a front-end client may take to send
// its request line.
const connectLineTimeout = 10 * time.Second

// runFront accepts front-end connections.
func (hv *Host) runFront() {
	hv.acceptLoop(hv.front, "front end", nil, func(c *net.UnixConn) {
		defer hv.wg.Done()
		hv.serveFront(c)
	})
}

// serveFront runs one client's CONNECT and then relays its connection.
func (hv *Host) serveFront(uc *net.UnixConn) {
	uc.SetReadDeadline(time.Now().Add(connectLineTimeout))
	line, err := readConnectLine(uc)
	uc.SetReadDeadline(time.Time{})
	if err != nil {
		hv.log.Info("hv_sock front end: bad request", "err", err)
		uc.Close()
		return
	}
	svc, byGUID, err := parseConnect(line)
	if err != nil {
		hv.log.Info("hv_sock front end: bad request", "line", line, "err", err)
		uc.Close()
		return
	}
	ctx, cancel := context.WithCancel(hv.ctx)
	stop := context.AfterFunc(ctx, func() { uc.Close() }) // Close of the host ends a waiting client
	c, err := hv.ConnectService(ctx, svc)
	stop()
	cancel()
	if err != nil {
		hv.log.Info("hv_sock front end: connect failed", "service", svc.String(), "err", err)
		uc.Close()
		return
	}
	reply := fmt.Sprintf("OK %d\n", c.local.Port)
	if byGUID {
		reply = fmt.Sprintf("OK %s\n", c.endpointID())
	}
	if _, err := io.WriteString(uc, reply); err != nil {
		uc.Close()
		c.Close()
		return
	}
	go relay(uc, c)
}

// endpointID is the host-chosen endpoint GUID of a host-initiated
// connection (its device's instance).
func (c *Conn) endpointID() vmbus.GUID { return c.Device().Instance() }

// readConnectLine reads up to and including '\n', byte by byte so that
// nothing after the line is consumed.
func readConnectLine(r io.Reader) (string, error) {
	var b [1]byte
	var line []byte
	for len(line) < maxConnectLine {
		if _, err := r.Read(b[:]); err != nil {
			return "", err
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
	return "", fmt.Errorf("request line longer than %d bytes", maxConnectLine)
}

// parseConnect parses "CONNECT <port>" or "CONNECT <GUID>" (prefix
// case-insensitive).
func parseConnect(line string) (svc vmbus.GUID, byGUID bool, err error) {
	line = strings.TrimSuffix(line, "\r")
	verb, arg, ok := strings.Cut(line, " ")
	if !ok || !strings.EqualFold(verb, "CONNECT") {
		return vmbus.GUID{}, false, fmt.Errorf("want CONNECT <port> or CONNECT <service GUID>")
	}
	if p, err := strconv.ParseUint(arg, 10, 32); err == nil {
		return wire.ServiceID(uint32(p)), false, nil
	}
	g, err := vmbus.ParseGUID(arg)
	if err != nil {
		return vmbus.GUID{}, false, fmt.Errorf("%q is neither a port nor a GUID", arg)
	}
	return g, true, nil
}

// halfCloser is a connection whose write side can be shut alone.
type halfCloser interface {
	CloseWrite() error
}

// relay copies both ways between a host socket and a connection, passing
// each end of stream on as a half-close (OpenVMM relay_connected: guest FIN
// -> shutdown(SHUT_WR) of the socket, socket EOF -> FIN). When both
// directions are done, or one fails, both are closed.
func relay(sock net.Conn, c *Conn) {
	var wg sync.WaitGroup
	var once sync.Once
	abort := func() {
		once.Do(func() {
			sock.Close()
			c.Close()
		})
	}
	pipe := func(dst io.Writer, src io.Reader, done func() error) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		_, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
		if err != nil {
			abort()
			return
		}
		if done() != nil {
			abort()
		}
	}
	wg.Add(2)
	go pipe(c, sock, c.CloseWrite)
	go pipe(sock, c, func() error {
		if hc, ok := sock.(halfCloser); ok {
			return hc.CloseWrite()
		}
		return sock.Close()
	})
	wg.Wait()
	sock.Close()
	c.Close()
}
