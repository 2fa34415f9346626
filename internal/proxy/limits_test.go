//go:build linux

package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil"
)

func TestMaxConnectionsPerPort(t *testing.T) {
	ea := backend(t, "A", nil)
	p := newProxy(t)
	addr := freeAddr(t)
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP, MaxConnections: 2,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("a", ea)}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, r := open()
		if line, err := r.ReadString('\n'); err != nil || line != "A\n" {
			t.Fatalf("connection %d under the limit: %q, %v", i, line, err)
		}
		held = append(held, c)
	}
	// The third concurrent connection is over the cap: closed without a byte.
	c, _ := open()
	assertClosedSilently(t, c)
	c.Close()
	// Closing one frees a slot.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, r := open()
		line, err := r.ReadString('\n')
		c.Close()
		if err == nil && line == "A\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a slot freed by a closed connection never became usable")
		}
		time.Sleep(20 * time.Millisecond)
	}
	held[1].Close()
}

func TestIdleTimeout(t *testing.T) {
	ea := backend(t, "A", nil)
	p := New(Options{Metrics: metrics.New(), IdleTimeout: 300 * time.Millisecond, Logger: testLogger(t)})
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	addr := freeAddr(t)
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: snapshot.NewRoute("a", []snapshot.Backend{{Name: "a", Weight: 1, Endpoints: []netip.AddrPort{ea}}})}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// Activity within the timeout keeps the connection open.
	for i := 0; i < 4; i++ {
		time.Sleep(150 * time.Millisecond)
		io.WriteString(c, "x\n")
		if line, err := r.ReadString('\n'); err != nil || line != "x\n" {
			t.Fatalf("active connection cut: %q, %v", line, err)
		}
	}
	// Silence longer than the timeout closes it.
	start := time.Now()
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("idle connection still open")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("idle connection closed after %v, want about 300ms", d)
	}
}

// A client that sends nothing (it waits for a server greeting, like the MySQL protocol) is
// closed at the hello timeout, and the log says why SNI routing cannot serve it.
func TestSilentClientGetsHint(t *testing.T) {
	var logs testutil.SyncBuffer
	p := New(Options{Metrics: metrics.New(), HelloTimeout: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	addr := freeAddr(t)
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{tlsPort(addr, nil)})); err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	assertClosedSilently(t, c)
	waitLog(t, &logs, "TCP listener with a TCPRoute") // the server-speaks-first hint
}

// The idle timeout applies to terminated connections too.
func TestIdleTimeoutTerminate(t *testing.T) {
	plain := backend(t, "P", nil)
	p := New(Options{Metrics: metrics.New(), IdleTimeout: 300 * time.Millisecond, Logger: testLogger(t)})
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	addr, _ := serveTerminate(t, p, plain)
	c, _, err := dialTLS(t, addr, "t.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i := 0; i < 4; i++ {
		time.Sleep(150 * time.Millisecond)
		io.WriteString(c, "x\n")
		if line, err := r.ReadString('\n'); err != nil || line != "x\n" {
			t.Fatalf("active terminated connection cut: %q, %v", line, err)
		}
	}
	start := time.Now()
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("idle terminated connection still open")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("closed after %v, want about 300ms", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for outcomes(t, p)["idle_timeout"] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("outcomes %v, want one idle_timeout (as the relay's pairs)", outcomes(t, p))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Connections spread over the ready endpoints of one backend.
func TestBalanceAcrossEndpoints(t *testing.T) {
	ea, eb := backend(t, "A", nil), backend(t, "B", nil)
	p := newProxy(t)
	addr := freeAddr(t)
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("r", ea, eb)}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	counts := greetings(t, addr, 200)
	// Uniform over two endpoints: 100 each on average, sd ≈ 7.
	if counts["A"] < 60 || counts["B"] < 60 {
		t.Fatalf("200 connections over two endpoints: %v", counts)
	}
}

// A terminated connection that the drain's deadline cuts has the outcome shutdown, as a
// relayed one has (relay.OutcomeShutdown), and the client is closed.
func TestShutdownCutsTerminated(t *testing.T) {
	plain := backend(t, "P", nil)
	p := New(Options{Metrics: metrics.New(), Logger: testLogger(t)})
	addr, _ := serveTerminate(t, p, plain)
	c, _, err := dialTLS(t, addr, "t.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the deadline (a connection was cut)", err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the client read %d, %v after the cut-off; want it closed", n, err)
	}
	if got := outcomes(t, p); got["shutdown"] != 1 || len(got) != 1 {
		t.Fatalf("outcomes %v, want one shutdown", got)
	}
}
