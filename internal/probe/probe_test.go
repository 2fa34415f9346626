package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/testutil"
)

const (
	perEngine = "orders.pg.acme.example.com"
	flat      = "orders.acme.example.com"
)

func probe(t *testing.T, tg Target) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := Probe(ctx, tg, time.Now())
	t.Logf("%s: %s", r.Reason, r.Message)
	return r
}

func wantReason(t *testing.T, r Result, reason string, msgParts ...string) {
	t.Helper()
	if r.Reason != reason {
		t.Fatalf("reason %s (%s), want %s", r.Reason, r.Message, reason)
	}
	for _, p := range msgParts {
		if !strings.Contains(r.Message, p) {
			t.Errorf("message %q lacks %q", r.Message, p)
		}
	}
}

// A server of each way of starting TLS, with a certificate that names both hostnames and
// chains to the trust anchor: Verified, and the probe sent the SNI, waited for each answer
// and sent no application data.
func TestVerifiedEachStart(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, perEngine, flat)
	cfg := tlsConfig(cert.TLS)
	for _, tc := range []struct {
		start  engine.Start
		handle func(net.Conn) seen
	}{
		{engine.DirectTLS, directTLS(cfg)},
		{engine.PostgresSSLRequest, postgres('S', cfg)},
		{engine.ServerFirst, mysql(mysqlCaps, cfg)},
	} {
		t.Run(tc.start.String(), func(t *testing.T) {
			t.Parallel()
			b := startBackend(t, tc.handle)
			r := probe(t, Target{Address: b.addr, Start: tc.start, SNI: perEngine, Hostnames: []string{perEngine, flat}, Roots: ca.Pool()})
			wantReason(t, r, v1alpha1.ReasonVerified, cert.SerialHex(), perEngine, flat, "trust anchor")
			s := b.next(t)
			if s.err != nil || s.sni != perEngine || s.early != 0 || s.after != 0 {
				t.Fatalf("backend saw %+v; want SNI %s, nothing early, no application data", s, perEngine)
			}
			c := r.Certificate
			if c == nil || c.Serial != cert.SerialHex() || !c.CoversHostnames || c.ChainsToTrustAnchor == nil || !*c.ChainsToTrustAnchor {
				t.Fatalf("certificate %+v", c)
			}
			if len(r.Chain) != 1 || !r.Chain[0].Equal(cert.Leaf) {
				t.Fatalf("chain %v", r.Chain)
			}
			if exp, ok := Expiry(r); !ok || !exp.Equal(cert.Leaf.NotAfter) {
				t.Fatalf("Expiry %v %v, want %v", exp, ok, cert.Leaf.NotAfter)
			}
		})
	}
}

// Each certificate failure over a real handshake (Judge's table covers the details): the
// certificate is described whatever the verdict.
func TestCertificateVerdicts(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ca := fromCA(testutil.NewCA(t))
	other := newAuthority(t, "some other CA", now.Add(-time.Hour), now.Add(time.Hour))
	for _, tc := range []struct {
		name   string
		cert   tls.Certificate
		reason string
		msg    []string
		chains bool
	}{
		{"missing names", ca.leaf(t, now.Add(-time.Hour), now.Add(time.Hour), perEngine), v1alpha1.ReasonMissingDNSNames,
			[]string{"the certificate names [" + perEngine + "]; add " + flat}, true},
		{"expired", ca.leaf(t, now.Add(-48*time.Hour), now.Add(-time.Hour), perEngine, flat), v1alpha1.ReasonExpired,
			[]string{"expired at " + stamp(now.Add(-time.Hour))}, true},
		{"not yet valid", ca.leaf(t, now.Add(time.Hour), now.Add(48*time.Hour), perEngine, flat), v1alpha1.ReasonNotYetValid,
			[]string{"valid only from " + stamp(now.Add(time.Hour))}, true},
		{"other CA", other.leaf(t, now.Add(-time.Hour), now.Add(time.Hour), perEngine, flat), v1alpha1.ReasonUnknownAuthority,
			[]string{`issued by "CN=some other CA"`, "does not chain to the trust anchor"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBackend(t, directTLS(tlsConfig(tc.cert)))
			r := probe(t, Target{Address: b.addr, Start: engine.DirectTLS, SNI: perEngine, Hostnames: []string{perEngine, flat}, Roots: ca.pool()})
			wantReason(t, r, tc.reason, tc.msg...)
			c := r.Certificate
			if c == nil || c.Serial != serialHex(tc.cert.Leaf.SerialNumber) || c.ChainsToTrustAnchor == nil || *c.ChainsToTrustAnchor != tc.chains {
				t.Fatalf("certificate %+v, want serial %s and chains %v", c, serialHex(tc.cert.Leaf.SerialNumber), tc.chains)
			}
		})
	}
}

// The probe's own failures to reach a certificate.
func TestNoCertificate(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	cfg := tlsConfig(ca.Issue(t, perEngine).TLS)

	closedPort := func() string {
		l := testutil.Listen(t)
		addr := l.Addr().String()
		l.Close()
		return addr
	}()
	greetingErr := appendPacket(nil, 0, append([]byte{0xff, 0x6a, 0x04}, "Host '10.1.2.3' is not allowed to connect to this MariaDB server"...))

	for _, tc := range []struct {
		name   string
		start  engine.Start
		handle func(net.Conn) seen // nil: closedPort
		reason string
		msg    []string
		// after: the probe must have sent nothing after the server refused TLS
		checkAfter bool
	}{
		{"closed port", engine.DirectTLS, nil, v1alpha1.ReasonUnreachable, []string{"cannot connect to " + closedPort, "connection refused"}, false},
		{"redis without TLS", engine.DirectTLS, writeAndClose("-ERR unknown command\r\n"), v1alpha1.ReasonNotTLS,
			[]string{"in plaintext", `"-ERR unknown command\r\n"`}, false},
		{"plaintext then open", engine.DirectTLS, func(c net.Conn) seen {
			_, _ = c.Read(make([]byte, 4096))
			_, err := c.Write([]byte("-ERR Protocol error\r\n"))
			time.Sleep(200 * time.Millisecond) // the probe decides without waiting for a close
			return seen{err: err}
		}, v1alpha1.ReasonNotTLS, []string{"in plaintext"}, false},
		{"two bytes then close", engine.DirectTLS, writeAndClose("-E"), v1alpha1.ReasonNotTLS, []string{`("-E")`}, false},
		{"closes at once", engine.DirectTLS, func(net.Conn) seen { return seen{} }, v1alpha1.ReasonNotTLS,
			[]string{"closed the connection without answering the TLS ClientHello"}, false},
		{"postgres answers N", engine.PostgresSSLRequest, postgres('N', nil), v1alpha1.ReasonNotTLS,
			[]string{"answered 'N'", "ssl = on"}, true},
		{"postgres answers a TLS alert", engine.PostgresSSLRequest, postgres(0x15, nil), v1alpha1.ReasonNotTLS,
			[]string{"expects a TLS handshake at once"}, true},
		{"postgres answers E", engine.PostgresSSLRequest, postgres('E', nil), v1alpha1.ReasonNotTLS,
			[]string{`answered "E"`, "not a PostgreSQL server"}, true},
		{"postgres closes", engine.PostgresSSLRequest, func(c net.Conn) seen {
			_, err := readRequest(c, []byte("\x00\x00\x00\x08\x04\xd2\x16\x2f"))
			return seen{err: err}
		}, v1alpha1.ReasonNotTLS, []string{"without answering PostgreSQL's SSLRequest"}, false},
		{"direct TLS server behind engine postgres", engine.PostgresSSLRequest, directTLS(cfg), v1alpha1.ReasonNotTLS,
			[]string{"without answering PostgreSQL's SSLRequest", "expects TLS at once"}, false},
		{"mysql without TLS", engine.ServerFirst, mysql(mysqlCaps&^clientSSL, nil), v1alpha1.ReasonNotTLS,
			[]string{"10.11.6-MariaDB-0+deb12u1", "lacks CLIENT_SSL"}, true},
		{"mysql error packet", engine.ServerFirst, func(c net.Conn) seen {
			_, err := c.Write(greetingErr)
			return seen{err: err}
		}, v1alpha1.ReasonUnreachable, []string{"refused the connection before TLS: MySQL error 1130: Host '10.1.2.3' is not allowed"}, false},
		{"not mysql", engine.ServerFirst, func(c net.Conn) seen {
			_, err := c.Write([]byte("SSH-2.0-OpenSSH_9.2p1\r\n"))
			return seen{err: err}
		}, v1alpha1.ReasonNotTLS, []string{"did not greet like a MySQL server", `"SSH-2.0-OpenSSH_9.2p1\r\n"`}, false},
		{"TLS alert", engine.DirectTLS, directTLS(&tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return nil, errors.New("no certificate for this name")
		}}), v1alpha1.ReasonUnreachable, []string{"refused the TLS handshake before sending a certificate", perEngine}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := closedPort
			var b *backend
			if tc.handle != nil {
				b = startBackend(t, tc.handle)
				addr = b.addr
			}
			r := probe(t, Target{Address: addr, Start: tc.start, SNI: perEngine, Roots: ca.Pool()})
			wantReason(t, r, tc.reason, tc.msg...)
			if r.Certificate != nil || r.Chain != nil {
				t.Fatalf("a certificate without a handshake: %+v", r.Certificate)
			}
			if _, ok := Expiry(r); ok {
				t.Fatal("Expiry without a certificate")
			}
			if tc.checkAfter {
				if s := b.next(t); s.err != nil || s.after != 0 || s.early != 0 {
					t.Fatalf("backend saw %+v: the probe must send nothing after a refusal (no plaintext fallback)", s)
				}
			}
		})
	}
}

// A backend that accepts and never answers holds the probe only until ctx's deadline, in each
// phase; cancelling ctx ends it too.
func TestBounded(t *testing.T) {
	t.Parallel()
	silent := func(c net.Conn) seen { // reads until the probe gives up and closes
		_, _ = io.Copy(io.Discard, c)
		return seen{}
	}
	for _, tc := range []struct {
		start engine.Start
		msg   string
	}{
		{engine.DirectTLS, "did not answer the TLS ClientHello within"},
		{engine.PostgresSSLRequest, "did not answer PostgreSQL's SSLRequest within"},
		{engine.ServerFirst, "sent no complete greeting within"},
	} {
		t.Run(tc.start.String(), func(t *testing.T) {
			t.Parallel()
			b := startBackend(t, silent)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			r := Probe(ctx, Target{Address: b.addr, Start: tc.start, SNI: perEngine}, time.Now())
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("took %v with a 300ms deadline", took)
			}
			wantReason(t, r, v1alpha1.ReasonUnreachable, tc.msg)
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		b := startBackend(t, silent)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		r := Probe(ctx, Target{Address: b.addr, Start: engine.DirectTLS, SNI: perEngine}, time.Now())
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("took %v after a cancel at 200ms", took)
		}
		wantReason(t, r, v1alpha1.ReasonUnreachable, "cancelled")
	})
}

// A server that demands a client certificate fails the handshake after it sent its own (TLS
// 1.2; with 1.3 the client's side completes first): the certificate's verdict stands and the
// message says what failed.
func TestHandshakeFailsAfterCertificate(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, perEngine)
	b := startBackend(t, directTLS(&tls.Config{Certificates: []tls.Certificate{cert.TLS}, ClientAuth: tls.RequireAnyClientCert, MaxVersion: tls.VersionTLS12}))
	r := probe(t, Target{Address: b.addr, Start: engine.DirectTLS, SNI: perEngine, Roots: ca.Pool()})
	wantReason(t, r, v1alpha1.ReasonVerified, "failed the TLS handshake")
	if r.Certificate == nil || r.Certificate.Serial != cert.SerialHex() {
		t.Fatalf("certificate %+v", r.Certificate)
	}
}

// Without Roots the chain is not judged: a certificate of an unknown CA is Verified, and
// ChainsToTrustAnchor stays nil. Without Hostnames the SNI is the name to cover; without SNI
// the first hostname is sent.
func TestDefaults(t *testing.T) {
	t.Parallel()
	cert := testutil.NewCA(t).Issue(t, perEngine)
	b := startBackend(t, directTLS(tlsConfig(cert.TLS)))
	r := probe(t, Target{Address: b.addr, Start: engine.DirectTLS, SNI: perEngine})
	wantReason(t, r, v1alpha1.ReasonVerified, "not checked")
	if r.Certificate.ChainsToTrustAnchor != nil {
		t.Fatal("ChainsToTrustAnchor set without Roots")
	}
	if s := b.next(t); s.sni != perEngine {
		t.Fatalf("SNI %q", s.sni)
	}
	r = probe(t, Target{Address: b.addr, Start: engine.DirectTLS, Hostnames: []string{perEngine, flat}})
	wantReason(t, r, v1alpha1.ReasonMissingDNSNames, "add "+flat)
	if s := b.next(t); s.sni != perEngine {
		t.Fatalf("SNI %q, want the first hostname", s.sni)
	}
}

func TestInvalidTarget(t *testing.T) {
	t.Parallel()
	for _, tg := range []Target{
		{Start: engine.DirectTLS, SNI: perEngine},
		{Address: "127.0.0.1:1", Start: engine.Start(9), SNI: perEngine},
		{Address: "127.0.0.1:1", Start: engine.DirectTLS},
	} {
		if r := Probe(context.Background(), tg, time.Now()); r.Reason != v1alpha1.ReasonUnreachable || !strings.HasPrefix(r.Message, "probe: ") {
			t.Errorf("%+v: %+v", tg, r)
		}
	}
}
