package echo

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// start serves s on a loopback port and returns its address; the server closes with the test.
func start(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-done:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return within 5s of Close")
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// exchange reads the greeting, sends payload, half-closes through closeWrite and reads the
// rest. It returns the greeting and everything read after it.
func exchange(t *testing.T, c net.Conn, closeWrite func() error, payload string) (Hello, string) {
	t.Helper()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("read greeting: %v (got %q)", err, line)
	}
	h, err := ParseGreeting(line)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	if err := closeWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("read echo: %v (got %q)", err, rest)
	}
	return h, string(rest)
}

func TestPlainTCP(t *testing.T) {
	addr := start(t, &Server{Name: "plain"})
	c := dial(t, addr)
	payload := strings.Repeat("0123456789", 10000) // larger than one read buffer
	h, got := exchange(t, c, c.CloseWrite, payload)
	if want := (Hello{Name: "plain", TLS: "off"}); h != want {
		t.Errorf("greeting = %+v, want %+v", h, want)
	}
	if got != payload {
		t.Errorf("echo: got %d bytes, want %d identical bytes", len(got), len(payload))
	}
}

func TestTLS(t *testing.T) {
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "a.test")
	addr := start(t, &Server{Name: "tls-a", TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}})

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want Hello
	}{
		{"tls13 sni alpn", &tls.Config{ServerName: "a.test", NextProtos: []string{"postgresql", "h2"}},
			Hello{Name: "tls-a", SNI: "a.test", ALPN: "postgresql", TLS: "1.3"}},
		{"tls12 no alpn", &tls.Config{ServerName: "a.test", MaxVersion: tls.VersionTLS12},
			Hello{Name: "tls-a", SNI: "a.test", TLS: "1.2"}},
		{"no sni", &tls.Config{InsecureSkipVerify: true},
			Hello{Name: "tls-a", TLS: "1.3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := dial(t, addr)
			cfg := tc.cfg.Clone()
			cfg.RootCAs = ca.Pool()
			tc2 := tls.Client(raw, cfg)
			if err := tc2.Handshake(); err != nil {
				t.Fatal(err)
			}
			if got := tc2.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(cert.Serial) != 0 {
				t.Errorf("peer serial %v, want %v", got, cert.Serial)
			}
			h, got := exchange(t, tc2, tc2.CloseWrite, "ping\n")
			if h != tc.want {
				t.Errorf("greeting = %+v, want %+v", h, tc.want)
			}
			if got != "ping\n" {
				t.Errorf("echo = %q, want %q", got, "ping\n")
			}
			// The server half-closed TCP too, not only TLS: the raw socket is at EOF.
			if n, err := raw.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("raw read after close_notify = %d, %v; want 0, EOF", n, err)
			}
		})
	}
}

// A TCP FIN without close_notify at a record boundary ends the echo the same way; this is what
// arrives when a proxy propagates a half-close it saw on the TCP level.
func TestTLSBareFIN(t *testing.T) {
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "a.test")
	addr := start(t, &Server{Name: "tls-a", TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}})
	raw := dial(t, addr)
	c := tls.Client(raw, &tls.Config{ServerName: "a.test", RootCAs: ca.Pool()})
	h, got := exchange(t, c, raw.CloseWrite, "ping\n")
	if h.Name != "tls-a" || got != "ping\n" {
		t.Errorf("greeting %+v, echo %q", h, got)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "a.test")
	addr := start(t, &Server{Name: "slow", TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}},
		HandshakeTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	begin := time.Now()
	n, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("read: %v", err)
	}
	if n != 0 {
		t.Errorf("got %d bytes from a server that never completed a handshake", n)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("closed after %v, want about 200ms", d)
	}
}

func TestCloseEndsOpenConnections(t *testing.T) {
	s := &Server{Name: "x"}
	ln, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	c := dial(t, ln.Addr().String())
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "hello from x ") {
		t.Fatalf("greeting %q, %v", line, err)
	}
	s.Close()
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v, want ErrServerClosed", err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after Close")
	}
	if err := s.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close = %v, want ErrServerClosed", err)
	}
}

func TestRun(t *testing.T) {
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "run.test")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, cert.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, addr, "run-1", certFile, keyFile) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of cancel")
		}
	}()

	var raw net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if raw, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Run never listened on %s: %v", addr, err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(raw, &tls.Config{ServerName: "run.test", RootCAs: ca.Pool()})
	h, got := exchange(t, c, c.CloseWrite, "x")
	if want := (Hello{Name: "run-1", SNI: "run.test", TLS: "1.3"}); h != want || got != "x" {
		t.Errorf("greeting %+v echo %q, want %+v and %q", h, got, want, "x")
	}
}

func TestRunRejectsBadArgs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, cert, key string }{
		{"has space", "", ""},
		{"", "", ""},
		{"ok", "only-cert.pem", ""},
		{"ok", "/nonexistent/cert.pem", "/nonexistent/key.pem"},
	} {
		if err := Run(ctx, "127.0.0.1:0", tc.name, tc.cert, tc.key); err == nil {
			t.Errorf("Run(name=%q cert=%q key=%q) = nil, want an error", tc.name, tc.cert, tc.key)
		}
	}
}

func TestGreetingRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Hello
	}{
		{Greeting("a", "x.test", "h2", tls.VersionTLS13), Hello{"a", "x.test", "h2", "1.3"}},
		{Greeting("b", "", "", tls.VersionTLS12), Hello{"b", "", "", "1.2"}},
		{Greeting("c", "", "", 0), Hello{"c", "", "", "off"}},
	} {
		if !strings.HasSuffix(tc.line, "\n") {
			t.Errorf("%q: no trailing newline", tc.line)
		}
		got, err := ParseGreeting(tc.line)
		if err != nil || got != tc.want {
			t.Errorf("ParseGreeting(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
	if got := Greeting("n", "s", "a", tls.VersionTLS13); got != "hello from n sni=s alpn=a tls=1.3\n" {
		t.Errorf("Greeting = %q", got)
	}
	for _, bad := range []string{"", "hi there", "hello from a sni=x alpn=- ", "hello from a alpn=x sni=- tls=off"} {
		if _, err := ParseGreeting(bad); err == nil {
			t.Errorf("ParseGreeting(%q) = nil error", bad)
		}
	}
}
