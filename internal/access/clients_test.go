package access

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A rate refused by a later policy on the path is given back: the client's next connection
// through the first policy alone still has its token.
func TestRefusedLaterRefundsRate(t *testing.T) {
	l := NewLimiter(0)
	gw := New("ns/gw", "Gateway ns/gw", Spec{PerClient: PerClient{PerMinute: 1, Burst: 1}})
	route := New("ns/db", "TLSRoute ns/db", Spec{MaxConnections: 1})
	var held Hold
	if v, _ := l.Admit(addr("10.0.0.1"), at, nil, []*Policy{route}, &held); v != Admitted {
		t.Fatal(v)
	}
	var h Hold
	if v, by := l.Admit(addr("10.0.0.2"), at, []*Policy{gw}, []*Policy{route}, &h); v != RouteLimit || by != route {
		t.Fatalf("route full: %v by %v", v, by)
	}
	l.Release(&held)
	if v, by := l.Admit(addr("10.0.0.2"), at, []*Policy{gw}, []*Policy{route}, &h); v != Admitted {
		t.Fatalf("the refused connection spent the client's one token: %v by %v", v, by)
	}
	l.Release(&h)
	if v, _ := l.Admit(addr("10.0.0.2"), at, []*Policy{gw}, nil, &h); v != RateLimited {
		t.Fatalf("a second connection within the minute: %v", v)
	}
}

// When every entry a client could take holds connections, the client is refused (fail
// closed) and counted as a client limit; once one is released it is admitted.
func TestClientTableFullOfHeldEntries(t *testing.T) {
	l := NewLimiter(8) // two buckets: every client's two candidates are all of them
	if l.Capacity() != 8 {
		t.Fatalf("capacity %d", l.Capacity())
	}
	p := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: 1}})
	holds := make([]Hold, 8)
	for i := range holds {
		if v, _ := l.Admit(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), at, nil, []*Policy{p}, &holds[i]); v != Admitted {
			t.Fatalf("client %d: %v", i, v)
		}
	}
	var h Hold
	if v, _ := l.Admit(addr("10.0.1.1"), at, nil, []*Policy{p}, &h); v != ClientLimit {
		t.Fatalf("a ninth client in a table of 8 held entries: %v", v)
	}
	l.Release(&holds[3])
	if v, _ := l.Admit(addr("10.0.1.1"), at, nil, []*Policy{p}, &h); v != Admitted {
		t.Fatalf("after a release: %v", v)
	}
	if l.Evictions() != 1 || l.Tracked() != 8 {
		t.Fatalf("evictions %d tracked %d, want 1 and 8", l.Evictions(), l.Tracked())
	}
	// The evicted client has lost nothing it held: it comes back with a fresh entry.
	l.Release(&h)
	if v, _ := l.Admit(netip.AddrFrom4([4]byte{10, 0, 0, 3}), at, nil, []*Policy{p}, &h); v != Admitted {
		t.Fatalf("the evicted client: %v", v)
	}
}

// Many goroutines admitting the same few clients at once never count a client past its
// cap, never lose a count, and never give one client two entries (which would double its
// cap).
func TestConcurrentPerClientCapExact(t *testing.T) {
	l := NewLimiter(64)
	const perClient = 3
	p := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: perClient, PerMinute: 1 << 30}})
	clients := []netip.Addr{addr("10.0.0.1"), addr("10.0.0.2"), addr("2001:db8::1"), addr("2001:db8::2")}
	var open [4]atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				c := (g + i) % len(clients)
				var h Hold
				if v, _ := l.Admit(clients[c], at, nil, []*Policy{p}, &h); v == Admitted {
					if n := open[c].Add(1); n > perClient {
						t.Errorf("client %s: %d open, cap %d", clients[c], n, perClient)
					}
					open[c].Add(-1)
					l.Release(&h)
				}
			}
		})
	}
	wg.Wait()
	// Every count came back: each client can hold its whole cap again, and no more.
	for _, c := range clients {
		hs := make([]Hold, perClient+1)
		for i := range perClient {
			if v, _ := l.Admit(c, at, nil, []*Policy{p}, &hs[i]); v != Admitted {
				t.Fatalf("%s connection %d after the storm: %v", c, i+1, v)
			}
		}
		if v, _ := l.Admit(c, at, nil, []*Policy{p}, &hs[perClient]); v != ClientLimit {
			t.Fatalf("%s past its cap after the storm: %v", c, v)
		}
		for i := range hs {
			l.Release(&hs[i])
		}
	}
}

// The rate's clock is kept modulo 2^44 µs: a client last seen before the clock wrapped (or
// so long ago that its time reads as far ahead) has a full bucket, not a refusal.
func TestRateClockWraps(t *testing.T) {
	const interval, tolerance = int64(time.Second / tick), 4 * int64(time.Second/tick) // one a second, a burst of 5
	now := int64(stateTATMask - 10)                                                    // just before the wrap
	tat, ok := gcra(uint64(now), interval, tolerance, now)                             // a fresh entry: its time is now
	if !ok || tat != uint64(now+interval)&stateTATMask {
		t.Fatalf("first: %d %v", tat, ok)
	}
	// Across the wrap, the tat (now small) is still ahead of now (large).
	for i := range 4 {
		if tat, ok = gcra(tat, interval, tolerance, now); !ok {
			t.Fatalf("burst %d refused across the wrap", i+2)
		}
	}
	if _, ok = gcra(tat, interval, tolerance, now); ok {
		t.Fatal("a sixth at once admitted across the wrap")
	}
	// Long after (half the clock's range later), the old tat means nothing.
	later := (now + 1<<(stateTATBits-1)) & stateTATMask
	if _, ok = gcra(tat, interval, tolerance, later); !ok {
		t.Fatal("refused after half the clock's range")
	}
}

// Per-client caps above what an entry counts are clamped to it, and rates above one a
// microsecond to that.
func TestPolicyClamps(t *testing.T) {
	p := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: 1 << 30, PerMinute: 1 << 30, Burst: 1 << 30}})
	if p.clientMax != maxClientConns || p.interval != 1 || p.tolerance > maxAhead {
		t.Fatalf("clientMax %d interval %d tolerance %d", p.clientMax, p.interval, p.tolerance)
	}
	slow := New("ns/p", "t", Spec{PerClient: PerClient{PerMinute: 1, Burst: 1 << 30}})
	if slow.tolerance != maxAhead {
		t.Fatalf("a burst refilled over years: tolerance %d, want %d", slow.tolerance, maxAhead)
	}
	if got := time.Duration(slow.interval) * tick; got != time.Minute {
		t.Fatalf("one a minute: interval %v", got)
	}
}

// Clients holding connections fill the table evenly (two choices, the less held bucket):
// a third of its capacity of clients, each holding a connection, are all admitted (the first
// refusal comes at 45–60 % of it, by the seed).
func TestClientTableHoldsAThirdHeld(t *testing.T) {
	l := NewLimiter(1 << 14)
	p := New("ns/p", "t", Spec{PerClient: PerClient{MaxConnections: 1}})
	n := l.Capacity() / 3
	for i := range n {
		var h Hold // never released: every client holds its connection
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if v, _ := l.Admit(a, at, nil, []*Policy{p}, &h); v != Admitted {
			t.Fatalf("client %d of %d holding connections, in a table of %d: %v", i+1, n, l.Capacity(), v)
		}
	}
	if l.Evictions() != 0 {
		t.Fatalf("%d evictions with the table a third full", l.Evictions())
	}
}

// Carry counts a handed-over connection against the target's and the client's caps without
// refusing it (past a cap too) and without spending the client's rate.
func TestCarry(t *testing.T) {
	l := NewLimiter(0)
	p := New("ns/p", "t", Spec{MaxConnections: 1, PerClient: PerClient{MaxConnections: 1, PerMinute: 1, Burst: 1}})
	var a, b Hold
	l.Carry(addr("10.0.0.1"), nil, []*Policy{p}, &a)
	l.Carry(addr("10.0.0.1"), nil, []*Policy{p}, &b) // past both caps: counted, not refused
	if l.Open(p) != 2 || a.Empty() || b.Empty() {
		t.Fatalf("open %d, holds empty %v %v", l.Open(p), a.Empty(), b.Empty())
	}
	var h Hold
	if v, _ := l.Admit(addr("10.0.0.2"), at, nil, []*Policy{p}, &h); v != RouteLimit {
		t.Fatalf("a new connection with two carried open: %v", v)
	}
	l.Release(&a)
	l.Release(&b)
	// Nothing of the client's rate was spent: its one token is there.
	if v, _ := l.Admit(addr("10.0.0.1"), at, nil, []*Policy{p}, &h); v != Admitted {
		t.Fatalf("after the carried ones ended: %v", v)
	}
	l.Release(&h)
	// A policy with no connection cap (ranges, rate only) carries nothing.
	rate := New("ns/r", "t", Spec{PerClient: PerClient{PerMinute: 1}})
	l.Carry(addr("10.0.0.1"), []*Policy{rate}, nil, &h)
	if !h.Empty() {
		t.Fatal("a rate-only policy counted a carried connection")
	}
}
