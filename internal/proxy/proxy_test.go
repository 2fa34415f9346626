//go:build linux

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pp "github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/snigate/snigate/internal/accesslog"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/pgwire"
	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// selfSigned returns a certificate for names that is its own CA, for in-process TLS servers.
var selfSigned = testutil.SelfSigned

// serve runs handle on a goroutine for every connection to a new loopback listener, closing
// each when handle returns, until the test ends.
func serve(t *testing.T, handle func(net.Conn)) netip.AddrPort {
	t.Helper()
	ln, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// backend starts a TLS (cert set) or plain echo server that first writes its name.
func backend(t *testing.T, name string, cert *tls.Certificate) netip.AddrPort {
	t.Helper()
	return serve(t, func(c net.Conn) {
		if cert != nil {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
			if tc.Handshake() != nil {
				return
			}
			c = tc
		}
		io.WriteString(c, name+"\n")
		// Plain copy, not splice: a spliced echo would hold a pipe per connection,
		// which TestRelayIdleHoldsNoPipes would count against the proxy.
		io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	})
}

// freeAddr is a loopback address whose port no other call in this test binary got, and
// which no backend of it listens on (fixture.FreePort; backends listen with fixture.Listen).
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
}

// dial connects to addr; the connection is closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// askSSL sends PostgreSQL's SSLRequest on c and fails t unless the answer is 'S' (the
// bridge's yes: TLS follows).
func askSSL(t *testing.T, c net.Conn) {
	t.Helper()
	c.Write([]byte(pgwire.SSLRequest))
	answer := make([]byte, 1)
	if _, err := io.ReadFull(c, answer); err != nil || answer[0] != 'S' {
		t.Fatalf("SSLRequest answered %q, %v", answer, err)
	}
}

// answerSSL is a PostgreSQL server's side of askSSL: it reads the SSLRequest from r and
// answers 'S' on w. False when what came was not an SSLRequest or the answer failed.
func answerSSL(r io.Reader, w io.Writer) bool {
	req := make([]byte, len(pgwire.SSLRequest))
	if _, err := io.ReadFull(r, req); err != nil || string(req) != pgwire.SSLRequest {
		return false
	}
	_, err := w.Write([]byte{'S'})
	return err == nil
}

func tlsPort(addr string, listeners map[string]*snapshot.Listener) *snapshot.Port {
	p := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTLS}
	for h, l := range listeners {
		p.Listeners.Add(h, l)
	}
	return p
}

func passthrough(name string, routes map[string]*snapshot.Route) *snapshot.Listener {
	l := &snapshot.Listener{Name: name, Mode: snapshot.ModePassthrough}
	for h, r := range routes {
		l.Routes.Add(h, r)
	}
	return l
}

func route(name string, eps ...netip.AddrPort) *snapshot.Route {
	return snapshot.NewRoute(name, []snapshot.Backend{{Name: name, Weight: 1, Endpoints: eps}})
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p := New(Options{Metrics: metrics.New(), HelloTimeout: 2 * time.Second, DialTimeout: time.Second, AccessLog: testAccessLog(t, tWriter{t}), Logger: testLogger(t)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return p
}

func dialTLS(t *testing.T, addr, sni string) (*tls.Conn, string, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err != nil {
		return nil, "", err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return nil, "", err
	}
	return c, strings.TrimSpace(line), nil
}

// assertClosedSilently checks that the proxy closed conn without sending a byte.
func assertClosedSilently(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("proxy sent %d bytes (%q), want none", len(b), b)
	}
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("want EOF or reset, got %v", err)
	}
}

func TestPassthroughRoutesBySNIAndPortBoundary(t *testing.T) {
	ca, cb := selfSigned(t, "a.test"), selfSigned(t, "b.test")
	ea, eb := backend(t, "A", &ca), backend(t, "B", &cb)
	p := newProxy(t)
	addr1, addr2 := freeAddr(t), freeAddr(t)
	snap := snapshot.New(1, []*snapshot.Port{
		tlsPort(addr1, map[string]*snapshot.Listener{"": passthrough("gw/one", map[string]*snapshot.Route{
			"a.test": route("a", ea), "*.b.test": route("b", eb)})}),
		tlsPort(addr2, map[string]*snapshot.Listener{"": passthrough("gw/two", map[string]*snapshot.Route{
			"b.test": route("b", eb)})}),
	})
	if err := p.Apply(snap); err != nil {
		t.Fatal(err)
	}
	for sni, want := range map[string]string{"a.test": "A", "A.TEST": "A", "x.b.test": "B"} {
		c, got, err := dialTLS(t, addr1, sni)
		if err != nil {
			t.Fatalf("%s: %v", sni, err)
		}
		if got != want {
			t.Errorf("%s reached %q, want %q", sni, got, want)
		}
		if sni == "a.test" && c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(ca.Leaf.SerialNumber) != 0 {
			t.Errorf("passthrough: client did not see the backend's certificate")
		}
		c.Close()
	}
	// a.test is only routed on the first port.
	raw, err := net.Dial("tcp", addr2)
	if err != nil {
		t.Fatal(err)
	}
	go tls.Client(raw, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true}).Handshake()
	assertClosedSilently(t, raw)
}

func TestFailClosed(t *testing.T) {
	ca := selfSigned(t, "a.test")
	ea := backend(t, "A", &ca)
	p := New(Options{Metrics: metrics.New(), HelloTimeout: 300 * time.Millisecond, HelloMaxBytes: 4096, Logger: testLogger(t)})
	defer p.Shutdown(context.Background())
	addr := freeAddr(t)
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{
		"": passthrough("gw/l", map[string]*snapshot.Route{"a.test": route("a", ea)})})})); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(c net.Conn){
		"garbage": func(c net.Conn) { io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n") },
		"no sni": func(c net.Conn) {
			go tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		},
		"unknown sni": func(c net.Conn) {
			go tls.Client(c, &tls.Config{ServerName: "zzz.test", InsecureSkipVerify: true}).Handshake()
		},
		"slow": func(c net.Conn) { c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) },
		"oversized": func(c net.Conn) {
			// A record header announcing a 16 KiB handshake fragment, then filler.
			c.Write([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc})
			c.Write(make([]byte, 8000))
		},
	}
	for name, send := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			send(c)
			assertClosedSilently(t, c)
		})
	}
}

func TestReloadKeepsEstablishedConnections(t *testing.T) {
	ca, cb := selfSigned(t, "a.test"), selfSigned(t, "b.test")
	ea, eb := backend(t, "A", &ca), backend(t, "B", &cb)
	p := newProxy(t)
	addr := freeAddr(t)
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{
		"": passthrough("gw/l", map[string]*snapshot.Route{"a.test": route("a", ea)})})})); err != nil {
		t.Fatal(err)
	}
	c, _, err := dialTLS(t, addr, "a.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The new snapshot drops a.test and adds b.test on the same port, plus a new port.
	addr2 := freeAddr(t)
	if err := p.Apply(snapshot.New(2, []*snapshot.Port{
		tlsPort(addr, map[string]*snapshot.Listener{"": passthrough("gw/l", map[string]*snapshot.Route{"b.test": route("b", eb)})}),
		tlsPort(addr2, map[string]*snapshot.Listener{"": passthrough("gw/l2", map[string]*snapshot.Route{"b.test": route("b", eb)})}),
	})); err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "still here\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "still here\n" {
		t.Fatalf("established connection broken by reload: %q, %v", line, err)
	}
	for _, a := range []string{addr, addr2} {
		if _, got, err := dialTLS(t, a, "b.test"); err != nil || got != "B" {
			t.Fatalf("new route on %s: %q, %v", a, got, err)
		}
	}
	// A snapshot whose port cannot be bound changes nothing.
	busy, _ := fixture.Listen()
	defer busy.Close()
	err = p.Apply(snapshot.New(3, []*snapshot.Port{tlsPort(busy.Addr().String(), nil)}))
	if err == nil {
		t.Fatal("Apply with an unbindable port succeeded")
	}
	if p.Snapshot().Generation != 2 {
		t.Fatal("failed Apply replaced the snapshot")
	}
	if _, got, err := dialTLS(t, addr, "b.test"); err != nil || got != "B" {
		t.Fatalf("after failed apply: %q, %v", got, err)
	}
}

func TestTerminateAndHalfClose(t *testing.T) {
	plain := backend(t, "P", nil)
	p := newProxy(t)
	addr, lc := serveTerminate(t, p, plain)
	c, got, err := dialTLS(t, addr, "t.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got != "P" {
		t.Fatalf("reached %q", got)
	}
	if c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(lc.Leaf.SerialNumber) != 0 {
		t.Fatal("terminate: client did not see the listener's certificate")
	}
	io.WriteString(c, "ping")
	c.CloseWrite()
	rest, err := io.ReadAll(c)
	if err != nil || string(rest) != "ping" {
		t.Fatalf("after half-close: %q, %v", rest, err)
	}
}

func TestTCPListenerAndWeights(t *testing.T) {
	ea, eb := backend(t, "A", nil), backend(t, "B", nil)
	p := newProxy(t)
	addr := freeAddr(t)
	r := snapshot.NewRoute("w", []snapshot.Backend{
		{Name: "a", Weight: 3, Endpoints: []netip.AddrPort{ea}},
		{Name: "b", Weight: 1, Endpoints: []netip.AddrPort{eb}},
		{Name: "zero", Weight: 0, Endpoints: []netip.AddrPort{eb}},
	})
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP, TCP: &snapshot.Listener{Name: "gw/tcp", Route: r}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	counts := greetings(t, addr, 400)
	// 3:1 over 400 connections: B's share is 100 on average, sd ≈ 8.7.
	if counts["B"] < 55 || counts["B"] > 145 {
		t.Fatalf("weights 3:1 gave %v", counts)
	}
}

func TestDialFailoverAndEjection(t *testing.T) {
	ca := selfSigned(t, "a.test")
	good := backend(t, "A", &ca)
	dead := netip.MustParseAddrPort(freeAddr(t)) // nothing listens there
	p := newProxy(t)
	addr := freeAddr(t)
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{
		"": passthrough("gw/l", map[string]*snapshot.Route{"a.test": route("a", dead, good)})})})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		c, got, err := dialTLS(t, addr, "a.test")
		if err != nil || got != "A" {
			t.Fatalf("connection %d: %q, %v", i, got, err)
		}
		c.Close()
	}
	if !p.health.ejected(dead, time.Now()) {
		t.Fatal("an endpoint that keeps refusing connections was not ejected")
	}
}

// testLogger sends the proxy's logs to t.Log, so they show only for failing tests.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testAccessLog writes access lines to w within a millisecond, in slog's text format.
func testAccessLog(t *testing.T, w io.Writer) *accesslog.Logger {
	s := accesslog.NewSink(w, accesslog.SinkOptions{FlushDelay: time.Millisecond, Format: accesslog.Text})
	t.Cleanup(func() { s.Close() })
	return accesslog.New(s, accesslog.Text)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// greetings opens n connections to addr one after another and counts the greeting line
// (the backend's name) each one receives first.
func greetings(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		counts[strings.TrimSpace(line)]++
	}
	return counts
}

// serveTerminate has p terminate TLS for t.test on a new address, with a new self-signed
// certificate, and forward the plaintext to plain.
func serveTerminate(t *testing.T, p *Proxy, plain netip.AddrPort) (string, tls.Certificate) {
	t.Helper()
	lc := selfSigned(t, "t.test")
	addr := freeAddr(t)
	l := &snapshot.Listener{Name: "gw/t", Mode: snapshot.ModeTerminate,
		TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{lc}}}
	l.Routes.Add("t.test", route("t", plain))
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{tlsPort(addr, map[string]*snapshot.Listener{"t.test": l})})); err != nil {
		t.Fatal(err)
	}
	return addr, lc
}

// snigate_route_active_connections counts each route's open connections (the status
// page's live count) on every path: passthrough on the relay, terminate on a goroutine, a
// TCP listener; and falls back to zero when they close.
func TestRouteActiveConnections(t *testing.T) {
	ca := selfSigned(t, "a.test")
	ea, plain := backend(t, "A", &ca), backend(t, "P", nil)
	p := newProxy(t)
	addr, termAddr, tcpAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	term := &snapshot.Listener{Name: "gw/t", Mode: snapshot.ModeTerminate,
		TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{selfSigned(t, "t.test")}}}
	term.Routes.Add("t.test", route("t", plain))
	tcp := &snapshot.Port{Address: tcpAddr, Protocol: snapshot.ProtocolTCP, TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("raw", plain)}}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{
		tlsPort(addr, map[string]*snapshot.Listener{"": passthrough("gw/l", map[string]*snapshot.Route{"a.test": route("a", ea)})}),
		tlsPort(termAddr, map[string]*snapshot.Listener{"t.test": term}),
		tcp,
	})); err != nil {
		t.Fatal(err)
	}
	active := func() map[string]float64 {
		got := map[string]float64{}
		for _, r := range []string{"a", "raw", "t"} {
			got[r] = promtestutil.ToFloat64(p.m.RouteActive.WithLabelValues(r))
		}
		return got
	}
	var open []net.Conn
	for range 2 {
		c, got, err := dialTLS(t, addr, "a.test")
		if err != nil || got != "A" {
			t.Fatalf("a.test: %q, %v", got, err)
		}
		open = append(open, c)
	}
	c, got, err := dialTLS(t, termAddr, "t.test")
	if err != nil || got != "P" {
		t.Fatalf("t.test: %q, %v", got, err)
	}
	open = append(open, c)
	rc := dial(t, tcpAddr)
	if line, err := bufio.NewReader(rc).ReadString('\n'); err != nil || line != "P\n" {
		t.Fatalf("tcp: %q, %v", line, err)
	}
	open = append(open, rc)
	if got, want := active(), map[string]float64{"a": 2, "raw": 1, "t": 1}; !maps.Equal(got, want) {
		t.Fatalf("open: %v, want %v", got, want)
	}
	for _, c := range open {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for got := active(); !maps.Equal(got, map[string]float64{"a": 0, "raw": 0, "t": 0}); got = active() {
		if time.Now().After(deadline) {
			t.Fatalf("closed: %v, want every route at 0", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxyBackend is a backend that reads the PROXY header snigate writes (with the reference
// library, as HAProxy or NATS would) and greets with what it carried: "src=... auth=...
// alpn=...", over TLS when cert is set; a connection without a valid header gets
// "no header".
func proxyBackend(t *testing.T, cert *tls.Certificate) netip.AddrPort {
	return proxyBackendPG(t, cert, false)
}

// proxyBackendPG is proxyBackend that, with pg, expects PostgreSQL's SSLRequest after the
// header (and answers 'S') before the TLS handshake, as the SSLRequest bridge sends it.
func proxyBackendPG(t *testing.T, cert *tls.Certificate, pg bool) netip.AddrPort {
	t.Helper()
	return serve(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		greeting := "no header"
		if h, err := pp.Read(br); err == nil {
			auth, alpn := "", ""
			tlvs, _ := h.TLVs()
			for _, tlv := range tlvs {
				switch tlv.Type {
				case pp.PP2_TYPE_AUTHORITY:
					auth = string(tlv.Value)
				case pp.PP2_TYPE_ALPN:
					alpn = string(tlv.Value)
				}
			}
			greeting = fmt.Sprintf("v%d src=%s auth=%s alpn=%s", h.Version, h.SourceAddr, auth, alpn)
		}
		if pg && !answerSSL(br, c) {
			return
		}
		var rw io.ReadWriter = struct {
			io.Reader
			io.Writer
		}{br, c}
		if cert != nil {
			tc := tls.Server(&bufferedConn{Conn: c, r: br}, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"x-db"}})
			if tc.Handshake() != nil {
				return
			}
			rw = tc
		}
		io.WriteString(rw, greeting+"\n")
	})
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// BackendPolicy's PROXY header on every path to the backend: passthrough on the relay (v2
// with the SNI and the client's first ALPN offer), terminate on a goroutine (v2, the
// negotiated ALPN), a TCP listener (v1). And ListenerPolicy's inbound header: from a trusted
// range its address is the client's, in the header written to the backend too; from
// elsewhere the connection is closed without a byte.
func TestProxyProtocol(t *testing.T) {
	ca := selfSigned(t, "db.test")
	p := newProxy(t)
	addr, termAddr, tcpAddr, lbAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	withHeader := func(name string, ep netip.AddrPort, h *snapshot.ProxyHeader) *snapshot.Route {
		return snapshot.NewRoute(name, []snapshot.Backend{{Name: name, Weight: 1, Endpoints: []netip.AddrPort{ep}, Proxy: h}})
	}
	v2 := &snapshot.ProxyHeader{Version: 2, Authority: true, ALPN: true}
	tlsEP, plainEP := proxyBackend(t, &ca), proxyBackend(t, nil)
	term := &snapshot.Listener{Name: "gw/t", Mode: snapshot.ModeTerminate,
		TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{selfSigned(t, "t.test")}, NextProtos: []string{"h2", "x-app"}}}
	term.Routes.Add("t.test", withHeader("t", plainEP, v2))
	lbPort := tlsPort(lbAddr, map[string]*snapshot.Listener{"": passthrough("gw/lb", map[string]*snapshot.Route{"db.test": withHeader("lb", tlsEP, v2)})})
	lbPort.ProxyIn = &snapshot.InboundProxy{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Required: true}
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{
		tlsPort(addr, map[string]*snapshot.Listener{"": passthrough("gw/l", map[string]*snapshot.Route{"db.test": withHeader("db", tlsEP, v2)})}),
		tlsPort(termAddr, map[string]*snapshot.Listener{"t.test": term}),
		{Address: tcpAddr, Protocol: snapshot.ProtocolTCP, TCP: &snapshot.Listener{Name: "gw/tcp", Route: withHeader("raw", plainEP, &snapshot.ProxyHeader{Version: 1})}},
		lbPort,
	})); err != nil {
		t.Fatal(err)
	}
	greet := func(t *testing.T, c net.Conn) string {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("greeting: %v", err)
		}
		return strings.TrimSpace(line)
	}
	tlsTo := func(t *testing.T, raw net.Conn, sni string, alpn ...string) string {
		t.Helper()
		tc := tls.Client(raw, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: alpn})
		t.Cleanup(func() { tc.Close() })
		return greet(t, tc)
	}
	t.Run("passthrough on the relay", func(t *testing.T) {
		c := dial(t, addr)
		want := fmt.Sprintf("v2 src=%s auth=db.test alpn=x-db", c.LocalAddr())
		if got := tlsTo(t, c, "db.test", "x-db", "h2"); got != want {
			t.Errorf("backend read %q, want %q", got, want)
		}
	})
	t.Run("terminate", func(t *testing.T) {
		c := dial(t, termAddr)
		want := fmt.Sprintf("v2 src=%s auth=t.test alpn=x-app", c.LocalAddr())
		if got := tlsTo(t, c, "t.test", "x-app"); got != want {
			t.Errorf("backend read %q, want %q", got, want)
		}
	})
	t.Run("postgres SSLRequest bridge", func(t *testing.T) {
		pgAddr := freeAddr(t)
		pgEP := proxyBackendPG(t, &ca, true)
		bridged := tlsPort(pgAddr, map[string]*snapshot.Listener{"": passthrough("gw/pg", map[string]*snapshot.Route{"db.test": withHeader("pg", pgEP, v2)})})
		snap := p.Snapshot()
		if err := p.Apply(snapshot.New(snap.Generation+1, append(slices.Clone(snap.Ports), bridged))); err != nil {
			t.Fatal(err)
		}
		c := dial(t, pgAddr)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		askSSL(t, c)
		want := fmt.Sprintf("v2 src=%s auth=db.test alpn=x-db", c.LocalAddr())
		if got := tlsTo(t, c, "db.test", "x-db"); got != want {
			t.Errorf("backend read %q, want %q", got, want)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		c := dial(t, tcpAddr)
		want := fmt.Sprintf("v1 src=%s auth= alpn=", c.LocalAddr())
		if got := greet(t, c); got != want {
			t.Errorf("backend read %q, want %q", got, want)
		}
	})
	t.Run("through a trusted balancer", func(t *testing.T) {
		client := netip.MustParseAddrPort("203.0.113.7:51234")
		c := dial(t, lbAddr)
		h, _ := proxyproto.Header(2, client, netip.MustParseAddrPort(lbAddr), proxyproto.TLVs{})
		c.Write(h)
		if got, want := tlsTo(t, c, "db.test", "x-db"), "v2 src="+client.String()+" auth=db.test alpn=x-db"; got != want {
			t.Errorf("backend read %q, want %q", got, want)
		}
	})
	t.Run("a balancer that sends no header, where one is required", func(t *testing.T) {
		c := dial(t, lbAddr)
		tc := tls.Client(c, &tls.Config{ServerName: "db.test", InsecureSkipVerify: true})
		if err := tc.Handshake(); err == nil {
			t.Fatal("handshake through a port that requires a PROXY header, without one, succeeded")
		}
	})
	t.Run("HTTPS through a trusted balancer: the client is the header's", func(t *testing.T) {
		httpsAddr := freeAddr(t)
		gwCert := selfSigned(t, "*.example.com")
		https := &snapshot.Listener{Name: "default/gw/https", Mode: snapshot.ModeTerminate,
			TLS:  &tls.Config{Certificates: []tls.Certificate{gwCert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12},
			HTTP: httpTable(map[string][]*snapshot.HTTPMatch{"*.example.com": {prefix("/", toBackend("web", httpBackend(t, "web")))}})}
		port := tlsPort(httpsAddr, map[string]*snapshot.Listener{"*.example.com": https})
		port.ProxyIn = &snapshot.InboundProxy{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Required: true}
		snap := p.Snapshot()
		if err := p.Apply(snapshot.New(snap.Generation+1, append(slices.Clone(snap.Ports), port))); err != nil {
			t.Fatal(err)
		}
		c := dial(t, httpsAddr)
		client := netip.MustParseAddrPort("203.0.113.9:40001")
		h, _ := proxyproto.Header(1, client, netip.MustParseAddrPort(httpsAddr), proxyproto.TLVs{})
		c.Write(h)
		tc := tls.Client(c, &tls.Config{ServerName: "www.example.com", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(tc, "GET /x HTTP/1.1\r\nHost: www.example.com\r\nConnection: close\r\n\r\n")
		resp, err := io.ReadAll(tc)
		if err != nil && len(resp) == 0 {
			t.Fatal(err)
		}
		if !strings.Contains(string(resp), "xff=203.0.113.9 ") {
			t.Errorf("the backend saw X-Forwarded-For other than the header's client:\n%s", resp)
		}
	})
	t.Run("a header from an untrusted address", func(t *testing.T) {
		strict := tlsPort(lbAddr, map[string]*snapshot.Listener{"": passthrough("gw/lb", map[string]*snapshot.Route{"db.test": withHeader("lb", tlsEP, v2)})})
		strict.ProxyIn = &snapshot.InboundProxy{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		if err := p.Apply(snapshot.New(2, []*snapshot.Port{strict})); err != nil {
			t.Fatal(err)
		}
		c := dial(t, lbAddr)
		h, _ := proxyproto.Header(1, netip.MustParseAddrPort("203.0.113.7:1"), netip.MustParseAddrPort(lbAddr), proxyproto.TLVs{})
		c.Write(h)
		assertClosedSilently(t, c)
		if n := promtestutil.ToFloat64(p.m.Rejected.WithLabelValues(string(reasonProxyUntrusted), "")); n != 1 {
			t.Errorf("rejected %s: %v, want 1", reasonProxyUntrusted, n)
		}
	})
}

// abortBackend is a server whose name is X. With abort, it writes a partial answer after
// its name and resets the connection, as a server that crashed in the middle of a reply;
// without, it reads until an error and sends that error on got (nil for a clean EOF).
// With pg, it first answers PostgreSQL's SSLRequest with 'S' (cert must be set).
func abortBackend(t *testing.T, cert *tls.Certificate, pg, abort bool, got chan<- error) netip.AddrPort {
	t.Helper()
	return serve(t, func(c net.Conn) {
		tcp := c.(*net.TCPConn)
		rw := io.ReadWriter(c)
		if pg && !answerSSL(c, c) {
			return
		}
		if cert != nil {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
			if tc.Handshake() != nil {
				return
			}
			rw = tc
		}
		io.WriteString(rw, "X\n")
		if abort {
			io.WriteString(rw, "partial")
			time.Sleep(20 * time.Millisecond) // the bytes go first, then the reset
			tcp.SetLinger(0)
			return
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.Copy(io.Discard, rw)
		got <- err
	})
}

// outcomes sums snigate_connections_total by outcome.
func outcomes(t *testing.T, p *Proxy) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	p.m.Connections.Collect(ch)
	close(ch)
	sums := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "outcome" {
				sums[l.GetValue()] += d.GetCounter().GetValue()
			}
		}
	}
	return sums
}

// A side's break reaches the other side as a reset, on every path (the relay's passthrough,
// PostgreSQL bridge and TCP pairs, a terminating listener's goroutines): a clean end (a FIN, or a TLS
// close_notify from a terminating listener) would make a reply cut off by a backend's
// crash look complete to a client that reads until the end.
func TestBreakReachesOtherSide(t *testing.T) {
	cert := selfSigned(t, "a.test")
	listener := func(mode, addr string, r *snapshot.Route) *snapshot.Port {
		switch mode {
		case "passthrough", "postgres":
			return tlsPort(addr, map[string]*snapshot.Listener{"": passthrough("gw/l", map[string]*snapshot.Route{"a.test": r})})
		case "terminate":
			l := &snapshot.Listener{Name: "gw/t", Mode: snapshot.ModeTerminate,
				TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{selfSigned(t, "t.test")}}}
			l.Routes.Add("t.test", r)
			return tlsPort(addr, map[string]*snapshot.Listener{"t.test": l})
		}
		return &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP, TCP: &snapshot.Listener{Name: "gw/tcp", Route: r}}
	}
	// connect opens a connection through the proxy and reads the backend's name; raw is
	// the client's TCP connection, r what reads the bytes after the name.
	connect := func(t *testing.T, mode, addr string) (raw *net.TCPConn, r io.Reader) {
		t.Helper()
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var s io.Reader = c
		switch mode {
		case "postgres":
			askSSL(t, c) // the SSLRequest bridge: 'S' from snigate, then TLS to the backend
			s = tls.Client(c, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
		case "passthrough":
			s = tls.Client(c, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
		case "terminate":
			s = tls.Client(c, &tls.Config{ServerName: "t.test", InsecureSkipVerify: true})
		}
		br := bufio.NewReader(s)
		if line, err := br.ReadString('\n'); err != nil || line != "X\n" {
			t.Fatalf("greeting %q, %v", line, err)
		}
		return c.(*net.TCPConn), br
	}
	for _, mode := range []string{"passthrough", "postgres", "terminate", "tcp"} {
		var bcert *tls.Certificate
		if mode == "passthrough" || mode == "postgres" {
			bcert = &cert
		}
		pg := mode == "postgres"
		t.Run(mode+"/backend breaks", func(t *testing.T) {
			p, addr := newProxy(t), freeAddr(t)
			if err := p.Apply(snapshot.New(1, []*snapshot.Port{listener(mode, addr, route("r", abortBackend(t, bcert, pg, true, nil)))})); err != nil {
				t.Fatal(err)
			}
			_, r := connect(t, mode, addr)
			rest, err := io.ReadAll(r)
			if err == nil || !strings.Contains(err.Error(), "reset") {
				t.Errorf("the client read %q, then %v; want a reset", rest, err)
			}
		})
		t.Run(mode+"/client breaks", func(t *testing.T) {
			got := make(chan error, 1)
			p, addr := newProxy(t), freeAddr(t)
			if err := p.Apply(snapshot.New(1, []*snapshot.Port{listener(mode, addr, route("r", abortBackend(t, bcert, pg, false, got)))})); err != nil {
				t.Fatal(err)
			}
			raw, _ := connect(t, mode, addr)
			raw.SetLinger(0)
			raw.Close() // a reset, and no close_notify before it
			if err := <-got; err == nil || !strings.Contains(err.Error(), "reset") {
				t.Errorf("the backend read %v; want a reset", err)
			}
		})
	}
}
