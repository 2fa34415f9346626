package e2e

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// Fail closed: every connection that cannot be routed is accepted and closed without a single
// byte sent back (no alert, no default certificate), and counted by reason.
func TestFailClosed(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "a.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")),
		serviceYAML("svc-a", startEcho(t, "echo-a", cert)),
	))
	const helloTimeout = time.Second
	g := startGateway(t, dir, "--hello-timeout", helloTimeout.String(), "--hello-max-bytes", "4096")

	// The gateway does serve a.test: the rejections below are not a gateway that rejects all.
	s := dialTLS(t, port, ca.ClientConfig("a.test"))
	wantHello(t, s.hello, "echo-a", "a.test", "1.3")
	s.finish()

	cases := []struct {
		name, reason string
		run          func(t *testing.T)
	}{
		{"no SNI, crypto/tls", "no_sni", func(t *testing.T) {
			expectRejectedTLS(t, port, &tls.Config{InsecureSkipVerify: true})
		}},
		{"no SNI, openssl", "no_sni", func(t *testing.T) {
			out, code := sClient(t, port, "", "-noservername")
			if n := sClientBytesRead(t, out); n != 0 || code == 0 {
				t.Errorf("s_client -noservername read %d bytes, exit %d; want 0 bytes and a failure:\n%s", n, code, out)
			}
		}},
		{"unknown SNI", "unknown_sni", func(t *testing.T) {
			expectRejectedTLS(t, port, &tls.Config{ServerName: "nope.test", InsecureSkipVerify: true})
		}},
		{"unknown SNI, openssl", "unknown_sni", func(t *testing.T) {
			out, code := sClient(t, port, "", "-servername", "b.a.test")
			if n := sClientBytesRead(t, out); n != 0 || code == 0 {
				t.Errorf("s_client read %d bytes, exit %d; want 0 bytes and a failure:\n%s", n, code, out)
			}
		}},
		{"not TLS", "not_tls", func(t *testing.T) {
			expectRejectedRaw(t, port, []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"), ioTimeout)
		}},
		{"slow ClientHello", "hello_timeout", func(t *testing.T) {
			hello := clientHello(t, &tls.Config{ServerName: "a.test"})
			took := expectRejectedRaw(t, port, hello[:len(hello)/2], 5*helloTimeout)
			if took < helloTimeout*7/10 || took > 4*helloTimeout {
				t.Errorf("closed %v after connecting, want about the %v hello timeout", took, helloTimeout)
			}
		}},
		{"slow ClientHello, record header only", "hello_timeout", func(t *testing.T) {
			hello := clientHello(t, &tls.Config{ServerName: "a.test"})
			took := expectRejectedRaw(t, port, hello[:3], 5*helloTimeout)
			if took < helloTimeout*7/10 || took > 4*helloTimeout {
				t.Errorf("closed %v after connecting, want about the %v hello timeout", took, helloTimeout)
			}
		}},
		{"oversized ClientHello", "hello_too_large", func(t *testing.T) {
			hello := clientHello(t, &tls.Config{ServerName: "a.test", NextProtos: manyProtocols(60)})
			if len(hello) <= 4096 {
				t.Fatalf("test ClientHello is %d bytes, want more than 4096", len(hello))
			}
			expectRejectedRaw(t, port, hello, ioTimeout)
		}},
		{"oversized ClientHello over several records", "hello_too_large", func(t *testing.T) {
			hello := clientHello(t, &tls.Config{ServerName: "a.test", NextProtos: manyProtocols(60)})
			expectRejectedRaw(t, port, splitRecords(t, hello, 1000), ioTimeout)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := g.rejected(t, tc.reason)
			tc.run(t)
			g.waitRejected(t, tc.reason, before+1)
		})
	}

	// Still serving after all that.
	s = dialTLS(t, port, ca.ClientConfig("a.test"))
	s.roundTrip("still here")
	s.finish()
}

// manyProtocols returns n distinct 100-byte ALPN protocol names, to pad a ClientHello.
func manyProtocols(n int) []string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("p%03d-%s", i, strings.Repeat("x", 95))
	}
	return ps
}

// splitRecords re-frames the handshake bytes of one TLS record into records of at most size
// bytes of payload each: still a valid ClientHello, spread over several records.
func splitRecords(t *testing.T, rec []byte, size int) []byte {
	t.Helper()
	if len(rec) < 5 || rec[0] != 0x16 {
		t.Fatal("not a handshake record")
	}
	n := int(rec[3])<<8 | int(rec[4])
	if len(rec) != 5+n {
		t.Fatalf("want exactly one record, have %d bytes for a %d-byte record", len(rec), n)
	}
	var out []byte
	for body := rec[5:]; len(body) > 0; {
		k := min(size, len(body))
		out = append(out, 0x16, rec[1], rec[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	return out
}
