//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
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
	c := dial(t, addr)
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

// TCP_NODELAY and client-side keepalive are set once on the listening socket, which every
// accepted socket inherits (Linux copies these options on accept): a relayed connection's
// socket has them without a system call of its own, and a connection served through
// net.FileConn (HTTP here) has the listener's keepalive times back, not Go's defaults.
func TestClientSockopts(t *testing.T) {
	p := New(Options{Metrics: metrics.New(), KeepAlive: 45 * time.Second, Logger: testLogger(t)})
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	tcpAddr, httpAddr := freeAddr(t), freeAddr(t)
	tcp := &snapshot.Port{Address: tcpAddr, Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("r", backend(t, "A", nil))}}
	web := &snapshot.Port{Address: httpAddr, Protocol: snapshot.ProtocolHTTP}
	web.Listeners.Add("", &snapshot.Listener{Name: "gw/http"})
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{tcp, web})); err != nil {
		t.Fatal(err)
	}
	want := []testutil.Sockopt{
		{Name: "TCP_NODELAY", Level: syscall.IPPROTO_TCP, Opt: syscall.TCP_NODELAY, Want: 1},
		{Name: "SO_KEEPALIVE", Level: syscall.SOL_SOCKET, Opt: syscall.SO_KEEPALIVE, Want: 1},
		{Name: "TCP_KEEPIDLE", Level: syscall.IPPROTO_TCP, Opt: syscall.TCP_KEEPIDLE, Want: 45},
		{Name: "TCP_KEEPINTVL", Level: syscall.IPPROTO_TCP, Opt: syscall.TCP_KEEPINTVL, Want: 22},
		{Name: "TCP_KEEPCNT", Level: syscall.IPPROTO_TCP, Opt: syscall.TCP_KEEPCNT, Want: 4},
	}
	p.mu.Lock()
	lfd := p.listeners[tcpAddr].fd
	p.mu.Unlock()
	testutil.Sockopts(t, "listener", lfd, want...)

	// Relayed: the backend's greeting arrives once the pair is up.
	c := dial(t, tcpAddr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); line != "A\n" {
		t.Fatalf("relayed connection: %q, %v", line, err)
	}
	testutil.Sockopts(t, "relayed client socket", serverSide(t, c), want...)

	// Served by a goroutine: the answer to a request comes after serveFD set the options.
	h := dial(t, httpAddr)
	h.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(h, "GET / HTTP/1.1\r\nHost: x.example\r\n\r\n")
	if line, err := bufio.NewReader(h).ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 ") {
		t.Fatalf("HTTP connection: %q, %v", line, err)
	}
	testutil.Sockopts(t, "HTTP client socket", serverSide(t, h), want...)
}

// serverSide finds this process's socket at the other end of c (the proxy's, as it runs in
// the test process) by its addresses.
func serverSide(t *testing.T, c net.Conn) int {
	t.Helper()
	local, peer := c.RemoteAddr().(*net.TCPAddr), c.LocalAddr().(*net.TCPAddr)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("finding a socket needs /proc (Linux): %v", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		la, err1 := syscall.Getsockname(fd)
		pa, err2 := syscall.Getpeername(fd)
		l4, ok1 := la.(*syscall.SockaddrInet4)
		p4, ok2 := pa.(*syscall.SockaddrInet4)
		if err1 == nil && err2 == nil && ok1 && ok2 && l4.Port == local.Port && p4.Port == peer.Port &&
			net.IP(l4.Addr[:]).Equal(local.IP) && net.IP(p4.Addr[:]).Equal(peer.IP) {
			return fd
		}
	}
	t.Fatalf("no socket in this process for %v ← %v", local, peer)
	return -1
}
