package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil"
)

func tcpProxy(t *testing.T, eps ...string) string {
	t.Helper()
	p := newProxy(t)
	addr := freeAddr(t)
	var aps []netip.AddrPort
	for _, e := range eps {
		aps = append(aps, mustAddrPort(e))
	}
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("r", aps...)}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A bulk transfer takes the splice path in both directions and arrives intact, and the
// half-close after it is passed on.
func TestRelayBulkIntact(t *testing.T) {
	addr := tcpProxy(t, backend(t, "A", nil).String())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "A\n" {
		t.Fatalf("greeting %q, %v", line, err)
	}
	payload := make([]byte, 8<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	go func() {
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(payload) || sha256.Sum256(got) != sha256.Sum256(payload) {
		t.Fatalf("echo of %d bytes came back as %d different bytes", len(payload), len(got))
	}
}

// Idle proxied connections hold their two sockets and nothing else: no pipe pair stays
// open after a bulk burst.
func TestRelayIdleHoldsNoPipes(t *testing.T) {
	addr := tcpProxy(t, backend(t, "A", nil).String())
	const n = 20
	before, pooledBefore := countFDs(t), pooledPipes()
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		r.ReadString('\n')
		// A burst big enough to splice, echoed back.
		big := bytes.Repeat([]byte("x"), 200<<10)
		go c.Write(big)
		if _, err := io.ReadFull(r, make([]byte, len(big))); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	// Per connection in this process: the client socket, the proxy's two, the backend's one.
	// Pipes waiting in the pool for reuse are counted out; held pipes would add 4 per
	// connection (one pair per direction).
	extra := countFDs(t) - before - 4*n - 2*(pooledPipes()-pooledBefore)
	if extra > 4 {
		t.Fatalf("%d idle connections hold %d fds beyond their sockets and the pipe pool", n, extra)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting open fds needs /proc (Linux): %v", err)
	}
	return len(ents)
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func pooledPipes() int { return relay.PooledPipes() }

// Client-side keepalive is set once on the listening socket, which every accepted socket
// inherits (Linux copies these options on accept); the relay sets it on the backend side.
func TestListenerKeepAlive(t *testing.T) {
	p := New(Options{Metrics: metrics.New(), KeepAlive: 45 * time.Second, Logger: testLogger(t)})
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	addr := freeAddr(t)
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("r", backend(t, "A", nil))}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	rc, err := p.listeners[addr].ln.SyscallConn()
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		testutil.Sockopts(t, "listener", int(fd),
			testutil.Sockopt{Name: "SO_KEEPALIVE", Level: syscall.SOL_SOCKET, Opt: syscall.SO_KEEPALIVE, Want: 1},
			testutil.Sockopt{Name: "TCP_KEEPIDLE", Level: syscall.IPPROTO_TCP, Opt: syscall.TCP_KEEPIDLE, Want: 45})
	})
}
