package clienthello

// Helpers that obtain real ClientHellos: crypto/tls clients writing into a recording conn, and
// openssl s_client connecting to a listener that records. Also framing helpers that cut a
// ClientHello into records of other sizes, and a view of a ClientHello through crypto/tls to
// cross-check the parser against.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// recordingConn records what a TLS client writes and fails its reads, so the handshake stops
// right after the ClientHello (tcpproxy_test.go does the same).
type recordingConn struct {
	bytes.Buffer
}

func (c *recordingConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *recordingConn) Close() error                     { return nil }
func (c *recordingConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *recordingConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *recordingConn) SetDeadline(time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

// goHello returns the bytes a crypto/tls client with cfg writes before it first reads.
func goHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	var c recordingConn
	if err := tls.Client(&c, cfg).Handshake(); err == nil {
		t.Fatal("handshake against a recording conn succeeded")
	}
	if c.Len() == 0 {
		t.Fatal("tls client wrote nothing")
	}
	return c.Bytes()
}

// goCase is one crypto/tls client configuration and what its ClientHello must show.
type goCase struct {
	name  string
	cfg   *tls.Config
	sni   string // expected SNI; "" means absent
	alpn  []string
	tls13 bool
}

func goCases() []goCase {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + ".test"
	var allSuites []uint16
	for _, cs := range tls.CipherSuites() {
		allSuites = append(allSuites, cs.ID)
	}
	for _, cs := range tls.InsecureCipherSuites() {
		allSuites = append(allSuites, cs.ID)
	}
	return []goCase{
		{name: "go-tls13", cfg: &tls.Config{ServerName: "db.example.com"}, sni: "db.example.com", tls13: true},
		{name: "go-tls12-only", cfg: &tls.Config{ServerName: "db.example.com", MaxVersion: tls.VersionTLS12}, sni: "db.example.com"},
		{name: "go-alpn-h2", cfg: &tls.Config{ServerName: "web.example.com", NextProtos: []string{"h2", "http/1.1"}}, sni: "web.example.com", alpn: []string{"h2", "http/1.1"}, tls13: true},
		{name: "go-alpn-postgresql", cfg: &tls.Config{ServerName: "pg.example.com", NextProtos: []string{"postgresql"}}, sni: "pg.example.com", alpn: []string{"postgresql"}, tls13: true},
		{name: "go-no-sni", cfg: &tls.Config{InsecureSkipVerify: true}, tls13: true},
		{name: "go-ip-literal", cfg: &tls.Config{ServerName: "10.1.2.3"}, tls13: true}, // crypto/tls never sends an IP as SNI
		{name: "go-long-sni", cfg: &tls.Config{ServerName: long}, sni: long, tls13: true},
		{name: "go-upper-sni", cfg: &tls.Config{ServerName: "DB.Example.COM"}, sni: "DB.Example.COM", tls13: true},
		// crypto/tls strips trailing dots before sending (hostnameInSNI).
		{name: "go-trailing-dot", cfg: &tls.Config{ServerName: "db.example.com."}, sni: "db.example.com", tls13: true},
		{name: "go-many-suites", cfg: &tls.Config{ServerName: "legacy.example.com", MaxVersion: tls.VersionTLS12, CipherSuites: allSuites}, sni: "legacy.example.com"},
		{name: "go-tls10-min", cfg: &tls.Config{ServerName: "old.example.com", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS10}, sni: "old.example.com"},
	}
}

// goResumedHello returns a TLS 1.3 ClientHello that offers a session ticket: it carries
// pre_shared_key (the last extension, with binders) and psk_key_exchange_modes.
func goResumedHello(t testing.TB) []byte {
	t.Helper()
	cert := selfSigned(t, "resume.example.com")
	cache := tls.NewLRUClientSessionCache(1)
	ccfg := &tls.Config{ServerName: "resume.example.com", ClientSessionCache: cache, RootCAs: x509.NewCertPool()}
	ccfg.RootCAs.AddCert(cert.Leaf)
	scfg := &tls.Config{Certificates: []tls.Certificate{cert}}

	cc, sc := net.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := tls.Server(sc, scfg)
		if s.Handshake() == nil {
			s.Write([]byte{'x'}) // after the session ticket, so the client's Read picks the ticket up
		}
		sc.Close() // not s.Close: its close_notify would wait for a reader that is gone
	}()
	c := tls.Client(cc, ccfg)
	if err := c.Handshake(); err != nil {
		t.Fatalf("first handshake: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("read after handshake: %v", err)
	}
	cc.Close()
	wg.Wait()
	return goHello(t, ccfg)
}

// selfSigned returns a certificate for names that is its own CA, for in-process TLS servers.
var selfSigned = testutil.SelfSigned

// opensslCase is one openssl s_client command line and what its ClientHello must show.
type opensslCase struct {
	name  string
	args  []string
	sni   string
	alpn  []string
	tls13 bool
}

func opensslCases() []opensslCase {
	longALPN := make([]string, 40)
	for i := range longALPN {
		longALPN[i] = "proto-" + strings.Repeat("x", 10) + string(rune('a'+i%26))
	}
	return []opensslCase{
		{name: "openssl-sni", args: []string{"-servername", "x.test"}, sni: "x.test", tls13: true},
		{name: "openssl-alpn-postgresql", args: []string{"-servername", "pg.x.test", "-alpn", "postgresql"}, sni: "pg.x.test", alpn: []string{"postgresql"}, tls13: true},
		{name: "openssl-tls12", args: []string{"-tls1_2", "-servername", "x.test"}, sni: "x.test"},
		{name: "openssl-no-sni", args: []string{"-noservername"}, tls13: true},
		// -max_send_frag also cuts the ClientHello: a real multi-record hello.
		{name: "openssl-max-frag-512", args: []string{"-max_send_frag", "512", "-servername", "frag.x.test", "-alpn", strings.Join(longALPN, ",")}, sni: "frag.x.test", alpn: longALPN, tls13: true},
	}
}

// opensslHello runs openssl s_client against a listener that records the first handshake
// message the client sends and then hangs up.
func opensslHello(t testing.TB, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("openssl")
	testutil.Require(t, "openssl", err)
	ln, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"s_client", "-connect", ln.Addr().String()}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out // stdin is /dev/null
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()

	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v (openssl said: %s)", err, out.String())
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		if _, n, ok := unframe(buf); ok {
			return buf[:n]
		}
		k, err := conn.Read(tmp)
		buf = append(buf, tmp[:k]...)
		if err != nil {
			t.Fatalf("reading openssl's hello (%d bytes so far): %v", len(buf), err)
		}
	}
}

// unframe is an independent, permissive reassembler for test data: it returns the first
// handshake message of buf (4-byte header included) and the bytes its records span.
func unframe(buf []byte) (msg []byte, n int, ok bool) {
	for {
		if len(buf[n:]) < 5 {
			return nil, 0, false
		}
		l := int(buf[n+3])<<8 | int(buf[n+4])
		if len(buf[n+5:]) < l {
			return nil, 0, false
		}
		msg = append(msg, buf[n+5:n+5+l]...)
		n += 5 + l
		if len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) {
			return msg, n, true
		}
	}
}

// frame cuts the handshake message msg into handshake records with version 3.minor; size(i)
// is the body length of record i (at least 1; the last record takes what is left).
func frame(msg []byte, minor byte, size func(i int) int) []byte {
	var out []byte
	for i := 0; len(msg) > 0; i++ {
		k := min(max(size(i), 1), len(msg), MaxRecordLen)
		out = append(out, recordTypeHandshake, 3, minor, byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

// reframe re-cuts the ClientHello at the start of hello into records given by size.
func reframe(t testing.TB, hello []byte, size func(i int) int) []byte {
	t.Helper()
	msg, _, ok := unframe(hello)
	if !ok {
		t.Fatal("reframe: not a complete handshake message")
	}
	return frame(msg, hello[2], size)
}

func every(n int) func(int) int { return func(int) int { return n } }

func firstThen(first, rest int) func(int) int {
	return func(i int) int {
		if i == 0 {
			return first
		}
		return rest
	}
}

// stdlibView is what crypto/tls's server sees in hello: the SNI and ALPN its
// GetConfigForClient callback is given. A refused hello gives an error.
func stdlibView(hello []byte) (sni string, alpn []string, versions []uint16, err error) {
	cc, sc := net.Pipe()
	defer cc.Close()
	go io.Copy(io.Discard, cc) // alerts
	go func() {
		cc.Write(hello)
		cc.Close() // then EOF: crypto/tls must not wait for more
	}()
	sc.SetDeadline(time.Now().Add(10 * time.Second))
	errStop := errors.New("seen")
	var seen bool
	s := tls.Server(sc, &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
		seen = true
		sni, alpn, versions = chi.ServerName, chi.SupportedProtos, chi.SupportedVersions
		return nil, errStop
	}})
	err = s.Handshake()
	sc.Close()
	if seen {
		return sni, alpn, versions, nil
	}
	return "", nil, nil, err
}
