// Package snapshot is snigate's immutable routing table: what the proxy reads for every
// connection, and nothing else.
//
// A Snapshot is built once by the translate stage and never modified afterwards, so the proxy
// can share it between goroutines without locks and swap a whole new one in with an
// atomic.Pointer. It deliberately imports no Gateway API types: the proxy depends only on this
// package.
//
// Lookup is two-level, the way the Gateway API defines it: a connection on a port first
// matches at most one listener by the listener's hostname (exact beats wildcard, a longer
// wildcard beats a shorter one, a wildcard beats an empty hostname), then one route inside
// that listener by the route's effective hostnames under the same precedence. A hostname
// that is routed on one port is absent from every other port's tables: the listener port is
// an access boundary.
//
//	snap.Port("0.0.0.0:443").Lookup(sni) // -> *Listener, *Route (nil when the SNI is not served)
package snapshot

import (
	"crypto/tls"
	"net/netip"
	"sort"

	"github.com/snigate/snigate/internal/access"
)

// Protocol says how a bound socket treats its connections.
type Protocol string

const (
	// ProtocolTLS peeks the ClientHello and dispatches by SNI.
	ProtocolTLS Protocol = "TLS"
	// ProtocolTCP forwards every connection on the port to one route's backends.
	ProtocolTCP Protocol = "TCP"
	// ProtocolHTTP serves plain HTTP: the Host header of each request selects the listener.
	ProtocolHTTP Protocol = "HTTP"
)

// Mode is what a TLS listener does with the TLS stream.
type Mode string

const (
	// ModePassthrough forwards the untouched TLS stream; the backend terminates it.
	ModePassthrough Mode = "Passthrough"
	// ModeTerminate terminates TLS at the gateway and forwards the plaintext.
	ModeTerminate Mode = "Terminate"
)

// Snapshot is one immutable generation of the routing table.
type Snapshot struct {
	// Generation increases with every snapshot a process builds; it appears in logs.
	Generation uint64
	// Ports holds one entry per bound socket, sorted by Address.
	Ports []*Port

	byAddr map[string]*Port
}

// New builds a snapshot from its ports, sorting them and indexing them by address.
func New(generation uint64, ports []*Port) *Snapshot {
	s := &Snapshot{Generation: generation, Ports: ports, byAddr: make(map[string]*Port, len(ports))}
	sort.Slice(s.Ports, func(i, j int) bool { return s.Ports[i].Address < s.Ports[j].Address })
	for _, p := range s.Ports {
		s.byAddr[p.Address] = p
		has := false
		for _, e := range p.Listeners.Entries() {
			if l := e.Value; l.Mode != ModeTerminate && l.HTTP == nil {
				has = true
				break
			}
		}
		if p.passthrough != has { // written only on change: a port may be shared with a snapshot in use
			p.passthrough = has
		}
	}
	return s
}

// Port returns the port bound at addr ("ip:port"), or nil.
func (s *Snapshot) Port(addr string) *Port {
	if s == nil {
		return nil
	}
	return s.byAddr[addr]
}

// Port is one listening socket and everything that may be served on it.
type Port struct {
	// Address is the bind address, "ip:port" ("0.0.0.0:443", "127.0.0.5:443").
	Address string
	Port    int32
	// Protocol selects SNI dispatch (TLS) or whole-port forwarding (TCP).
	Protocol Protocol
	// Listeners maps a listener hostname to a listener; for ProtocolTLS and ProtocolHTTP.
	// On a TLS port all listeners share this one table whatever they do (passthrough,
	// terminate, HTTPS), so a more specific hostname always wins the SNI.
	Listeners HostTable[*Listener]
	// TCP is the listener of a ProtocolTCP port.
	TCP *Listener
	// MaxConnections caps concurrent connections on the port; 0 means no cap.
	MaxConnections int
	// ProxyIn, when set, reads a PROXY protocol header at the start of connections from
	// its trusted ranges, before anything else (a ListenerPolicy on a listener of the port).
	ProxyIn *InboundProxy
	// SpeaksFirstHint, on a TLS port whose routes are all DatabaseExposures of one engine
	// whose servers may speak first (NATS), is that engine's fix: a client that closes or
	// times out before its ClientHello there is most likely waiting for the server, and
	// the log says what to change at once (the engine table's SpeaksFirstFix).
	SpeaksFirstHint string

	// passthrough: a TLS port with at least one passthrough listener (set by New).
	passthrough bool
}

// HasPassthrough reports whether a TLS port has a passthrough listener: otherwise every
// connection to it is terminated (TLS or HTTPS), and the proxy serves it with Go's net
// package from the start.
func (p *Port) HasPassthrough() bool { return p.passthrough }

// Lookup finds the listener and route serving sni on a TLS port. sni must already be
// lower-case, without a trailing dot (see NormalizeSNI). It does not allocate.
func (p *Port) Lookup(sni []byte) (*Listener, *Route) {
	l, ok := p.Listeners.Lookup(sni)
	if !ok {
		return nil, nil
	}
	r, ok := l.Routes.Lookup(sni)
	if !ok {
		return l, nil
	}
	return l, r
}

// Listener is one Gateway listener (or the merged view of identical listeners of one Gateway).
type Listener struct {
	// Name identifies the listener in logs and metrics: "namespace/gateway/listener".
	Name string
	Mode Mode
	// TLS is the terminate-mode server configuration, built once with the snapshot and
	// never modified: it selects the certificate by SNI among the listener's certificateRefs.
	TLS *tls.Config
	// Routes maps effective route hostnames to routes (TLS listeners).
	Routes HostTable[*Route]
	// Route is the single route of a TCP listener.
	Route *Route
	// HTTP is set for HTTP listeners and HTTPS listeners (Mode Terminate, TLS set): the
	// connection, after the TLS handshake for HTTPS, is served by an HTTP server.
	HTTP *HTTPTable
	// Access are the AccessPolicies on the listener (its Gateway's, its own, its
	// ListenerSet's and that set listener's), which every connection it takes must pass
	// before its route's. Plain HTTP listeners have none.
	Access []*access.Policy
}

// Route is one attached route with its weighted backends.
type Route struct {
	// Name identifies the route in logs and metrics: "Kind/namespace/name".
	Name string
	// Backends are the route's backendRefs in order. A backend with Weight 0 takes no
	// traffic; an invalid backend (Endpoints empty, Reason set) rejects its share.
	Backends []Backend
	// TotalWeight is the sum of all weights, valid or not.
	TotalWeight int64
	// Access is the route's AccessPolicy, if any: checked after the listener's.
	Access []*access.Policy
}

// Backend is one backendRef of a route, resolved to endpoint addresses.
type Backend struct {
	// Name is "namespace/service:port".
	Name   string
	Weight int32
	// Endpoints are the ready addresses, "ip:port", in a stable order.
	Endpoints []netip.AddrPort
	// Reason is empty for a valid backend, otherwise why it takes no connections
	// (BackendNotFound, RefNotPermitted, InvalidKind, NoReadyEndpoints).
	Reason string
	// Proxy, when set, is the PROXY protocol header to write first on every connection to
	// the backend (a BackendPolicy on its Service).
	Proxy *ProxyHeader
}

// ProxyHeader says what PROXY protocol header to write to a backend.
type ProxyHeader struct {
	// Version is 1 (text) or 2 (binary).
	Version uint8
	// Authority and ALPN add those TLVs to a version 2 header: the client's SNI, and the
	// negotiated ALPN protocol (terminated TLS) or the client's first offer (passthrough).
	Authority, ALPN bool
}

// InboundProxy says whom a port believes a PROXY protocol header from (a ListenerPolicy).
type InboundProxy struct {
	// Trusted are the source ranges (the load balancers) whose header is read; a header
	// from any other address closes the connection.
	Trusted []netip.Prefix
	// Required closes a connection from a trusted range that sends no header.
	Required bool
}

// Trusts reports whether a connection from addr may carry a header.
func (p *InboundProxy) Trusts(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, r := range p.Trusted {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}

// Pick chooses a backend for a connection given a uniform random number r in [0, TotalWeight).
// It returns nil when the chosen share belongs to an invalid backend or the route has no
// weight at all: that connection must be rejected.
func (r *Route) Pick(n int64) *Backend {
	if r == nil || r.TotalWeight <= 0 {
		return nil
	}
	for i := range r.Backends {
		b := &r.Backends[i]
		if n < int64(b.Weight) {
			if b.Reason != "" || len(b.Endpoints) == 0 {
				return nil
			}
			return b
		}
		n -= int64(b.Weight)
	}
	return nil
}

// NewRoute builds a route and computes its total weight.
func NewRoute(name string, backends []Backend) *Route {
	r := &Route{Name: name, Backends: backends}
	for _, b := range backends {
		if b.Weight > 0 {
			r.TotalWeight += int64(b.Weight)
		}
	}
	return r
}

// RouteHostnames counts the hostname patterns routed on every listener of every port (a TCP
// listener's route counts once). It is cheap: no description is built.
func (s *Snapshot) RouteHostnames() int {
	if s == nil {
		return 0
	}
	n := 0
	count := func(l *Listener) {
		n += l.Routes.Len()
		if l.Route != nil {
			n++
		}
		if l.HTTP != nil {
			n += l.HTTP.Hosts.Len()
		}
	}
	for _, p := range s.Ports {
		if p.TCP != nil {
			count(p.TCP)
		}
		for _, e := range p.Listeners.Entries() {
			count(e.Value)
		}
	}
	return n
}
