// Package access is snigate's per-connection access control: which client addresses may
// connect to a listener or a route (an allow-list and a block list) and how much (connections
// open at once to the target, per client, and a per-client connection rate). It is what an
// AccessPolicy compiles to (package translate builds the Policies, the snapshot carries them
// on listeners and routes) and what the routing decision checks (package proxy, decide),
// once the route is known and before any backend is dialed.
//
//	p := access.New("tenant-a/db", "TLSRoute tenant-a/db", access.Spec{
//		Allow: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
//		MaxConnections: 100,
//		PerClient: access.PerClient{MaxConnections: 10, PerMinute: 60},
//	})
//	lim := access.NewLimiter(0)      // one per data plane: the counters
//	var h access.Hold
//	v, by := lim.Admit(client, listenerPolicies, []*access.Policy{p}, &h)
//	if v != access.Admitted { /* refuse: by names the policy */ }
//	defer lim.Release(&h)            // when the connection ends
//
// A Policy is immutable once built, like the snapshot that holds it. What it counts lives
// in the Limiter, keyed by the policy's name and target, so that a new snapshot with the
// same policy (changed or not) goes on counting the connections the old one admitted:
// a reload never cuts a held connection, and the connections it holds still count
// against the new limits.
//
// Ranges are looked up in a prefix table (github.com/gaissmai/bart's Lite: a popcount-
// compressed multibit trie), not scanned: 1 000 ranges cost what 10 do. Per-client state is
// a fixed-size table with eviction (clients.go), so a flood from millions of addresses
// costs bounded memory.
package access

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gaissmai/bart"
)

// Spec is what an AccessPolicy sets, in the data plane's terms.
type Spec struct {
	// Allow are the client ranges that may connect; empty admits every address not
	// denied.
	Allow []netip.Prefix
	// Deny are the ranges never admitted, checked first.
	Deny []netip.Prefix
	// MaxConnections caps the target's connections open at once (0: no cap).
	MaxConnections int32
	// PerClient limits each client address (or IPv6 prefix) on its own.
	PerClient PerClient
}

// PerClient are a client's own limits. The zero value limits nothing.
type PerClient struct {
	// MaxConnections caps one client's connections open at once (0: no cap).
	MaxConnections int32
	// PerMinute is the rate of new connections one client may open (0: no rate), with
	// Burst of them at once (0: PerMinute).
	PerMinute, Burst int32
	// IPv6PrefixLength is how much of an IPv6 address names a client (0: 64).
	IPv6PrefixLength int
}

func (c PerClient) any() bool { return c.MaxConnections > 0 || c.PerMinute > 0 }

// Policy is one AccessPolicy compiled for one target. Build it with New; it is never
// changed afterwards (but for binding its counters to a Limiter, see Limiter.state).
type Policy struct {
	// Name is the AccessPolicy, "namespace/name": the access log's policy field.
	Name string
	// Target is what the policy is attached to, for people: "TLSRoute ns/name",
	// "Gateway ns/name listener l".
	Target string
	Spec   Spec

	allow, deny *bart.Lite // nil: no such list
	// key names the policy's counters in a Limiter: its name and target.
	key string
	// limited: the policy counts something (MaxConnections or PerClient).
	limited bool
	// v6bits is PerClient.IPv6PrefixLength, defaulted.
	v6bits int
	// interval and tolerance are the per-client rate as a GCRA: a connection every
	// interval ticks (at least 1), tolerance early (interval × (burst-1), at most
	// maxAhead: a burst refilled over 2 years).
	interval, tolerance int64
	// clientMax is PerClient.MaxConnections, at most maxClientConns (the client table's
	// counters' size).
	clientMax int32

	state atomic.Pointer[state]
}

// New compiles spec for the named policy and target.
func New(name, target string, spec Spec) *Policy {
	p := &Policy{Name: name, Target: target, key: name + "\x00" + target}
	spec.Allow, spec.Deny = normalize(spec.Allow), normalize(spec.Deny)
	p.Spec = spec
	if len(spec.Allow) > 0 {
		p.allow = table(spec.Allow)
	}
	if len(spec.Deny) > 0 {
		p.deny = table(spec.Deny)
	}
	p.limited = spec.MaxConnections > 0 || spec.PerClient.any()
	p.clientMax = min(spec.PerClient.MaxConnections, maxClientConns)
	p.v6bits = spec.PerClient.IPv6PrefixLength
	if p.v6bits <= 0 || p.v6bits > 128 {
		p.v6bits = 64
	}
	if r := spec.PerClient.PerMinute; r > 0 {
		burst := spec.PerClient.Burst
		if burst <= 0 {
			burst = r
		}
		p.interval = max(1, int64(time.Minute/tick)/int64(r))
		p.tolerance = min(p.interval*int64(burst-1), maxAhead)
	}
	return p
}

// normalize masks each range and writes IPv4-mapped IPv6 ranges (::ffff:10.0.0.0/104) as
// the IPv4 ranges they are: clients are looked up unmapped. Sorted, without duplicates.
func normalize(ps []netip.Prefix) []netip.Prefix {
	if len(ps) == 0 {
		return nil
	}
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

func table(ps []netip.Prefix) *bart.Lite {
	t := new(bart.Lite)
	for _, p := range ps {
		t.Insert(p)
	}
	return t
}

// Allows reports whether a connection from addr passes the policy's ranges: not in Deny,
// and in Allow when Allow is not empty. It does not allocate.
func (p *Policy) Allows(addr netip.Addr) bool {
	addr = addr.Unmap()
	if p.deny != nil && p.deny.Lookup(addr) {
		return false
	}
	return p.allow == nil || p.allow.Lookup(addr)
}

// Limited reports whether the policy counts connections (a Limiter must admit them).
func (p *Policy) Limited() bool { return p.limited }

// String is the policy's rules for people: Spec.String.
func (p *Policy) String() string { return p.Spec.String() }

// String says what s allows, in one line: "from 203.0.113.0/24; never from
// 198.51.100.0/24; at most 100 connections; per client: 10 connections, 60 a minute
// (burst 60), IPv6 clients by /64". "every address, no limit" when it restricts nothing.
func (s Spec) String() string {
	var parts []string
	if len(s.Allow) > 0 {
		parts = append(parts, "from "+prefixes(s.Allow))
	}
	if len(s.Deny) > 0 {
		parts = append(parts, "never from "+prefixes(s.Deny))
	}
	if s.MaxConnections > 0 {
		parts = append(parts, fmt.Sprintf("at most %d connections at once", s.MaxConnections))
	}
	if c := s.PerClient; c.any() {
		var per []string
		if c.MaxConnections > 0 {
			per = append(per, fmt.Sprintf("%d connections at once", c.MaxConnections))
		}
		if c.PerMinute > 0 {
			burst := c.Burst
			if burst <= 0 {
				burst = c.PerMinute
			}
			per = append(per, fmt.Sprintf("%d new a minute (burst %d)", c.PerMinute, burst))
		}
		bits := c.IPv6PrefixLength
		if bits <= 0 {
			bits = 64
		}
		per = append(per, fmt.Sprintf("an IPv6 client is its /%d", bits))
		parts = append(parts, "per client: "+strings.Join(per, ", "))
	}
	if len(parts) == 0 {
		return "every address, no limit"
	}
	if s.MaxConnections > 0 || s.PerClient.any() {
		parts = append(parts, "limits per data plane replica")
	}
	return strings.Join(parts, "; ")
}

// prefixes lists ranges, the first 8 and how many more.
func prefixes(ps []netip.Prefix) string {
	const show = 8
	s := make([]string, 0, min(len(ps), show))
	for i, p := range ps {
		if i == show {
			break
		}
		s = append(s, p.String())
	}
	out := strings.Join(s, ", ")
	if len(ps) > show {
		out += fmt.Sprintf(" and %d more", len(ps)-show)
	}
	return out
}
