package hvsock_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/sim"
)

// startHost starts a simulated Hyper-V host with its hv_sock side, in a
// temporary root that it removes when stopped.
func startHost() (host *sim.Host, hv *sim.HvSock, stop func()) {
	host, err := sim.NewTemp(sim.Config{})
	if err != nil {
		log.Fatal(err)
	}
	hv, err = host.StartHvSock(sim.HvSockConfig{})
	if err != nil {
		log.Fatal(err)
	}
	return host, hv, func() {
		hv.Close()
		host.Close()
	}
}

// A guest connecting to a service on the host, here one that echoes what
// it reads.
//
// The guest side is what a program on a Hyper-V or Azure VM writes. There
// Config.Root is left empty ("/"), which has no R/dev/vmbus-tl, so the
// default transport is the kernel's AF_VSOCK and no privilege is needed.
// Pointed at a simulated host's root, the same calls run hv_sock's VMBus
// protocol in this process instead, over channels the simulator offers.
func ExampleConfig_Dial() {
	host, hv, stop := startHost()
	defer stop()

	// The host's service on port 5000: echo, then close once the guest
	// has finished sending.
	l, err := hv.Listen(5000)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := hvsock.Config{Root: host.Root()}
	conn, err := cfg.Dial(ctx, 5000)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	fmt.Println("connected to", conn.RemoteAddr())

	if _, err := conn.Write([]byte("hello over hv_sock")); err != nil {
		log.Fatal(err)
	}
	// CloseWrite sends the FIN: the host's io.Copy sees io.EOF, closes,
	// and so ends our reading too.
	if err := conn.CloseWrite(); err != nil {
		log.Fatal(err)
	}
	reply, err := io.ReadAll(conn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("echoed: %s\n", reply)
	// Output:
	// connected to host(2):5000
	// echoed: hello over hv_sock
}

// A guest service the host connects to: the guest listens on a port, and
// each host connection arrives as a VMBus channel offer (on a VM, as an
// AF_VSOCK connection), accepted like any net.Listener's.
func ExampleConfig_Listen() {
	host, hv, stop := startHost()
	defer stop()

	cfg := hvsock.Config{Root: host.Root()}
	l, err := cfg.Listen(6000)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("listening on", l.Addr())

	// The guest's service: echo each connection until the host's FIN.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // the listener was closed
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()

	// The host side: connect to the guest's port, send, and read the echo.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := hv.Connect(ctx, 6000)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello from the host")); err != nil {
		log.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		log.Fatal(err)
	}
	reply, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("host got back: %s\n", reply)
	// Output:
	// listening on any(4294967295):6000
	// host got back: hello from the host
}
