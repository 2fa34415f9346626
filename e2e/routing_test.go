package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// Passthrough: the client gets the backend's own certificate and the backend sees the SNI;
// two backends share one port, told apart by SNI, whatever its case.
func TestPassthrough(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certA, certB := ca.Issue(t, "a.test"), ca.Issue(t, "b.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")),
		routeYAML("route-b", "tls", []string{"b.test"}, to("svc-b")),
		serviceYAML("svc-a", startEcho(t, "echo-a", certA)),
		serviceYAML("svc-b", startEcho(t, "echo-b", certB)),
	))
	startGateway(t, dir)

	for _, tc := range []struct {
		sni, backend string
		cert         *testutil.Cert
	}{
		{"a.test", "echo-a", certA},
		{"b.test", "echo-b", certB},
		{"A.TEST", "echo-a", certA},
		{"b.Test", "echo-b", certB},
	} {
		t.Run(tc.sni, func(t *testing.T) {
			s := dialTLS(t, port, ca.ClientConfig(tc.sni))
			if got := s.peerSerial(); got.Cmp(tc.cert.Serial) != 0 {
				t.Errorf("peer certificate serial %v, want the backend's %v", got, tc.cert.Serial)
			}
			wantHello(t, s.hello, tc.backend, tc.sni, "1.3")
			s.roundTrip("ping " + tc.sni + "\n")
			s.finish()
		})
	}

	t.Run("ALPN and TLS 1.2 pass through untouched", func(t *testing.T) {
		cfg := ca.ClientConfig("a.test")
		cfg.NextProtos = []string{"x-test", "h2"}
		cfg.MaxVersion = tls.VersionTLS12
		s := dialTLS(t, port, cfg)
		if s.hello.ALPN != "x-test" || s.hello.TLS != "1.2" {
			t.Errorf("greeting %+v, want alpn=x-test tls=1.2 negotiated with the backend", s.hello)
		}
		s.roundTrip("x")
		s.finish()
	})

	t.Run("openssl s_client", func(t *testing.T) {
		out, code := sClient(t, port, "hello from",
			"-servername", "a.test", "-CAfile", ca.File, "-verify_hostname", "a.test", "-verify_return_error")
		if !strings.Contains(out, "Verify return code: 0 (ok)") {
			t.Errorf("s_client did not verify the chain (exit %d):\n%s", code, out)
		}
		if got := sClientPeerSerial(t, out); got.Cmp(certA.Serial) != 0 {
			t.Errorf("s_client peer serial %v, want the backend's %v", got, certA.Serial)
		}
		if !strings.Contains(out, "hello from echo-a sni=a.test ") {
			t.Errorf("s_client output has no greeting from echo-a:\n%s", out)
		}
	})
}

// A trailing dot in the SNI is ignored for routing. crypto/tls strips it before sending and Go's
// TLS server refuses it, so openssl plays both the client and the backend here.
func TestPassthroughTrailingDot(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "dot.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("route-dot", "tls", []string{"dot.test"}, to("svc-dot")),
		serviceYAML("svc-dot", startOpenSSLServer(t, cert)),
	))
	startGateway(t, dir)

	for _, sni := range []string{"dot.test.", "DOT.test."} {
		t.Run(sni, func(t *testing.T) {
			out, code := sClient(t, port, "Verify return code",
				"-servername", sni, "-CAfile", ca.File, "-verify_hostname", "dot.test")
			if !strings.Contains(out, "Verify return code: 0 (ok)") {
				t.Errorf("s_client did not verify the backend's chain (exit %d):\n%s", code, out)
			}
			if got := sClientPeerSerial(t, out); got.Cmp(cert.Serial) != 0 {
				t.Errorf("peer serial %v, want the backend's %v", got, cert.Serial)
			}
		})
	}
}

// startOpenSSLServer runs `openssl s_server -www` with cert on a free loopback port and
// returns the port once it accepts connections.
func startOpenSSLServer(t *testing.T, cert *testutil.Cert) int {
	t.Helper()
	bin := openssl(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, cert.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "s_server", "-accept", "127.0.0.1:"+strconv.Itoa(port),
		"-cert", certFile, "-key", keyFile, "-www")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("openssl s_server output:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(pollEvery) {
		if c, err := net.DialTimeout("tcp", addr(port), time.Second); err == nil {
			c.Close()
			return port
		}
		select {
		case <-done:
			t.Fatalf("openssl s_server exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("openssl s_server not listening on :%d after %v:\n%s", port, waitTimeout, out.String())
		}
	}
}

// Terminate: the client sees the listener's certificate from its Secret; the backend gets
// plaintext.
func TestTerminate(t *testing.T) {
	t.Parallel()
	g, port, ca, listenerCert := startTerminating(t, nil)

	for _, sni := range []string{"t.test", "x.wild.test", "T.Test"} {
		t.Run(sni, func(t *testing.T) {
			s := dialTLS(t, port, ca.ClientConfig(sni))
			if got := s.peerSerial(); got.Cmp(listenerCert.Serial) != 0 {
				t.Errorf("peer certificate serial %v, want the listener's %v", got, listenerCert.Serial)
			}
			wantHello(t, s.hello, "plain", "", "off")
			s.roundTrip(strings.Repeat("plaintext ", 5000))
			s.finish()
		})
	}

	t.Run("openssl s_client", func(t *testing.T) {
		out, code := sClient(t, port, "hello from",
			"-servername", "t.test", "-CAfile", ca.File, "-verify_hostname", "t.test", "-verify_return_error")
		if !strings.Contains(out, "Verify return code: 0 (ok)") {
			t.Errorf("s_client did not verify the chain (exit %d):\n%s", code, out)
		}
		if got := sClientPeerSerial(t, out); got.Cmp(listenerCert.Serial) != 0 {
			t.Errorf("s_client peer serial %v, want the listener's %v", got, listenerCert.Serial)
		}
		if !strings.Contains(out, "hello from plain sni=- alpn=- tls=off") {
			t.Errorf("s_client output has no plaintext greeting from the backend:\n%s", out)
		}
	})

	// A client that resets while the gateway still writes to it (the close_notify that follows
	// its own) costs the gateway an EPIPE, not a SIGPIPE delivered and dropped: the serving
	// process ignores the signal, and goes on serving.
	t.Run("client reset", func(t *testing.T) {
		if !signalIgnored(t, g.cmd.Process.Pid, syscall.SIGPIPE) {
			t.Error("the serving process does not ignore SIGPIPE")
		}
		for range 20 {
			c, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), ca.ClientConfig("t.test"))
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("x"))
			c.NetConn().(*net.TCPConn).SetLinger(0)
			c.NetConn().Close()
		}
		s := dialTLS(t, port, ca.ClientConfig("t.test"))
		wantHello(t, s.hello, "plain", "", "off")
		s.finish()
	})

	// Terminating allocates tens of KiB per handshake: the serving process paces its
	// collector with a headroom over its small live heap (GOGC set after each collection,
	// up to 1600 for 64 MiB over the runtime's 4 MiB minimum), not Go's default of 100.
	t.Run("collector paced", func(t *testing.T) {
		deadline := time.Now().Add(waitTimeout)
		for {
			gogc := g.dbMetric(t, "go_gc_gogc_percent")
			if gogc > 100 && gogc <= 1600 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("go_gc_gogc_percent = %v; want the paced value (101-1600)", gogc)
			}
			for range 50 { // handshakes make garbage, and so collections
				s := dialTLS(t, port, ca.ClientConfig("t.test"))
				s.finish()
			}
			time.Sleep(pollEvery)
		}
	})

	// An SNI with a trailing dot is routed like the name without it, but RFC 6066 forbids the
	// dot and Go's TLS server refuses such a ClientHello with a decode_error alert. The
	// ClientHello cannot be rewritten for it either: both sides hash the exact bytes into the
	// handshake transcript. So on a Terminate listener the client reads a TLS alert (this
	// listener terminates TLS, so alerts are its to send), never a certificate. See
	// docs/engines.md and the README.
	t.Run("trailing dot", func(t *testing.T) {
		out, _ := sClient(t, port, "",
			"-servername", "t.test.", "-CAfile", ca.File, "-verify_hostname", "t.test")
		if strings.Contains(out, "BEGIN CERTIFICATE") || strings.Contains(out, "hello from") {
			t.Errorf("a trailing-dot SNI completed a terminated handshake:\n%s", out)
		}
		// 7 bytes: one alert record (5-byte header, level, description).
		if !strings.Contains(out, "SSL handshake has read 7 bytes") {
			t.Errorf("want exactly one TLS alert record back, got:\n%s", out)
		}
	})
}

// startTerminating runs a gateway with one Terminate listener for t.test and *.wild.test
// (the listener's certificate is returned), routed to a plaintext echo, with env added to
// the gateway's environment.
func startTerminating(t *testing.T, env []string) (g *gateway, port int, ca *testutil.CA, listenerCert *testutil.Cert) {
	t.Helper()
	ca = testutil.NewCA(t)
	listenerCert = ca.Issue(t, "t.test", "*.wild.test")
	port = testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(terminate("tls", port, "", "cert-t")),
		secretYAML("cert-t", listenerCert),
		routeYAML("route-t", "tls", []string{"t.test", "*.wild.test"}, to("svc-plain")),
		serviceYAML("svc-plain", startEcho(t, "plain", nil)),
	))
	return startSnigateEnv(t, dir, env, serveArgv(dir)...), port, ca, listenerCert
}

// GOGC in the environment leaves the collector as the user set it: the pacing that the
// "collector paced" subtest of TestTerminate sees must not override it, however many
// collections the handshakes' garbage causes.
func TestCollectorAsUserSet(t *testing.T) {
	t.Parallel()
	g, port, ca, _ := startTerminating(t, []string{"GOGC=150"})
	start := g.dbMetric(t, "go_gc_duration_seconds_count")
	deadline := time.Now().Add(waitTimeout)
	for g.dbMetric(t, "go_gc_duration_seconds_count") < start+3 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 3 collections in %v of handshakes", waitTimeout)
		}
		for range 50 { // handshakes make garbage, and so collections
			s := dialTLS(t, port, ca.ClientConfig("t.test"))
			s.finish()
		}
	}
	if gogc := g.dbMetric(t, "go_gc_gogc_percent"); gogc != 150 {
		t.Fatalf("go_gc_gogc_percent = %v after collections with GOGC=150 set; want 150", gogc)
	}
}

// Mixed: a Passthrough and a Terminate listener on one port with distinct hostnames.
func TestMixedModesOnOnePort(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	backendCert, listenerCert := ca.Issue(t, "pt.test"), ca.Issue(t, "term.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("pt", port, "pt.test"), terminate("term", port, "term.test", "cert-term")),
		secretYAML("cert-term", listenerCert),
		routeYAML("route-pt", "pt", []string{"pt.test"}, to("svc-tls")),
		routeYAML("route-term", "term", []string{"term.test"}, to("svc-plain")),
		serviceYAML("svc-tls", startEcho(t, "echo-tls", backendCert)),
		serviceYAML("svc-plain", startEcho(t, "echo-plain", nil)),
	))
	startGateway(t, dir)

	pt := dialTLS(t, port, ca.ClientConfig("pt.test"))
	if got := pt.peerSerial(); got.Cmp(backendCert.Serial) != 0 {
		t.Errorf("passthrough: peer serial %v, want the backend's %v", got, backendCert.Serial)
	}
	wantHello(t, pt.hello, "echo-tls", "pt.test", "1.3")

	term := dialTLS(t, port, ca.ClientConfig("term.test"))
	if got := term.peerSerial(); got.Cmp(listenerCert.Serial) != 0 {
		t.Errorf("terminate: peer serial %v, want the listener's %v", got, listenerCert.Serial)
	}
	wantHello(t, term.hello, "echo-plain", "", "off")

	pt.roundTrip("to passthrough")
	term.roundTrip("to terminate")
	pt.finish()
	term.finish()
}

// The listener port is an access boundary: a hostname routed on one port gets nothing on
// another port of the same Gateway.
func TestPortBoundary(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certX, certY := ca.Issue(t, "x.test"), ca.Issue(t, "y.test")
	ports := testutil.FreePorts(t, 2)
	portA, portB := ports[0], ports[1]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("a", portA, ""), passthrough("b", portB, "")),
		routeYAML("route-x", "a", []string{"x.test"}, to("svc-x")),
		routeYAML("route-y", "b", []string{"y.test"}, to("svc-y")),
		serviceYAML("svc-x", startEcho(t, "echo-x", certX)),
		serviceYAML("svc-y", startEcho(t, "echo-y", certY)),
	))
	g := startGateway(t, dir)

	x := dialTLS(t, portA, ca.ClientConfig("x.test"))
	wantHello(t, x.hello, "echo-x", "x.test", "1.3")
	x.finish()
	y := dialTLS(t, portB, ca.ClientConfig("y.test"))
	wantHello(t, y.hello, "echo-y", "y.test", "1.3")
	y.finish()

	before := g.rejected(t, "unknown_sni")
	expectRejectedTLS(t, portB, &tls.Config{ServerName: "x.test", InsecureSkipVerify: true})
	expectRejectedTLS(t, portA, &tls.Config{ServerName: "y.test", InsecureSkipVerify: true})
	g.waitRejected(t, "unknown_sni", before+2)
}
