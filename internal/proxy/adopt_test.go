//go:build linux

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil"
)

// waitLog waits until the log holds a line containing every part.
func waitLog(t *testing.T, log *testutil.SyncBuffer, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(log.String(), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in:\n%s", parts, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// splitWriter writes the first write in two pieces with a pause between: the ClientHello
// reaches the proxy in two reads.
type splitWriter struct {
	net.Conn
	once bool
}

func (w *splitWriter) Write(b []byte) (int, error) {
	if w.once || len(b) < 10 {
		return w.Conn.Write(b)
	}
	w.once = true
	n, err := w.Conn.Write(b[:7])
	if err != nil {
		return n, err
	}
	time.Sleep(30 * time.Millisecond)
	m, err := w.Conn.Write(b[7:])
	return n + m, err
}

// A passthrough connection routed on the relay's loop: over IPv6, with the ClientHello in
// two reads, and the access log names the client's real address.
func TestAdoptedPassthroughIPv6(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("IPv6 loopback unavailable: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cert := selfSigned(t, "a.test")
	ea := backend(t, "A", &cert)
	log := &testutil.SyncBuffer{}
	p := New(Options{Metrics: metrics.New(), AccessLog: testAccessLog(t, log), Logger: slog.New(slog.NewTextHandler(log, nil))})
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	snap := snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{
		"": passthrough("gw/one", map[string]*snapshot.Route{"a.test": route("a", ea)})})})
	if err := p.Apply(snap); err != nil {
		t.Fatal(err)
	}
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	c := tls.Client(&splitWriter{Conn: raw}, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "A\n" {
		t.Fatalf("read %q, %v; want the backend's greeting", line, err)
	}
	c.Close()
	got := waitLog(t, log, "msg=connection", "outcome=ok")
	if want := "client=" + raw.LocalAddr().String(); !strings.Contains(got, want) {
		t.Fatalf("access log %q does not name the client (%s)", got, want)
	}
}

// A drain cut-off ends connections the relay holds before their ClientHello came, and
// Shutdown returns.
func TestShutdownCutsUnroutedConnections(t *testing.T) {
	p := New(Options{Metrics: metrics.New(), AccessLog: testAccessLog(t, tWriter{t}), Logger: testLogger(t)})
	addr := freeAddr(t)
	cert := selfSigned(t, "a.test")
	snap := snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{
		"": passthrough("gw/one", map[string]*snapshot.Route{"a.test": route("a", backend(t, "A", &cert))})})})
	if err := p.Apply(snap); err != nil {
		t.Fatal(err)
	}
	silent := dial(t, addr)
	time.Sleep(50 * time.Millisecond) // accepted and adopted
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the deadline (a connection was cut)", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || (err != io.EOF && !strings.Contains(err.Error(), "reset")) {
		t.Fatalf("unrouted client read %d, %v after the cut-off; want it closed", n, err)
	}
}

// A connection the relay released to the goroutine path and that the goroutine path then
// relays itself (PostgreSQL's SSLRequest bridge hands both sockets to relay.Start) is still
// the drain's to cut: Shutdown returns at its deadline and the client is closed.
func TestShutdownCutsReleasedThenRelayed(t *testing.T) {
	// A PostgreSQL-like backend: 'S' to the SSLRequest, then an echo (the client's hello
	// comes back, which starts with a TLS record byte as the relay expects).
	bend := serve(t, func(c net.Conn) {
		if answerSSL(c, c) {
			io.Copy(c, c)
		}
	})
	p := New(Options{Metrics: metrics.New(), AccessLog: testAccessLog(t, tWriter{t}), Logger: testLogger(t)})
	addr := freeAddr(t)
	snap := snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{
		"": passthrough("gw/pg", map[string]*snapshot.Route{"db.test": route("db", bend)})})})
	if err := p.Apply(snap); err != nil {
		t.Fatal(err)
	}
	client := dial(t, addr)
	client.SetDeadline(time.Now().Add(10 * time.Second))
	askSSL(t, client)
	// Any ClientHello with the SNI will do: the backend echoes it.
	go tls.Client(client, &tls.Config{ServerName: "db.test", InsecureSkipVerify: true}).Handshake()
	deadline := time.Now().Add(5 * time.Second)
	rl, err := p.relay()
	if err != nil {
		t.Fatal(err)
	}
	for rl.Pairs() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the bridged connection never reached the relay")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want the deadline (a connection was cut)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return: the drain could not stop the relayed connection")
	}
}
