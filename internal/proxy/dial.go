package proxy

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/snapshot"
)

// pick chooses a weighted backend of r, or nil when the connection must be rejected.
func pick(r *snapshot.Route) *snapshot.Backend {
	if r == nil || r.TotalWeight <= 0 {
		return nil
	}
	return r.Pick(rand.Int64N(r.TotalWeight))
}

// dial connects to an endpoint of b with one, starting at a random endpoint and trying the
// next on failure; endpoints that keep failing are skipped while others remain.
func (c *conn) dial(b *snapshot.Backend, one func(netip.AddrPort) error) error {
	plan := newDialPlan(b)
	var lastErr error
	for ep, ok := plan.next(&c.p.health); ok; ep, ok = plan.next(&c.p.health) {
		t := time.Now()
		err := one(ep)
		c.dialed(b.Name, ep, time.Since(t), err)
		if err == nil {
			return nil
		}
		lastErr = err
	}
	return lastErr
}

// dialed records a connect's outcome: the dial histogram, the endpoint's health, and the
// endpoint for logs.
func (c *conn) dialed(backend string, ep netip.AddrPort, took time.Duration, err error) {
	p := c.p
	if err == nil {
		p.dialOK.Observe(took.Seconds())
		p.health.succeeded(ep)
		c.endpointAddr = ep
		return
	}
	p.dialErr.Observe(took.Seconds())
	if p.health.failed(ep, time.Now()) {
		p.log.Warn("backend endpoint ejected", "backend", backend, "endpoint", ep.String(),
			"for", p.opts.EjectFor, "error", err)
	}
}

// dialPlan is the order a connection tries a backend's endpoints in: from a random one on,
// first those not ejected, then the ejected ones (better than nothing).
type dialPlan struct {
	eps            []netip.AddrPort
	start, pass, i int
	now            time.Time
}

func newDialPlan(b *snapshot.Backend) dialPlan {
	d := dialPlan{eps: b.Endpoints, now: time.Now()}
	if n := len(b.Endpoints); n > 0 { // Route.Pick returns no backend without endpoints
		d.start = rand.IntN(n)
	}
	return d
}

// next returns the next endpoint to try, false when every one was tried.
func (d *dialPlan) next(h *health) (netip.AddrPort, bool) {
	n := len(d.eps)
	for ; d.pass < 2; d.pass, d.i = d.pass+1, 0 {
		for d.i < n {
			ep := d.eps[(d.start+d.i)%n]
			d.i++
			if h.ejected(ep, d.now) == (d.pass == 1) {
				return ep, true
			}
		}
	}
	return netip.AddrPort{}, false
}

// dialGo connects on Go's poller: for backends the proxy talks to itself before relaying
// (PostgreSQL's SSLRequest exchange, terminated TLS).
func (c *conn) dialGo(ep netip.AddrPort) error {
	bc, err := c.p.dialBackend(ep)
	if err != nil {
		return err
	}
	c.setBackend(bc)
	return nil
}

// connectBackend picks and dials a backend of r with one (dialGo, or the relay's dial),
// recording names for logs. It returns a reject reason on failure, "" on success.
func (c *conn) connectBackend(r *snapshot.Route, one func(netip.AddrPort) error) outcome {
	c.route = r.Name
	b := pick(r)
	if b == nil {
		return reasonNoBackend
	}
	c.backendName = b.Name
	c.setBackendProxy(b.Proxy)
	c.enterRoute()
	if err := c.dial(b, one); err != nil {
		c.p.log.Warn("backend unreachable", "route", r.Name, "backend", b.Name, "error", err)
		return reasonDialFailed
	}
	return ""
}

func (c *conn) setBackend(bc *fdconn.Conn) {
	c.backendMu.Lock()
	c.backend = bc
	c.backendMu.Unlock()
}
