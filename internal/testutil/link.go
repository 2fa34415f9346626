package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Link is a TCP forwarder to a target (an API server) that a test cuts (Down) and restores
// (Up) on the same address: an outage as the clients on the far side see it, connections
// refused and the open ones reset, without stopping the target.
type Link struct {
	t      testing.TB
	addr   string // listen address
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// NewLink forwards a new loopback address to target, up; the test's end cuts it.
func NewLink(t testing.TB, target string) *Link {
	l := &Link{t: t, addr: "127.0.0.1:0", target: target}
	l.Up()
	l.addr = l.ln.Addr().String()
	t.Cleanup(l.Down)
	return l
}

// Addr is the address to connect to instead of the target.
func (l *Link) Addr() string { return l.addr }

// Up listens again on the same address and forwards every new connection.
func (l *Link) Up() {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatalf("link up: %v", err)
	}
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", l.target)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, b)
			l.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }()
			go func() { io.Copy(c, b); c.Close() }()
		}
	}()
}

// Down stops listening and closes every forwarded connection.
func (l *Link) Down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}
