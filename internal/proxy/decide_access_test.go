//go:build linux

package proxy

import (
	"crypto/tls"
	"net/netip"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/snapshot"
)

// decideAccessReasons are the reasons decide rejects with on a path with AccessPolicies.
var decideAccessReasons = []outcome{reasonNotAllowed, reasonRouteLimit, reasonClientLimit, reasonRateLimited}

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// accessPorts are decidePort's TLS port and a TCP port with AccessPolicies: on the
// passthrough listener a platform block list (198.51.100.0/24); on route db an allow-list
// (10.0.0.0/8, 2001:db8::/32) with one connection at once per client and 2 a minute per
// client (burst 2); on route pg a cap of one connection at once; on the terminate listener
// and the HTTPS one an allow-list of 10.0.0.0/8; on the TCP route an allow-list of
// 10.9.0.0/16.
func accessPorts() (tls, tcp *snapshot.Port, pols map[string]*access.Policy) {
	pols = map[string]*access.Policy{
		"block": access.New("platform/block", "Gateway platform/gw", access.Spec{Deny: mustPrefixes("198.51.100.0/24")}),
		"db": access.New("t/db", "TLSRoute t/db", access.Spec{Allow: mustPrefixes("10.0.0.0/8", "2001:db8::/32"),
			PerClient: access.PerClient{MaxConnections: 1, PerMinute: 2, Burst: 2}}),
		"pg":    access.New("t/pg", "TLSRoute t/pg", access.Spec{MaxConnections: 1}),
		"term":  access.New("t/term", "Gateway t/gw listener term", access.Spec{Allow: mustPrefixes("10.0.0.0/8")}),
		"https": access.New("t/https", "Gateway t/gw listener https", access.Spec{Allow: mustPrefixes("10.0.0.0/8")}),
		"tcp":   access.New("t/tcp", "TCPRoute t/tcp", access.Spec{Allow: mustPrefixes("10.9.0.0/16")}),
	}
	tls = decidePort()
	for _, e := range tls.Listeners.Entries() {
		l := e.Value
		switch l.Name {
		case "gw/pass":
			l.Access = []*access.Policy{pols["block"]}
			for _, re := range l.Routes.Entries() {
				switch re.Value.Name {
				case "db":
					re.Value.Access = []*access.Policy{pols["db"]}
				case "pg":
					re.Value.Access = []*access.Policy{pols["pg"]}
				}
			}
		case "gw/term":
			l.Access = []*access.Policy{pols["term"]}
		case "gw/https":
			l.Access = []*access.Policy{pols["https"]}
		}
	}
	tcpRoute := route("tcp")
	tcpRoute.Access = []*access.Policy{pols["tcp"]}
	tcp = &snapshot.Port{Address: "127.0.0.1:3306", Protocol: snapshot.ProtocolTCP,
		TCP:     &snapshot.Listener{Name: "gw/tcp", Route: tcpRoute, Access: []*access.Policy{pols["block"]}},
		ProxyIn: &snapshot.InboundProxy{Trusted: mustPrefixes("127.0.0.0/8")}}
	return tls, tcp, pols
}

// The AccessPolicies in the routing decision: every reason, on every path that reaches a
// route or a terminating listener (passthrough, the PostgreSQL bridge, direct TLS
// PostgreSQL, terminate, HTTPS, TCP), with the client's address from the TCP peer or from a
// trusted PROXY header; what an admitted connection holds, and that a refusal holds
// nothing and names the policy.
func TestDecideAccess(t *testing.T) {
	tlsPort, tcpPort, pols := accessPorts()
	lim := access.NewLimiter(0)
	at := time.Now()
	db := capturedHello(t, "go-tls13") // db.example.com
	pgDirect := capturedHello(t, "go-alpn-postgresql")
	term := capturedHello(t, "openssl-sni") // x.test
	https := goHello(t, &tls.Config{ServerName: "web.example.com"})
	pgHello := goHello(t, &tls.Config{ServerName: "pg.example.com"})
	header := func(src string) []byte {
		h, err := proxyproto.Header(2, netip.MustParseAddrPort(src), netip.MustParseAddrPort("127.0.0.1:3306"), proxyproto.TLVs{})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	type want struct {
		kind   decisionKind
		reason outcome
		route  string
		policy string
		holds  bool
	}
	cases := []struct {
		name   string
		port   *snapshot.Port
		phase  pgPhase
		client string
		peer   string // the TCP peer, when not the client (a PROXY header gives the client)
		pre    []byte
		want   want
		keep   bool // hold on to what it counts (later cases count on it)
	}{
		{name: "passthrough, allowed", client: "10.1.1.1", pre: db,
			want: want{kind: kindPassthrough, route: "db", holds: true}, keep: true},
		{name: "passthrough, the client's 2nd at once", client: "10.1.1.1", pre: db,
			want: want{kind: kindReject, reason: reasonClientLimit, route: "db", policy: "t/db"}},
		{name: "passthrough, another client", client: "10.1.1.2", pre: db,
			want: want{kind: kindPassthrough, route: "db", holds: true}},
		{name: "passthrough, an IPv4-mapped client is its IPv4 address", client: "::ffff:10.1.1.3", pre: db,
			want: want{kind: kindPassthrough, route: "db", holds: true}},
		{name: "passthrough, IPv6 client allowed", client: "2001:db8::7", pre: db,
			want: want{kind: kindPassthrough, route: "db", holds: true}},
		{name: "passthrough, not in the route's allow-list", client: "192.0.2.1", pre: db,
			want: want{kind: kindReject, reason: reasonNotAllowed, route: "db", policy: "t/db"}},
		{name: "passthrough, denied on the listener before the route's allow-list", client: "198.51.100.4", pre: db,
			want: want{kind: kindReject, reason: reasonNotAllowed, route: "db", policy: "platform/block"}},
		{name: "passthrough, that client again (its 1st ended)", client: "10.1.1.2", pre: db,
			want: want{kind: kindPassthrough, route: "db", holds: true}},
		{name: "passthrough, a client's rate: its 3rd in a minute", client: "10.1.1.2", pre: db,
			want: want{kind: kindReject, reason: reasonRateLimited, route: "db", policy: "t/db"}},
		{name: "after SSLRequest, allowed", phase: pgAfterSSLRequest, client: "192.0.2.1", pre: pgHello,
			want: want{kind: kindPassthrough, route: "pg", holds: true}, keep: true},
		{name: "after SSLRequest, the route's cap", phase: pgAfterSSLRequest, client: "192.0.2.2", pre: pgHello,
			want: want{kind: kindReject, reason: reasonRouteLimit, route: "pg", policy: "t/pg"}},
		{name: "direct TLS postgres, the route's cap", client: "192.0.2.3", pre: pgDirect,
			want: want{kind: kindReject, reason: reasonRouteLimit, route: "pg", policy: "t/pg"}},
		{name: "direct TLS postgres, denied on the listener", client: "198.51.100.9", pre: pgDirect,
			want: want{kind: kindReject, reason: reasonNotAllowed, route: "pg", policy: "platform/block"}},
		{name: "terminate, allowed", client: "10.2.2.2", pre: term,
			want: want{kind: kindTerminate, route: "x"}},
		{name: "terminate, not allowed", client: "192.0.2.1", pre: term,
			want: want{kind: kindReject, reason: reasonNotAllowed, route: "x", policy: "t/term"}},
		{name: "https, allowed", client: "10.2.2.2", pre: https,
			want: want{kind: kindHTTPS}},
		{name: "https, not allowed", client: "192.0.2.1", pre: https,
			want: want{kind: kindReject, reason: reasonNotAllowed, policy: "t/https"}},
		{name: "tcp, allowed", port: tcpPort, client: "10.9.1.1", peer: "10.9.1.1",
			want: want{kind: kindTCP, route: "tcp"}},
		{name: "tcp, not allowed", port: tcpPort, client: "10.8.1.1", peer: "10.8.1.1",
			want: want{kind: kindReject, reason: reasonNotAllowed, route: "tcp", policy: "t/tcp"}},
		{name: "tcp, the PROXY header's client is checked", port: tcpPort, peer: "127.0.0.1", pre: header("10.9.7.7:4000"),
			want: want{kind: kindTCP, route: "tcp"}},
		{name: "tcp, the PROXY header's client is refused", port: tcpPort, peer: "127.0.0.1", pre: header("198.51.100.1:4000"),
			want: want{kind: kindReject, reason: reasonNotAllowed, route: "tcp", policy: "platform/block"}},
		{name: "an unknown SNI stays unknown_sni, whoever asks", client: "198.51.100.4", pre: capturedHello(t, "go-tls10-min"),
			want: want{kind: kindReject, reason: reasonUnknownSNI}},
	}
	reasons := map[outcome]bool{}
	for _, c := range cases {
		reasons[c.want.reason] = true
	}
	for _, r := range decideAccessReasons {
		if !reasons[r] {
			t.Errorf("no case rejects with %s", r)
		}
	}
	var kept []*access.Hold
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := c.port
			if port == nil {
				port = tlsPort
			}
			st := preambleState{maxBytes: 64 << 10, phase: c.phase, at: at, access: lim}
			if c.client != "" {
				st.client = netip.MustParseAddr(c.client)
			}
			st.peer = st.client
			if c.peer != "" {
				st.peer = netip.MustParseAddr(c.peer)
			}
			d, more := decide(port, c.pre, &st)
			if more {
				t.Fatal("undecided")
			}
			if port == tlsPort {
				checkDecision(t, port, &st, c.pre, d, more)
			}
			got := want{kind: d.kind, reason: d.reason, holds: !d.hold.Empty()}
			if d.route != nil {
				got.route = d.route.Name
			}
			if d.policy != nil {
				got.policy = d.policy.Name
			}
			if got != c.want {
				t.Errorf("decide = %+v\nwant     %+v", got, c.want)
			}
			if c.keep {
				h := d.hold
				kept = append(kept, &h)
			} else {
				lim.Release(&d.hold)
			}
		})
	}
	// What the kept connections hold comes back when they end.
	for _, h := range kept {
		lim.Release(h)
	}
	if n := lim.Open(pols["pg"]); n != 0 {
		t.Errorf("route pg counts %d open after every release", n)
	}
	st := preambleState{maxBytes: 64 << 10, phase: pgAfterSSLRequest, client: netip.MustParseAddr("192.0.2.2"), at: at, access: lim}
	if d, _ := decide(tlsPort, pgHello, &st); d.kind != kindPassthrough {
		t.Errorf("route pg after its connection ended: %v %s", d.kind, d.reason)
	}
}

// FuzzDecideAccess: whatever the bytes and the client address, a port with AccessPolicies
// decides what the same port without them decides, except that a connection reaching a
// listener or route whose ranges the address does not pass (by a linear reference check
// of every range) is rejected client_not_allowed; a limit refuses only with a limit's
// reason; and an admitted connection's counts come back on release.
func FuzzDecideAccess(f *testing.F) {
	db := capturedHello(f, "go-tls13")
	for _, a := range []string{"10.1.1.1", "198.51.100.4", "192.0.2.1", "2001:db8::7", "::ffff:10.1.1.3", "fe80::1"} {
		b := netip.MustParseAddr(a).As16()
		f.Add(db, b[:], uint8(0))
	}
	f.Add(capturedHello(f, "openssl-sni"), make([]byte, 16), uint8(0))
	f.Add(capturedHello(f, "go-alpn-postgresql"), []byte{10, 0, 0, 1}, uint8(1))
	f.Add([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}, []byte{10, 0, 0, 1}, uint8(0))
	withAccess, withAccessTCP, _ := accessPorts()
	plain, plainTCP := decidePort(), &snapshot.Port{Address: "127.0.0.1:3306", Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("tcp")}, ProxyIn: &snapshot.InboundProxy{Trusted: mustPrefixes("127.0.0.0/8")}}
	lim := access.NewLimiter(1024)
	at := time.Now()
	f.Fuzz(func(t *testing.T, pre, addr []byte, knobs uint8) {
		client, ok := netip.AddrFromSlice(addr)
		if !ok {
			return
		}
		port, ref := withAccess, plain
		if knobs&2 != 0 {
			port, ref = withAccessTCP, plainTCP
		}
		phase := pgPhase(knobs & 1)
		st := preambleState{maxBytes: 16 << 10, phase: phase, client: client, peer: client, at: at, access: lim}
		d, more := decide(port, pre, &st)
		defer lim.Release(&d.hold)
		st2 := preambleState{maxBytes: 16 << 10, phase: phase, client: client, peer: client}
		d2, more2 := decide(ref, pre, &st2)
		if more != more2 {
			t.Fatalf("more %v with policies, %v without", more, more2)
		}
		if more {
			return
		}
		routed := d2.kind == kindPassthrough || d2.kind == kindTerminate || d2.kind == kindHTTPS || d2.kind == kindTCP
		if !routed {
			if d.kind != d2.kind || d.reason != d2.reason || !d.hold.Empty() {
				t.Fatalf("unrouted: %v %s with policies, %v %s without", d.kind, d.reason, d2.kind, d2.reason)
			}
			return
		}
		// The reference: every range of every policy on the path, scanned.
		var path []*access.Policy
		if d.listener != nil {
			path = append(path, d.listener.Access...)
		}
		if d.route != nil {
			path = append(path, d.route.Access...)
		}
		allowed := true
		c := client.Unmap()
		for _, p := range path {
			for _, r := range p.Spec.Deny {
				if r.Contains(c) {
					allowed = false
				}
			}
			if len(p.Spec.Allow) > 0 {
				in := false
				for _, r := range p.Spec.Allow {
					in = in || r.Contains(c)
				}
				allowed = allowed && in
			}
		}
		switch {
		case !allowed:
			if d.kind != kindReject || d.reason != reasonNotAllowed || d.policy == nil || !d.hold.Empty() {
				t.Fatalf("%s passes no allow-list, or is denied; decided %v %s", client, d.kind, d.reason)
			}
		case d.kind == kindReject:
			if d.reason != reasonRouteLimit && d.reason != reasonClientLimit && d.reason != reasonRateLimited || d.policy == nil {
				t.Fatalf("%s passes every range but was refused %s", client, d.reason)
			}
		case d.kind != d2.kind || (d.route == nil) != (d2.route == nil) || d.route != nil && d.route.Name != d2.route.Name:
			t.Fatalf("admitted %v %v, without policies %v %v", d.kind, d.route, d2.kind, d2.route)
		}
	})
}
