package access

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"
)

func prefixes_(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// at is the time the tests' connections are made at (moved by the rate tests).
var at = time.Now()

func TestAllows(t *testing.T) {
	p := New("ns/p", "TLSRoute ns/db", Spec{
		Allow: prefixes_("10.0.0.0/8", "2001:db8::/32", "::ffff:192.0.2.0/120"),
		Deny:  prefixes_("10.9.0.0/16"),
	})
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", true},
		{"10.9.1.1", false}, // denied wins over allowed
		{"11.0.0.1", false},
		{"2001:db8::1", true},
		{"2001:db9::1", false},
		{"::ffff:10.1.2.3", true}, // a mapped client is its IPv4 address
		{"::ffff:10.9.0.1", false},
		{"192.0.2.77", true}, // a mapped range is the IPv4 range
		{"192.0.3.1", false},
	} {
		if got := p.Allows(addr(c.addr)); got != c.want {
			t.Errorf("Allows(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
	if !New("ns/open", "t", Spec{}).Allows(addr("203.0.113.9")) {
		t.Error("a policy without ranges refused an address")
	}
	deny := New("ns/deny", "t", Spec{Deny: prefixes_("0.0.0.0/0")})
	if deny.Allows(addr("203.0.113.9")) || !deny.Allows(addr("2001:db8::1")) {
		t.Error("deny 0.0.0.0/0 must refuse every IPv4 client and no IPv6 one")
	}
	if (&Policy{}).Allows(netip.Addr{}) != true || p.Allows(netip.Addr{}) {
		t.Error("an invalid address passes no allow-list, and a policy without lists")
	}
}

func TestRouteLimit(t *testing.T) {
	l := NewLimiter(0)
	p := New("ns/p", "TLSRoute ns/db", Spec{MaxConnections: 3})
	var holds [4]Hold
	for i := range 3 {
		if v, _ := l.Admit(addr(fmt.Sprintf("10.0.0.%d", i)), at, nil, []*Policy{p}, &holds[i]); v != Admitted {
			t.Fatalf("connection %d: %v", i+1, v)
		}
	}
	v, by := l.Admit(addr("10.0.0.9"), at, nil, []*Policy{p}, &holds[3])
	if v != RouteLimit || by != p || !holds[3].Empty() {
		t.Fatalf("4th connection: %v by %v, hold %+v; want route_limit by the policy, nothing held", v, by, holds[3])
	}
	l.Release(&holds[0])
	if !holds[0].Empty() || l.Open(p) != 2 {
		t.Fatalf("after a release: open %d, hold %+v", l.Open(p), holds[0])
	}
	if v, _ := l.Admit(addr("10.0.0.9"), at, nil, []*Policy{p}, &holds[3]); v != Admitted {
		t.Fatalf("after a release: %v", v)
	}
}

func TestPerClientLimit(t *testing.T) {
	l := NewLimiter(0)
	p := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: 2}})
	var a1, a2, a3, b Hold
	admit := func(c string, h *Hold) Verdict { v, _ := l.Admit(addr(c), at, []*Policy{p}, nil, h); return v }
	if admit("10.0.0.1", &a1) != Admitted || admit("10.0.0.1", &a2) != Admitted {
		t.Fatal("two connections of one client refused")
	}
	if v := admit("10.0.0.1", &a3); v != ClientLimit {
		t.Fatalf("a client's 3rd connection: %v, want client_limit", v)
	}
	if admit("10.0.0.2", &b) != Admitted {
		t.Fatal("another client refused")
	}
	l.Release(&a1)
	if admit("10.0.0.1", &a3) != Admitted {
		t.Fatal("the client refused after one of its connections ended")
	}
}

func TestPerClientIPv6Prefix(t *testing.T) {
	l := NewLimiter(0)
	p64 := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: 1}})
	p128 := New("ns/q", "t", Spec{PerClient: PerClient{MaxConnections: 1, IPv6PrefixLength: 128}})
	var h [4]Hold
	if v, _ := l.Admit(addr("2001:db8:1:2::1"), at, nil, []*Policy{p64}, &h[0]); v != Admitted {
		t.Fatal(v)
	}
	// The same /64: one client.
	if v, _ := l.Admit(addr("2001:db8:1:2:ffff::9"), at, nil, []*Policy{p64}, &h[1]); v != ClientLimit {
		t.Fatalf("a second address of the same /64: %v, want client_limit", v)
	}
	if v, _ := l.Admit(addr("2001:db8:1:3::1"), at, nil, []*Policy{p64}, &h[1]); v != Admitted {
		t.Fatalf("another /64: %v", v)
	}
	if v, _ := l.Admit(addr("2001:db8:1:2::1"), at, nil, []*Policy{p128}, &h[2]); v != Admitted {
		t.Fatal(v)
	}
	if v, _ := l.Admit(addr("2001:db8:1:2::2"), at, nil, []*Policy{p128}, &h[3]); v != Admitted {
		t.Fatalf("/128: another address is another client: %v", v)
	}
}

func TestRateBurstAndRefill(t *testing.T) {
	l := NewLimiter(0)
	now := time.Now() // after the Limiter's start
	// 60 a minute (one a second), a burst of 5.
	p := New("ns/p", "t", Spec{PerClient: PerClient{PerMinute: 60, Burst: 5}})
	admit := func(c string) Verdict {
		var h Hold
		v, _ := l.Admit(addr(c), now, nil, []*Policy{p}, &h)
		l.Release(&h)
		return v
	}
	for i := range 5 {
		if v := admit("10.0.0.1"); v != Admitted {
			t.Fatalf("burst connection %d: %v", i+1, v)
		}
	}
	if v := admit("10.0.0.1"); v != RateLimited {
		t.Fatalf("6th at once: %v, want rate_limited", v)
	}
	if v := admit("10.0.0.2"); v != Admitted {
		t.Fatalf("another client: %v", v)
	}
	now = now.Add(500 * time.Millisecond)
	if v := admit("10.0.0.1"); v != RateLimited {
		t.Fatalf("half a token later: %v", v)
	}
	now = now.Add(500 * time.Millisecond)
	if v := admit("10.0.0.1"); v != Admitted {
		t.Fatalf("a token later: %v", v)
	}
	if v := admit("10.0.0.1"); v != RateLimited {
		t.Fatalf("that token spent: %v", v)
	}
	now = now.Add(time.Minute)
	for i := range 5 {
		if v := admit("10.0.0.1"); v != Admitted {
			t.Fatalf("after a quiet minute, burst connection %d: %v", i+1, v)
		}
	}
	// Refused connections spend nothing: hammering does not push the refill out.
	for range 100 {
		admit("10.0.0.1")
	}
	now = now.Add(time.Second)
	if v := admit("10.0.0.1"); v != Admitted {
		t.Fatalf("a second after 100 refused tries: %v", v)
	}
}

// Every policy on the path must pass; a refusal by a later one gives back what the earlier
// ones counted, their rate included.
func TestPathAllMustPass(t *testing.T) {
	l := NewLimiter(0)
	gw := New("platform/deny", "Gateway platform/gw", Spec{Deny: prefixes_("198.51.100.0/24"), MaxConnections: 10,
		PerClient: PerClient{PerMinute: 1, Burst: 1}})
	route := New("tenant/db", "TLSRoute tenant/db", Spec{Allow: prefixes_("10.0.0.0/8", "198.51.100.0/24"), MaxConnections: 1})
	listener, routes := []*Policy{gw}, []*Policy{route}
	var h1, h2 Hold
	if v, by := l.Admit(addr("198.51.100.7"), at, listener, routes, &h1); v != NotAllowed || by != gw {
		t.Fatalf("denied on the Gateway, allowed on the route: %v by %v", v, by)
	}
	if v, by := l.Admit(addr("11.0.0.1"), at, listener, routes, &h1); v != NotAllowed || by != route {
		t.Fatalf("outside the route's allow-list: %v by %v", v, by)
	}
	if v, _ := l.Admit(addr("10.0.0.1"), at, listener, routes, &h1); v != Admitted {
		t.Fatal(v)
	}
	if l.Open(gw) != 1 || l.Open(route) != 1 {
		t.Fatalf("open %d/%d, want 1/1", l.Open(gw), l.Open(route))
	}
	// The route's cap refuses the next: the Gateway's count and the rate come back.
	if v, by := l.Admit(addr("10.0.0.2"), at, listener, routes, &h2); v != RouteLimit || by != route {
		t.Fatalf("%v by %v, want route_limit by the route's policy", v, by)
	}
	if l.Open(gw) != 1 || !h2.Empty() {
		t.Fatalf("the Gateway counts %d after the route refused, hold %+v", l.Open(gw), h2)
	}
	l.Release(&h1)
	if v, _ := l.Admit(addr("10.0.0.2"), at, listener, routes, &h2); v != Admitted {
		t.Fatalf("10.0.0.2's rate was spent by the refused try: %v", v)
	}
	l.Release(&h2)
	if l.Open(gw) != 0 || l.Open(route) != 0 {
		t.Fatalf("open %d/%d after every release", l.Open(gw), l.Open(route))
	}
}

// A new snapshot's policy of the same name and target goes on counting the old one's
// connections; held ones release into the counters they were taken from.
func TestCountsCarryOverAReload(t *testing.T) {
	l := NewLimiter(0)
	old := New("ns/p", "TLSRoute ns/db", Spec{MaxConnections: 5, PerClient: PerClient{MaxConnections: 3}})
	var held [3]Hold
	for i := range held {
		if v, _ := l.Admit(addr("10.0.0.1"), at, nil, []*Policy{old}, &held[i]); v != Admitted {
			t.Fatal(v)
		}
	}
	// The policy is tightened: the held three stay, new ones follow the new caps.
	tight := New("ns/p", "TLSRoute ns/db", Spec{MaxConnections: 2, PerClient: PerClient{MaxConnections: 1}})
	var h Hold
	if v, _ := l.Admit(addr("10.0.0.2"), at, nil, []*Policy{tight}, &h); v != RouteLimit {
		t.Fatalf("3 held under a cap of 2: %v, want route_limit", v)
	}
	l.Release(&held[0])
	l.Release(&held[1])
	if v, _ := l.Admit(addr("10.0.0.1"), at, nil, []*Policy{tight}, &h); v != ClientLimit {
		t.Fatalf("the client holds 1 under a per-client cap of 1: %v", v)
	}
	if v, _ := l.Admit(addr("10.0.0.2"), at, nil, []*Policy{tight}, &h); v != Admitted {
		t.Fatalf("%v", v)
	}
	// Another target of the same policy counts apart.
	other := New("ns/p", "TLSRoute ns/other", Spec{MaxConnections: 1})
	var o Hold
	if v, _ := l.Admit(addr("10.0.0.3"), at, nil, []*Policy{other}, &o); v != Admitted {
		t.Fatalf("another target: %v", v)
	}
}

// The client table holds at most its capacity, however many clients come; an entry with
// a connection open is never evicted, so its count comes back.
func TestClientTableBounded(t *testing.T) {
	l := NewLimiter(1024)
	p := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: 1, PerMinute: 600}})
	var keep Hold
	if v, _ := l.Admit(addr("192.0.2.1"), at, nil, []*Policy{p}, &keep); v != Admitted {
		t.Fatal(v)
	}
	for i := range 200_000 {
		var h Hold
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		l.Admit(a, at, nil, []*Policy{p}, &h)
		l.Release(&h)
	}
	if n := l.Tracked(); n > l.Capacity() {
		t.Fatalf("%d clients tracked, capacity %d", n, l.Capacity())
	}
	if l.Evictions() == 0 {
		t.Fatal("no eviction after 200 000 clients in a table of 1024")
	}
	var h Hold
	if v, _ := l.Admit(addr("192.0.2.1"), at, nil, []*Policy{p}, &h); v != ClientLimit {
		t.Fatalf("the client holding a connection was forgotten: %v", v)
	}
	l.Release(&keep)
	if v, _ := l.Admit(addr("192.0.2.1"), at, nil, []*Policy{p}, &h); v != Admitted {
		t.Fatalf("after its release: %v", v)
	}
}

// A policy no snapshot holds and no connection counts in is forgotten.
func TestStatesAreCollected(t *testing.T) {
	l := NewLimiter(0)
	func() {
		for i := range 100 {
			p := New(fmt.Sprintf("ns/p%d", i), "t", Spec{MaxConnections: 1})
			var h Hold
			l.Admit(addr("10.0.0.1"), at, nil, []*Policy{p}, &h)
			l.Release(&h)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		l.mu.Lock()
		n := len(l.states)
		l.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d states of dropped policies still registered", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConcurrentAdmitRelease(t *testing.T) {
	l := NewLimiter(4096)
	p := New("ns/p", "t", Spec{MaxConnections: 50, PerClient: PerClient{MaxConnections: 4, PerMinute: 1 << 30}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				var h Hold
				a := netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i % 16)})
				if v, _ := l.Admit(a, at, nil, []*Policy{p}, &h); v == Admitted {
					if l.Open(p) > 50 {
						t.Errorf("%d open, cap 50", l.Open(p))
					}
					l.Release(&h)
				}
			}
		})
	}
	wg.Wait()
	if n := l.Open(p); n != 0 {
		t.Fatalf("%d counted open after every release", n)
	}
}

func TestSpecString(t *testing.T) {
	s := Spec{Allow: prefixes_("10.0.0.0/8"), Deny: prefixes_("10.9.0.0/16"), MaxConnections: 100,
		PerClient: PerClient{MaxConnections: 10, PerMinute: 60, Burst: 20, IPv6PrefixLength: 56}}
	want := "from 10.0.0.0/8; never from 10.9.0.0/16; at most 100 connections at once; per client: 10 connections at once, 60 new a minute (burst 20), an IPv6 client is its /56; limits per data plane replica"
	if got := s.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := (Spec{}).String(); got != "every address, no limit" {
		t.Error(got)
	}
}
