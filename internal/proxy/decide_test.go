//go:build linux

package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/clienthello"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/pgwire"
	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// The routing decision without sockets: every kind, every reason decide can give, and the
// PostgreSQL sequences readPreamble drives it through. The reasons that come from I/O
// (hello_timeout, client_closed: readPreamble; no_backend, dial_failed: connectBackend and
// router.Done; limit: Proxy.serve; the rest of outcome.go) are covered by the socket tests
// (TestFailClosed, e2e).

// decidePort is a TLS port with one listener of every kind.
func decidePort() *snapshot.Port {
	term := &snapshot.Listener{Name: "gw/term", Mode: snapshot.ModeTerminate}
	term.Routes.Add("x.test", route("x"))
	term.Routes.Add("pg.x.test", route("pgx"))
	https := &snapshot.Listener{Name: "gw/https", Mode: snapshot.ModeTerminate, HTTP: httpTable(nil)}
	return tlsPort("127.0.0.1:443", map[string]*snapshot.Listener{
		"": passthrough("gw/pass", map[string]*snapshot.Route{
			"db.example.com": route("db"),
			"pg.example.com": route("pg"),
		}),
		"x.test":          term,
		"pg.x.test":       term,
		"web.example.com": https,
		// A listener that matches but has no route: unknown_sni all the same.
		"frag.x.test": passthrough("gw/empty", nil),
	})
}

// capturedHello returns a ClientHello captured from the clients in ../clienthello/testdata (real
// bytes from crypto/tls and openssl; their SNIs are in hellos.golden there).
func capturedHello(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "clienthello", "testdata", name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goHello returns the first bytes a Go TLS client with cfg sends.
func goHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tls.Client(c, cfg).Handshake()
		c.Close()
	}()
	buf := make([]byte, 16<<10)
	n, err := s.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

var (
	sslRequest    = []byte(pgwire.SSLRequest)
	gssencRequest = []byte(pgwire.GSSENCRequest)
	cancelRequest = pgwire.AppendCancelRequest(nil, 4242, []byte{1, 2, 3, 4})
)

// startupMessage is a plaintext PostgreSQL StartupMessage (protocol 3.0).
func startupMessage() []byte {
	body := binary.BigEndian.AppendUint32(nil, pgwire.ProtocolVersion30)
	body = append(body, "user\x00u\x00database\x00d\x00\x00"...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(4+len(body))), body...)
}

func TestDecide(t *testing.T) {
	port := decidePort()
	tcp := passthrough("gw/tcp", nil)
	tcp.Route = route("tcp")
	tcpPort := &snapshot.Port{Address: "127.0.0.1:5432", Protocol: snapshot.ProtocolTCP, TCP: tcp}
	httpPort := &snapshot.Port{Address: "127.0.0.1:80", Protocol: snapshot.ProtocolHTTP}

	db := capturedHello(t, "go-tls13")
	oversized := goHello(t, &tls.Config{ServerName: "db.example.com", NextProtos: manyALPN(60)})
	if len(oversized) <= 4096 {
		t.Fatalf("oversized hello is %d bytes", len(oversized))
	}
	notClientHello := append([]byte(nil), db...)
	notClientHello[5] = 2 // a server_hello
	trailing := append([]byte(nil), db...)
	binary.BigEndian.PutUint16(trailing[3:], binary.BigEndian.Uint16(trailing[3:])+1)
	trailing = append(trailing, 0)
	// A record announcing a handshake message of 64 KiB, more than the parser's own cap.
	huge := []byte{0x16, 3, 1, 0x40, 0, 1, 0x01, 0x00, 0x00}

	type want struct {
		kind        decisionKind
		reason      outcome
		negotiation negotiation
		listener    string
		route       string
		sni         string
		pgBridge    bool
		reply       []byte
		consumed    int
		next        pgPhase
	}
	cases := []struct {
		name     string
		port     *snapshot.Port
		phase    pgPhase
		maxBytes int
		pre      []byte
		more     bool
		want     want
	}{
		// The kinds.
		{name: "tcp port, before any byte", port: tcpPort,
			want: want{kind: kindTCP, negotiation: negTCP, listener: "gw/tcp", route: "tcp"}},
		{name: "http port, before any byte", port: httpPort,
			want: want{kind: kindHTTP, negotiation: negHTTP}},
		{name: "passthrough, crypto/tls", pre: db,
			want: want{kind: kindPassthrough, negotiation: negTLS, listener: "gw/pass", route: "db", sni: "db.example.com"}},
		{name: "passthrough, TLS 1.2 only", pre: capturedHello(t, "go-tls12-only"),
			want: want{kind: kindPassthrough, negotiation: negTLS, listener: "gw/pass", route: "db", sni: "db.example.com"}},
		{name: "passthrough, 16 records", pre: capturedHello(t, "go-tls13-split100"),
			want: want{kind: kindPassthrough, negotiation: negTLS, listener: "gw/pass", route: "db", sni: "db.example.com"}},
		{name: "passthrough, bytes after the hello go along", pre: cat(db, []byte{0x14, 3, 3, 0, 1, 1}),
			want: want{kind: kindPassthrough, negotiation: negTLS, listener: "gw/pass", route: "db", sni: "db.example.com"}},
		{name: "passthrough, SNI normalized", pre: goHello(t, &tls.Config{ServerName: "DB.Example.COM"}),
			want: want{kind: kindPassthrough, negotiation: negTLS, listener: "gw/pass", route: "db", sni: "db.example.com"}},
		{name: "terminate, openssl", pre: capturedHello(t, "openssl-sni"),
			want: want{kind: kindTerminate, negotiation: negTLS, listener: "gw/term", route: "x", sni: "x.test"}},
		{name: "https", pre: goHello(t, &tls.Config{ServerName: "web.example.com", NextProtos: []string{"h2"}}),
			want: want{kind: kindHTTPS, negotiation: negHTTPS, listener: "gw/https", sni: "web.example.com"}},
		{name: "postgres direct TLS, passthrough", pre: capturedHello(t, "go-alpn-postgresql"),
			want: want{kind: kindPassthrough, negotiation: negPostgresDirect, listener: "gw/pass", route: "pg", sni: "pg.example.com", pgBridge: true}},
		{name: "postgres direct TLS, terminate", pre: capturedHello(t, "openssl-alpn-postgresql"),
			want: want{kind: kindTerminate, negotiation: negPostgresDirect, listener: "gw/term", route: "pgx", sni: "pg.x.test"}},
		{name: "hello after SSLRequest, passthrough", phase: pgAfterSSLRequest, pre: db,
			want: want{kind: kindPassthrough, negotiation: negPostgres, listener: "gw/pass", route: "db", sni: "db.example.com", pgBridge: true}},
		{name: "hello after SSLRequest, https", phase: pgAfterSSLRequest, pre: goHello(t, &tls.Config{ServerName: "web.example.com"}),
			want: want{kind: kindHTTPS, negotiation: negHTTPS, listener: "gw/https", sni: "web.example.com"}},
		{name: "SSLRequest", pre: sslRequest,
			want: want{kind: kindPGNegotiate, negotiation: negPostgres, reply: []byte{'S'}, consumed: 8, next: pgAfterSSLRequest}},
		{name: "GSSENCRequest", pre: gssencRequest,
			want: want{kind: kindPGNegotiate, negotiation: negTLS, reply: []byte{'N'}, consumed: 8, next: pgFirst}},
		{name: "GSSENCRequest with the SSLRequest behind it", pre: cat(gssencRequest, sslRequest),
			want: want{kind: kindPGNegotiate, negotiation: negTLS, reply: []byte{'N'}, consumed: 8, next: pgFirst}},
		{name: "CancelRequest", pre: cancelRequest,
			want: want{kind: kindPGCancel, negotiation: negPostgresCancel, consumed: 16}},

		// Undecided: read more.
		{name: "nothing yet", more: true,
			want: want{negotiation: negTLS}},
		{name: "record header only", pre: db[:3], more: true,
			want: want{negotiation: negTLS}},
		{name: "half a hello", pre: db[:len(db)/2], more: true,
			want: want{negotiation: negTLS}},
		{name: "part of a PostgreSQL request", pre: sslRequest[:5], more: true,
			want: want{negotiation: negTLS}},
		{name: "part of a CancelRequest", pre: cancelRequest[:12], more: true,
			want: want{negotiation: negPostgresCancel}},
		{name: "nothing yet after SSLRequest", phase: pgAfterSSLRequest, more: true,
			want: want{negotiation: negPostgres}},
		{name: "just under the cap", maxBytes: 1000, pre: db[:999], more: true,
			want: want{negotiation: negTLS}},

		// Every reject reason decide gives.
		{name: "no SNI, crypto/tls", pre: capturedHello(t, "go-no-sni"),
			want: want{kind: kindReject, reason: reasonNoSNI, negotiation: negTLS}},
		{name: "no SNI, openssl", pre: capturedHello(t, "openssl-no-sni"),
			want: want{kind: kindReject, reason: reasonNoSNI, negotiation: negTLS}},
		{name: "no SNI after SSLRequest", phase: pgAfterSSLRequest, pre: capturedHello(t, "go-no-sni"),
			want: want{kind: kindReject, reason: reasonNoSNI, negotiation: negPostgres}},
		{name: "unknown SNI", pre: capturedHello(t, "go-tls10-min"),
			want: want{kind: kindReject, reason: reasonUnknownSNI, negotiation: negTLS, sni: "old.example.com"}},
		{name: "listener without a route", pre: capturedHello(t, "openssl-max-frag-512"),
			want: want{kind: kindReject, reason: reasonUnknownSNI, negotiation: negTLS, sni: "frag.x.test"}},
		{name: "unknown SNI, direct TLS postgres", port: tlsPort("127.0.0.1:443", nil), pre: capturedHello(t, "go-alpn-postgresql"),
			want: want{kind: kindReject, reason: reasonUnknownSNI, negotiation: negPostgresDirect, sni: "pg.example.com"}},
		{name: "not TLS: HTTP", pre: []byte("GET / HTTP/1.1\r\nHost: db.example.com\r\n\r\n"),
			want: want{kind: kindReject, reason: reasonNotTLS, negotiation: negTLS}},
		{name: "not TLS: one byte is enough", pre: []byte("G"),
			want: want{kind: kindReject, reason: reasonNotTLS, negotiation: negTLS}},
		{name: "not TLS: record version 2", pre: []byte{0x16, 2, 0, 0, 10},
			want: want{kind: kindReject, reason: reasonNotTLS, negotiation: negTLS}},
		{name: "not TLS after SSLRequest: a second SSLRequest", phase: pgAfterSSLRequest, pre: sslRequest,
			want: want{kind: kindReject, reason: reasonNotTLS, negotiation: negPostgres}},
		{name: "not TLS after SSLRequest: a StartupMessage", phase: pgAfterSSLRequest, pre: startupMessage(),
			want: want{kind: kindReject, reason: reasonNotTLS, negotiation: negPostgres}},
		{name: "malformed: not a client_hello", pre: notClientHello,
			want: want{kind: kindReject, reason: reasonMalformed, negotiation: negTLS}},
		{name: "malformed: data after the hello in its record", pre: trailing,
			want: want{kind: kindReject, reason: reasonMalformed, negotiation: negTLS}},
		// The parser's own cap (64 KiB): counted malformed_hello, not hello_too_large, as it
		// always was.
		{name: "malformed: announces more than 64 KiB", pre: huge,
			want: want{kind: kindReject, reason: reasonMalformed, negotiation: negTLS}},
		{name: "passthrough, early data past the cap goes along", maxBytes: 4096, pre: cat(db, make([]byte, 8000)),
			want: want{kind: kindPassthrough, negotiation: negTLS, listener: "gw/pass", route: "db", sni: "db.example.com"}},
		{name: "too large: complete, but over the cap", maxBytes: 4096, pre: oversized,
			want: want{kind: kindReject, reason: reasonTooLarge, negotiation: negTLS}},
		{name: "too large: incomplete at the cap", maxBytes: 1000, pre: db[:1000],
			want: want{kind: kindReject, reason: reasonTooLarge, negotiation: negTLS}},
		{name: "too large: filler after a 16 KiB fragment header", maxBytes: 4096,
			pre:  cat([]byte{0x16, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xfc}, make([]byte, 4096-9)),
			want: want{kind: kindReject, reason: reasonTooLarge, negotiation: negTLS}},
		{name: "too large: an incomplete CancelRequest at the cap", maxBytes: 12, pre: cancelRequest[:12],
			want: want{kind: kindReject, reason: reasonTooLarge, negotiation: negPostgresCancel}},
		{name: "postgres plaintext StartupMessage", pre: startupMessage(),
			want: want{kind: kindReject, reason: reasonPGPlaintext, negotiation: negPostgresPlaintext, reply: pgPlaintextError}},
		{name: "postgres plaintext StartupMessage, first 8 bytes", pre: startupMessage()[:8],
			want: want{kind: kindReject, reason: reasonPGPlaintext, negotiation: negPostgresPlaintext, reply: pgPlaintextError}},
		{name: "postgres bytes after SSLRequest", pre: cat(sslRequest, db[:1]),
			want: want{kind: kindReject, reason: reasonPGSmuggled, negotiation: negPostgres}},
		{name: "postgres bytes after SSLRequest: a whole hello", pre: cat(sslRequest, db),
			want: want{kind: kindReject, reason: reasonPGSmuggled, negotiation: negPostgres}},
		{name: "postgres bytes after SSLRequest, past a tiny cap", maxBytes: 8, pre: cat(sslRequest, db),
			want: want{kind: kindReject, reason: reasonPGSmuggled, negotiation: negPostgres}},
		{name: "postgres bad packet: bytes after a CancelRequest, past the cap", maxBytes: 16, pre: cat(cancelRequest, []byte{0}),
			want: want{kind: kindReject, reason: reasonPGBadPacket, negotiation: negPostgresCancel}},
		{name: "postgres bad packet: SSLRequest of length 9", pre: []byte{0, 0, 0, 9, 0x04, 0xd2, 0x16, 0x2f, 0},
			want: want{kind: kindReject, reason: reasonPGBadPacket, negotiation: negTLS}},
		{name: "postgres bad packet: unknown request code", pre: []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x99},
			want: want{kind: kindReject, reason: reasonPGBadPacket, negotiation: negTLS}},
		{name: "postgres bad packet: bytes after a CancelRequest", pre: cat(cancelRequest, []byte{0}),
			want: want{kind: kindReject, reason: reasonPGBadPacket, negotiation: negPostgresCancel}},
	}
	// The table covers every kind and every reason decide can reject with.
	kinds, reasons := map[decisionKind]bool{}, map[outcome]bool{}
	for _, c := range cases {
		kinds[c.want.kind] = true
		reasons[c.want.reason] = true
	}
	for k := range kindNames {
		if k := decisionKind(k); k != kindUndecided && !kinds[k] { // undecided: the cases with more
			t.Errorf("no case decides %v", k)
		}
	}
	for _, r := range decideReasons {
		if !reasons[r] {
			t.Errorf("no case rejects with %s", r)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.port == nil {
				c.port = port
			}
			if c.maxBytes == 0 {
				c.maxBytes = 64 << 10
			}
			st := preambleState{maxBytes: c.maxBytes, phase: c.phase}
			d, more := decide(c.port, c.pre, &st)
			checkDecision(t, c.port, &st, c.pre, d, more)
			got := want{kind: d.kind, reason: d.reason, negotiation: d.negotiation, sni: string(d.sni()),
				pgBridge: d.pgBridge, reply: d.reply, consumed: d.consumed, next: d.next}
			if d.listener != nil {
				got.listener = d.listener.Name
			}
			if d.route != nil {
				got.route = d.route.Name
			}
			if more != c.more || got.kind != c.want.kind || got.reason != c.want.reason ||
				got.negotiation != c.want.negotiation || got.listener != c.want.listener ||
				got.route != c.want.route || got.sni != c.want.sni || got.pgBridge != c.want.pgBridge ||
				!bytes.Equal(got.reply, c.want.reply) || got.consumed != c.want.consumed || got.next != c.want.next {
				t.Errorf("decide = more %v, %+v\nwant   more %v, %+v", more, got, c.more, c.want)
			}
		})
	}
}

// decideReasons are the reasons decide rejects with (the others of outcome.go come later in
// a connection's life).
var decideReasons = []outcome{reasonNoSNI, reasonUnknownSNI, reasonNotTLS, reasonMalformed, reasonTooLarge,
	reasonPGSmuggled, reasonPGBadPacket, reasonPGPlaintext}

// manyALPN returns n distinct 100-byte ALPN protocol names, to pad a ClientHello.
func manyALPN(n int) []string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = string(rune('a'+i%26)) + strings.Repeat("x", 99)
	}
	return ps
}

// checkDecision checks what holds for every decision, whatever the bytes.
func checkDecision(t *testing.T, port *snapshot.Port, st *preambleState, pre []byte, d decision, more bool) {
	t.Helper()
	if more {
		if d.kind != kindUndecided || d.reply != nil || d.listener != nil || d.route != nil {
			t.Fatalf("undecided with %+v", d)
		}
		if port.Protocol != snapshot.ProtocolTLS || len(pre) >= st.maxBytes {
			t.Fatalf("undecided on a %s port with %d bytes (cap %d)", port.Protocol, len(pre), st.maxBytes)
		}
		return
	}
	if d.negotiation == negNone {
		t.Fatalf("%v without a negotiation", d.kind)
	}
	if d.reason != "" && d.kind != kindReject {
		t.Fatalf("%v with reason %q", d.kind, d.reason)
	}
	switch d.kind {
	case kindReject:
		// Fail closed: nothing written, but to a plaintext PostgreSQL client, who reads why.
		switch {
		case !slices.Contains(decideReasons, d.reason) && !slices.Contains(decideProxyReasons, d.reason) &&
			!slices.Contains(decideAccessReasons, d.reason):
			t.Fatalf("reject with reason %q, which is not decide's", d.reason)
		case d.reason == reasonPGPlaintext:
			if !bytes.Equal(d.reply, pgPlaintextError) {
				t.Fatalf("%s writes %q", d.reason, d.reply)
			}
		case d.reply != nil:
			t.Fatalf("%s writes %q", d.reason, d.reply)
		}
		// An AccessPolicy's refusal names the path it refused (for the logs); nothing else
		// got that far.
		if (d.listener != nil || d.route != nil) != slices.Contains(decideAccessReasons, d.reason) {
			t.Fatalf("%s with listener %v, route %v", d.reason, d.listener, d.route)
		}
		if !d.hold.Empty() {
			t.Fatalf("%s holds counts", d.reason)
		}
	case kindPassthrough, kindTerminate:
		l, r := port.Lookup(d.sni())
		if len(d.sni()) == 0 || l != d.listener || r != d.route || r == nil || l.HTTP != nil ||
			(l.Mode == snapshot.ModeTerminate) != (d.kind == kindTerminate) {
			t.Fatalf("%v of %q to %v, %v: Lookup says %v, %v", d.kind, d.sni(), d.listener, d.route, l, r)
		}
		if d.pgBridge && (d.kind != kindPassthrough || d.negotiation != negPostgres && d.negotiation != negPostgresDirect) {
			t.Fatalf("%v with the SSLRequest bridge, negotiation %s", d.kind, d.negotiation)
		}
	case kindHTTPS:
		if l, _ := port.Lookup(d.sni()); l == nil || l != d.listener || l.HTTP == nil {
			t.Fatalf("https of %q to %v", d.sni(), d.listener)
		}
	case kindTCP:
		if port.Protocol != snapshot.ProtocolTCP || d.listener != port.TCP || d.route != port.TCP.Route {
			t.Fatal("tcp decision off a tcp port's listener")
		}
	case kindHTTP:
		if port.Protocol != snapshot.ProtocolHTTP {
			t.Fatal("http decision off an http port")
		}
	case kindPGNegotiate:
		if st.phase != pgFirst || d.consumed != 8 || len(pre) < 8 {
			t.Fatalf("negotiate in phase %d, consumed %d of %d", st.phase, d.consumed, len(pre))
		}
		ssl := bytes.Equal(d.reply, []byte{'S'})
		if !ssl && !bytes.Equal(d.reply, []byte{'N'}) || ssl != (d.next == pgAfterSSLRequest) || ssl && len(pre) != 8 {
			t.Fatalf("negotiate replies %q, next %d, with %d bytes", d.reply, d.next, len(pre))
		}
	case kindPGCancel:
		if st.phase != pgFirst || d.consumed != len(pre) {
			t.Fatalf("cancel in phase %d, consumed %d of %d", st.phase, d.consumed, len(pre))
		}
		if _, _, err := pgwire.ParseCancel(pre); err != nil {
			t.Fatalf("cancel of a packet ParseCancel refuses: %v", err)
		}
	default:
		t.Fatalf("kind %v", d.kind)
	}
	if d.kind != kindPGNegotiate && d.reply != nil && d.reason != reasonPGPlaintext {
		t.Fatalf("%v writes %q", d.kind, d.reply)
	}
}

// sameDecision compares decisions field by field (reply is a slice).
func sameDecision(a, b decision) bool {
	return a.kind == b.kind && a.reason == b.reason && a.negotiation == b.negotiation &&
		a.listener == b.listener && a.route == b.route && a.pgBridge == b.pgBridge &&
		bytes.Equal(a.reply, b.reply) && a.consumed == b.consumed && a.next == b.next &&
		bytes.Equal(a.sni(), b.sni())
}

// settle drives decide the way readPreamble does, without a socket: the client's bytes
// arrive in the chunks given, the answers decide asks for are collected in replies, and
// the bytes of an answered request are dropped. It returns the final decision, or more
// when the chunks ran out first, and the bytes the decision applies to.
func settle(t *testing.T, port *snapshot.Port, maxBytes int, chunks ...[]byte) (d decision, more bool, replies, pre []byte) {
	t.Helper()
	st := preambleState{maxBytes: maxBytes}
	for _, ch := range chunks {
		pre = append(pre, ch...)
		for {
			d, more = decide(port, pre, &st)
			checkDecision(t, port, &st, pre, d, more)
			// The parser's progress through earlier prefixes changes nothing.
			fresh := preambleState{maxBytes: maxBytes, phase: st.phase}
			if d2, more2 := decide(port, pre, &fresh); more2 != more || !sameDecision(d2, d) {
				t.Fatalf("decide with a fresh parser says %v/%v, with the used one %v/%v", d2.kind, more2, d.kind, more)
			}
			if more {
				break
			}
			if d.kind != kindPGNegotiate {
				return d, false, replies, pre
			}
			replies = append(replies, d.reply...)
			pre = pre[d.consumed:]
			st.phase = d.next
		}
	}
	return d, true, replies, pre
}

func TestDecideSequences(t *testing.T) {
	port := decidePort()
	db := capturedHello(t, "go-tls13")
	cases := []struct {
		name    string
		chunks  [][]byte
		more    bool
		kind    decisionKind
		reason  outcome
		neg     negotiation
		replies string
		bridge  bool
	}{
		{name: "libpq: SSLRequest, then the hello", chunks: [][]byte{sslRequest, db},
			kind: kindPassthrough, neg: negPostgres, replies: "S", bridge: true},
		{name: "libpq with GSS: GSSENCRequest, SSLRequest, hello", chunks: [][]byte{gssencRequest, sslRequest, db},
			kind: kindPassthrough, neg: negPostgres, replies: "NS", bridge: true},
		{name: "GSSENCRequest and SSLRequest in one segment", chunks: [][]byte{cat(gssencRequest, sslRequest), db},
			kind: kindPassthrough, neg: negPostgres, replies: "NS", bridge: true},
		{name: "SSLRequest, hello in pieces", chunks: [][]byte{sslRequest, db[:1], db[1:5], db[5:700], db[700:]},
			kind: kindPassthrough, neg: negPostgres, replies: "S", bridge: true},
		{name: "SSLRequest, hello to a terminate listener", chunks: [][]byte{sslRequest, capturedHello(t, "openssl-sni")},
			kind: kindTerminate, neg: negPostgres, replies: "S"},
		{name: "GSSENCRequest, then direct TLS", chunks: [][]byte{gssencRequest, capturedHello(t, "go-alpn-postgresql")},
			kind: kindPassthrough, neg: negPostgresDirect, replies: "N", bridge: true},
		{name: "GSSENCRequest, then a CancelRequest", chunks: [][]byte{gssencRequest, cancelRequest},
			kind: kindPGCancel, neg: negPostgresCancel, replies: "N"},
		{name: "CancelRequest in two pieces", chunks: [][]byte{cancelRequest[:3], cancelRequest[3:]},
			kind: kindPGCancel, neg: negPostgresCancel},
		{name: "GSSENCRequest, then plaintext", chunks: [][]byte{gssencRequest, startupMessage()},
			kind: kindReject, reason: reasonPGPlaintext, neg: negPostgresPlaintext, replies: "N"},
		{name: "SSLRequest, then plaintext", chunks: [][]byte{sslRequest, startupMessage()},
			kind: kindReject, reason: reasonNotTLS, neg: negPostgres, replies: "S"},
		{name: "SSLRequest twice", chunks: [][]byte{sslRequest, sslRequest},
			kind: kindReject, reason: reasonNotTLS, neg: negPostgres, replies: "S"},
		{name: "SSLRequest with the hello in the same segment", chunks: [][]byte{cat(sslRequest, db)},
			kind: kindReject, reason: reasonPGSmuggled, neg: negPostgres},
		{name: "SSLRequest, then a client that goes quiet", chunks: [][]byte{sslRequest},
			more: true, neg: negPostgres, replies: "S"},
		{name: "SSLRequest, hello over the cap", chunks: [][]byte{sslRequest, db[:1000]},
			kind: kindReject, reason: reasonTooLarge, neg: negPostgres, replies: "S"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			max := 64 << 10
			if c.reason == reasonTooLarge {
				max = 1000
			}
			d, more, replies, pre := settle(t, port, max, c.chunks...)
			if more != c.more || d.kind != c.kind || d.reason != c.reason || d.negotiation != c.neg ||
				string(replies) != c.replies || d.pgBridge != c.bridge {
				t.Errorf("settled: more %v, %v %q, negotiation %s, replies %q, bridge %v\nwant:    more %v, %v %q, negotiation %s, replies %q, bridge %v",
					more, d.kind, d.reason, d.negotiation, replies, d.pgBridge,
					c.more, c.kind, c.reason, c.neg, c.replies, c.bridge)
			}
			// What is forwarded is every byte after the answered requests, as sent.
			if in := cat(c.chunks...); d.kind == kindPassthrough &&
				(!bytes.HasSuffix(in, pre) || len(in)-len(pre) != 8*len(replies)) {
				t.Errorf("passthrough forwards %d of %d bytes after %d answers", len(pre), len(in), len(replies))
			}
		})
	}
}

// The label values users see are fixed: this pins every one of them.
func TestOutcomeLabels(t *testing.T) {
	for got, want := range map[outcome]string{
		reasonNoSNI: "no_sni", reasonUnknownSNI: "unknown_sni", reasonNotTLS: "not_tls",
		reasonMalformed: "malformed_hello", reasonTooLarge: "hello_too_large",
		reasonPGPlaintext: "postgres_plaintext_refused", reasonPGSmuggled: "postgres_bytes_after_sslrequest",
		reasonPGBadPacket: "postgres_bad_packet", reasonTimeout: "hello_timeout",
		reasonClientGone: "client_closed", reasonNoBackend: "no_backend", reasonDialFailed: "dial_failed",
		reasonLimit: "limit", reasonAcceptFailed: "accept_failed", reasonRelayFailed: "relay_failed",
		reasonPGCancelDrop: "postgres_cancel_dropped", outcomeOK: "ok", reasonHandshake: "tls_handshake_failed",
		reasonBackendNoTLS: "backend_refused_tls", outcomeBackendNotTLS: "backend_not_tls",
		outcomeBackendWriteFailed: "backend_write_failed", outcomePortClosed: "port_closed",
		outcomeIdle: "idle_timeout", outcomeShutdown: "shutdown", outcomePGCancelForwarded: "postgres_cancel_forwarded",
	} {
		if string(got) != want {
			t.Errorf("outcome %q, want %q", got, want)
		}
	}
	for got, want := range map[negotiation]string{
		negNone: "", negTLS: "tls", negTCP: "tcp", negHTTP: "http", negHTTPS: "https",
		negPostgres: "postgres", negPostgresDirect: "postgres-direct",
		negPostgresPlaintext: "postgres-plaintext", negPostgresCancel: "postgres-cancel",
	} {
		if string(got) != want {
			t.Errorf("negotiation %q, want %q", got, want)
		}
	}
	// The relay's own outcomes are the same values, not copies of them.
	if string(outcomeBackendNotTLS) != relay.OutcomeNotTLS || string(reasonDialFailed) != relay.OutcomeDialFailed {
		t.Error("relay outcomes diverged")
	}
}

// The relay's loops decide every passthrough connection: deciding must not allocate.
func TestDecidePassthroughAllocatesNothing(t *testing.T) {
	port, pre := decidePort(), capturedHello(t, "go-tls13")
	allocs := testing.AllocsPerRun(100, func() {
		st := preambleState{maxBytes: 64 << 10}
		if d, _ := decide(port, pre, &st); d.kind != kindPassthrough {
			t.Fatal(d.kind)
		}
	})
	if allocs != 0 {
		t.Errorf("decide allocates %v times per passthrough ClientHello", allocs)
	}
}

// BenchmarkDecidePassthrough is what router.Route spends deciding a passthrough connection:
// a fresh state, as on the relay's loops.
func BenchmarkDecidePassthrough(b *testing.B) {
	port, pre := decidePort(), capturedHello(b, "go-tls13")
	b.ReportAllocs()
	for b.Loop() {
		st := preambleState{maxBytes: 64 << 10}
		if d, _ := decide(port, pre, &st); d.kind != kindPassthrough {
			b.Fatal(d.kind)
		}
	}
}

func decideSeeds(f *testing.F) {
	for _, name := range []string{"go-tls13", "go-alpn-postgresql", "go-no-sni", "go-tls13-split100",
		"openssl-sni", "openssl-alpn-postgresql", "openssl-max-frag-512", "go-tls10-min"} {
		h := capturedHello(f, name)
		f.Add(h, uint8(0))
		f.Add(cat(sslRequest, h), uint8(7)) // FuzzPostgresPreamble: the SSLRequest alone first
		f.Add(cat(gssencRequest, sslRequest, h), uint8(7))
	}
	f.Add(sslRequest, uint8(0))
	f.Add(gssencRequest, uint8(3))
	f.Add(cancelRequest, uint8(5))
	f.Add(pgwire.AppendCancelRequest(nil, 1, bytes.Repeat([]byte{7}, 32)), uint8(0))
	f.Add(startupMessage(), uint8(0))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), uint8(0))
	f.Add([]byte{0x16, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xfc}, uint8(0))
}

// FuzzDecide checks decide's invariants (checkDecision) on any bytes, in either PostgreSQL
// phase and under small caps, and that a decision never depends on the parser's progress
// through earlier calls.
func FuzzDecide(f *testing.F) {
	decideSeeds(f)
	port := decidePort()
	f.Fuzz(func(t *testing.T, pre []byte, knobs uint8) {
		phase := pgPhase(knobs & 1)
		maxBytes := 64 << 10
		if knobs&2 != 0 {
			maxBytes = 1 + int(knobs>>2)*40
		}
		st := preambleState{maxBytes: maxBytes, phase: phase}
		// The parser first sees a prefix, as on a connection whose bytes come in pieces.
		if cut := len(pre) / 2; cut > 0 {
			d, more := decide(port, pre[:cut], &st)
			checkDecision(t, port, &st, pre[:cut], d, more)
		}
		d, more := decide(port, pre, &st)
		checkDecision(t, port, &st, pre, d, more)
		fresh := preambleState{maxBytes: maxBytes, phase: phase}
		if d2, more2 := decide(port, pre, &fresh); !sameDecision(d2, d) || more2 != more {
			t.Fatalf("fresh parser: %v/%v, used one: %v/%v", d2.kind, more2, d.kind, more)
		}
	})
}

// FuzzPostgresPreamble drives decide through PostgreSQL preamble sequences (SSLRequest,
// GSSENCRequest, CancelRequest, StartupMessage, direct TLS) the way readPreamble does, the
// bytes cut into segments at fuzzed points: whatever comes, the answers are some 'N's then
// at most one 'S', nothing is answered after the 'S', and what follows the 'S' is a
// ClientHello routed with the SSLRequest bridge, or a reject.
func FuzzPostgresPreamble(f *testing.F) {
	decideSeeds(f)
	port := decidePort()
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		var chunks [][]byte
		size := 1 + int(step)
		for len(in) > 0 {
			k := min(size, len(in))
			chunks = append(chunks, in[:k])
			in = in[k:]
			size = 1 + (size*7+int(step))%64
		}
		d, more, replies, _ := settle(t, port, 64<<10, chunks...)
		s := bytes.IndexByte(replies, 'S')
		if strings.Trim(string(replies), "N") != "" && (s < 0 || s != len(replies)-1) {
			t.Fatalf("answers %q", replies)
		}
		if s >= 0 && !more {
			switch {
			case d.kind == kindPassthrough && (!d.pgBridge || d.negotiation != negPostgres):
				t.Fatalf("after 'S': passthrough, bridge %v, negotiation %s", d.pgBridge, d.negotiation)
			case d.kind == kindPGCancel, d.kind == kindReject && d.reason == reasonPGPlaintext:
				t.Fatalf("after 'S': %v %s", d.kind, d.reason)
			case d.kind != kindHTTPS && d.negotiation != negPostgres:
				t.Fatalf("after 'S': %v with negotiation %s", d.kind, d.negotiation)
			}
		}
	})
}

// segments is a client's bytes as they arrive: each Read returns what fits of the next
// segment, and once they ran out, a timeout.
type segments [][]byte

func (s *segments) read(b []byte) (int, error) {
	for len(*s) > 0 && len((*s)[0]) == 0 {
		*s = (*s)[1:]
	}
	if len(*s) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	n := copy(b, (*s)[0])
	(*s)[0] = (*s)[0][n:]
	return n, nil
}

// settled is where a connection's preamble ends, as the access log and metrics see it.
type settled struct {
	kind        decisionKind
	reason      outcome
	negotiation negotiation
	sni         string
	pgBridge    bool
	replies     string
	pre         string // the bytes forwarded (passthrough, terminate, https) or the cancel packet
}

// readModel is readPreamble's loop on segments instead of a socket: the same buffer sizes,
// growth and order of reading, answering and deciding.
func readModel(port *snapshot.Port, maxBytes int, in segments) settled {
	st := preambleState{maxBytes: maxBytes}
	var replies []byte
	buf := make([]byte, 4096)
	n := 0
	d, more := decide(port, nil, &st)
	var rerr error
	for {
		if !more {
			if d.kind != kindPGNegotiate {
				break
			}
			replies = append(replies, d.reply...)
			n = copy(buf, buf[d.consumed:n])
			st.phase = d.next
		} else {
			if rerr != nil {
				d.reject(reasonTimeout)
				break
			}
			if n == len(buf) {
				nb := make([]byte, min(2*len(buf), st.maxBytes))
				copy(nb, buf[:n])
				buf = nb
			}
			var k int
			k, rerr = in.read(buf[n:])
			n += k
		}
		d, more = decide(port, buf[:n], &st)
	}
	s := settled{kind: d.kind, reason: d.reason, negotiation: d.negotiation, sni: string(d.sni()),
		pgBridge: d.pgBridge, replies: string(replies)}
	switch d.kind {
	case kindPassthrough, kindTerminate, kindHTTPS:
		s.pre = string(buf[:n])
	case kindPGCancel:
		s.pre = string(buf[:d.consumed])
	}
	return s
}

// oldReadModel is the goroutine path as it was before decide (readPreamble reading and
// deciding in one loop, then handle's SNI lookup), on segments: the oracle that decide
// changed no outcome.
func oldReadModel(port *snapshot.Port, max int, in segments) settled {
	var (
		parser  clienthello.Parser
		hello   clienthello.Hello
		replies []byte
		neg     = negTLS
		pgSSL   bool
		pgPhase int
		buf     = make([]byte, 4096)
		n       int
	)
	reject := func(r outcome) settled {
		return settled{kind: kindReject, reason: r, negotiation: neg, replies: string(replies)}
	}
	for {
		if n == len(buf) {
			if n >= max {
				return reject(reasonTooLarge)
			}
			nb := make([]byte, min(2*len(buf), max))
			copy(nb, buf[:n])
			buf = nb
		}
		k, err := in.read(buf[n:])
		n += k
	decide:
		for k > 0 && n > 0 {
			if pgPhase == 0 && buf[0] != 0x16 {
				kind, size, perr := pgwire.Classify(buf[:n])
				if errors.Is(perr, pgwire.ErrIncomplete) {
					break decide
				}
				if perr != nil {
					if buf[0] != 0 {
						return reject(reasonNotTLS)
					}
					return reject(reasonPGBadPacket)
				}
				switch kind {
				case pgwire.KindSSLRequest:
					neg = negPostgres
					if n > size {
						return reject(reasonPGSmuggled)
					}
					replies = append(replies, 'S')
					pgSSL, pgPhase, n = true, 1, 0
					break decide
				case pgwire.KindGSSENCRequest:
					replies = append(replies, 'N')
					n = copy(buf, buf[size:n])
					continue
				case pgwire.KindStartup:
					neg = negPostgresPlaintext
					return reject(reasonPGPlaintext)
				case pgwire.KindCancelRequest:
					neg = negPostgresCancel
					if n < size {
						break decide
					}
					if n > size {
						return reject(reasonPGBadPacket)
					}
					return settled{kind: kindPGCancel, negotiation: neg, replies: string(replies), pre: string(buf[:n])}
				}
			}
			if pgPhase == 0 {
				pgPhase = 2
			}
			perr := parser.Parse(buf[:n], &hello)
			switch {
			case perr == nil:
				if pgPhase == 2 && hello.HasALPN("postgresql") {
					neg, pgSSL = negPostgresDirect, true
				}
				var sniBuf [snapshot.MaxHostnameLen]byte
				sni, ok := snapshot.NormalizeSNI(sniBuf[:], hello.SNI)
				if !ok {
					return reject(reasonNoSNI)
				}
				s := settled{negotiation: neg, sni: string(sni), replies: string(replies), pre: string(buf[:n])}
				l, r := port.Lookup(sni)
				switch {
				case l != nil && l.HTTP != nil:
					s.kind, s.negotiation = kindHTTPS, negHTTPS
				case l == nil || r == nil:
					return settled{kind: kindReject, reason: reasonUnknownSNI, negotiation: neg, sni: string(sni), replies: string(replies)}
				case l.Mode == snapshot.ModeTerminate:
					s.kind = kindTerminate
				default:
					s.kind, s.pgBridge = kindPassthrough, pgSSL
				}
				return s
			case errors.Is(perr, clienthello.ErrIncomplete):
				break decide
			case errors.Is(perr, clienthello.ErrNotTLS):
				return reject(reasonNotTLS)
			default:
				return reject(reasonMalformed)
			}
		}
		if err != nil {
			return reject(reasonTimeout)
		}
	}
}

// FuzzDecideAgainstOld checks that the goroutine path settles every connection exactly as
// it did before the decision was one function: same kind, reason, negotiation, SNI,
// answers and forwarded bytes, whatever the bytes and however they are cut.
func FuzzDecideAgainstOld(f *testing.F) {
	decideSeeds(f)
	port := decidePort()
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		var segs segments
		size := 1 + int(step)
		for rest := in; len(rest) > 0; {
			k := min(size, len(rest))
			segs = append(segs, rest[:k])
			rest = rest[k:]
			size = 1 + (size*7+int(step))%2000
		}
		maxBytes := 64 << 10
		if step&1 != 0 {
			maxBytes = 4096
		}
		// Each model consumes its segments: give each its own copy of the slice headers.
		got := readModel(port, maxBytes, append(segments(nil), segs...))
		want := oldReadModel(port, maxBytes, append(segments(nil), segs...))
		if got != want {
			t.Fatalf("decide: %+v\nbefore: %+v", got, want)
		}
		// On the relay's loops: the connections relayed there are the ones they were.
		if len(in) > 16<<10 {
			in = in[:16<<10] // the relay's buffer
		}
		st := preambleState{maxBytes: maxBytes}
		d, more := decide(port, in, &st)
		relayed := !more && d.kind == kindPassthrough && !d.pgBridge
		l, r, sni := oldRoute(port, maxBytes, in)
		if relayed != (l != nil) || relayed && (d.listener != l || d.route != r || string(d.sni()) != sni) {
			t.Fatalf("relayed %v to %v %v %q; before: %v %v %q", relayed, d.listener, d.route, d.sni(), l, r, sni)
		}
	})
}

// oldRoute is router.Route as it was before decide: the listener and route it connected
// a passthrough connection to, or nil.
func oldRoute(port *snapshot.Port, maxBytes int, pre []byte) (*snapshot.Listener, *snapshot.Route, string) {
	if len(pre) == 0 || pre[0] != 0x16 {
		return nil, nil, ""
	}
	var (
		hello  clienthello.Hello
		parser = clienthello.Parser{MaxLen: maxBytes}
	)
	if err := parser.Parse(pre, &hello); err != nil || hello.HasALPN("postgresql") {
		return nil, nil, ""
	}
	var sniBuf [snapshot.MaxHostnameLen]byte
	sni, ok := snapshot.NormalizeSNI(sniBuf[:], hello.SNI)
	if !ok {
		return nil, nil, ""
	}
	l, r := port.Lookup(sni)
	if l == nil || r == nil || l.HTTP != nil || l.Mode == snapshot.ModeTerminate {
		return nil, nil, ""
	}
	return l, r, string(sni)
}

// BenchmarkEnterRoute is what counting a connection on its route adds to it: the cached
// gauge's lookup, its Inc, and the Dec at the end, from every core at once.
func BenchmarkEnterRoute(b *testing.B) {
	p := New(Options{Metrics: metrics.New()})
	b.RunParallel(func(pb *testing.PB) {
		c := &conn{p: p, route: "TLSRoute/db/pg"}
		for pb.Next() {
			c.routeActive = nil
			c.enterRoute()
			c.routeActive.Dec()
		}
	})
}

// decideProxyReasons are the reasons decide rejects with on a port with a ListenerPolicy.
var decideProxyReasons = []outcome{reasonProxyUntrusted, reasonProxyRequired, reasonProxyMalformed}

// A port with a ListenerPolicy: the PROXY header of a trusted load balancer is read and
// skipped, the decision is on the bytes after it (in the same call), and its address is the
// client's; a header from anyone else, a missing one where required, or a broken one closes.
func TestDecideProxyHeader(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	required := decidePort()
	required.ProxyIn = &snapshot.InboundProxy{Trusted: trusted, Required: true}
	optional := decidePort()
	optional.ProxyIn = &snapshot.InboundProxy{Trusted: trusted}
	tcp := &snapshot.Port{Address: "127.0.0.1:4222", Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("tcp")}, ProxyIn: &snapshot.InboundProxy{Trusted: trusted}}
	lb, outsider := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.9")
	client := netip.MustParseAddrPort("203.0.113.7:51234")
	v1, _ := proxyproto.Header(1, client, netip.MustParseAddrPort("10.9.9.9:443"), proxyproto.TLVs{})
	v2, _ := proxyproto.Header(2, client, netip.MustParseAddrPort("10.9.9.9:443"), proxyproto.TLVs{Authority: "db.example.com"})
	local := []byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00")
	db := capturedHello(t, "go-tls13")
	sslRequest := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

	type want struct {
		kind     decisionKind
		reason   outcome
		route    string
		skip     int
		source   netip.AddrPort
		consumed int
	}
	cases := []struct {
		name string
		port *snapshot.Port
		peer netip.Addr
		pre  []byte
		more bool
		want want
	}{
		{"v2 from the load balancer", required, lb, cat(v2, db), false, want{kind: kindPassthrough, route: "db", skip: len(v2), source: client}},
		{"v1 from the load balancer", required, lb, cat(v1, db), false, want{kind: kindPassthrough, route: "db", skip: len(v1), source: client}},
		{"LOCAL: the balancer's own connection", required, lb, cat(local, db), false, want{kind: kindPassthrough, route: "db", skip: len(local)}},
		{"part of the header", required, lb, v2[:20], true, want{}},
		{"part of the signature", required, lb, v2[:3], true, want{}},
		{"the header, part of the hello", required, lb, cat(v2, db[:50]), true, want{}},
		{"header then SSLRequest", required, lb, cat(v2, sslRequest), false, want{kind: kindPGNegotiate, skip: len(v2), source: client, consumed: len(v2) + 8}},
		{"a header from outside the trusted ranges", required, outsider, cat(v2, db), false, want{kind: kindReject, reason: reasonProxyUntrusted}},
		{"outside the trusted ranges, no header", required, outsider, db, false, want{kind: kindPassthrough, route: "db"}},
		{"trusted, no header, required", required, lb, db, false, want{kind: kindReject, reason: reasonProxyRequired}},
		{"trusted, no header, not required", optional, lb, db, false, want{kind: kindPassthrough, route: "db"}},
		{"a broken header", required, lb, []byte("PROXY TCP4 1.2.3.4\r\n"), false, want{kind: kindReject, reason: reasonProxyMalformed}},
		{"tcp port, outsider, nothing read", tcp, outsider, nil, false, want{kind: kindTCP, route: "tcp"}},
		{"tcp port, balancer, nothing yet", tcp, lb, nil, true, want{}},
		{"tcp port, balancer's header", tcp, lb, cat(v1, []byte("CONNECT {}")), false, want{kind: kindTCP, route: "tcp", skip: len(v1), source: client}},
	}
	reasons := map[outcome]bool{}
	for _, c := range cases {
		reasons[c.want.reason] = true
	}
	for _, r := range decideProxyReasons {
		if !reasons[r] {
			t.Errorf("no case rejects with %s", r)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := preambleState{maxBytes: 64 << 10, peer: c.peer}
			d, more := decide(c.port, c.pre, &st)
			got := want{kind: d.kind, reason: d.reason, skip: d.skip, source: d.source, consumed: d.consumed}
			if d.route != nil {
				got.route = d.route.Name
			}
			if more != c.more || got != c.want {
				t.Errorf("decide = more %v, %+v\nwant   more %v, %+v", more, got, c.more, c.want)
			}
			if more && (d.kind != kindUndecided || d.skip != 0) {
				t.Errorf("undecided with %+v", d)
			}
		})
	}
}

// FuzzDecideProxyHeader: on a port with a ListenerPolicy, whatever a trusted balancer sends,
// decide does not panic, and what it decides after a header it skipped is exactly what the
// port without a policy decides on the bytes after it.
func FuzzDecideProxyHeader(f *testing.F) {
	client := netip.MustParseAddrPort("203.0.113.7:51234")
	db := capturedHello(f, "go-tls13")
	for _, v := range []uint8{1, 2} {
		h, _ := proxyproto.Header(v, client, netip.MustParseAddrPort("10.9.9.9:443"), proxyproto.TLVs{Authority: "db.example.com", ALPN: "h2"})
		f.Add(cat(h, db), true)
		f.Add(cat(h, []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}), false)
	}
	f.Add([]byte("PROXY UNKNOWN\r\n"), true)
	f.Add(db, false)
	plain := decidePort()
	withPolicy := decidePort()
	withPolicy.ProxyIn = &snapshot.InboundProxy{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	f.Fuzz(func(t *testing.T, pre []byte, required bool) {
		withPolicy.ProxyIn.Required = required
		st := preambleState{maxBytes: 16 << 10, peer: netip.MustParseAddr("10.1.2.3")}
		d, more := decide(withPolicy, pre, &st)
		if more || d.skip == 0 {
			return
		}
		if d.skip > len(pre) || d.kind == kindReject && (d.reason == reasonProxyMalformed || d.reason == reasonProxyUntrusted) {
			t.Fatalf("skip %d of %d bytes, %v %s", d.skip, len(pre), d.kind, d.reason)
		}
		st2 := preambleState{maxBytes: 16 << 10}
		d2, more2 := decide(plain, pre[d.skip:], &st2)
		consumed := d2.consumed
		if d2.kind == kindPGNegotiate || d2.kind == kindPGCancel {
			consumed += d.skip
		}
		name := func(r *snapshot.Route) string {
			if r == nil {
				return ""
			}
			return r.Name
		}
		if more2 || d2.kind != d.kind || d2.reason != d.reason || name(d2.route) != name(d.route) || consumed != d.consumed {
			t.Fatalf("after the header: %v %s %v (consumed %d); without a policy: %v %s %v (consumed %d)",
				d.kind, d.reason, d.route, d.consumed, d2.kind, d2.reason, d2.route, d2.consumed)
		}
	})
}
