package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snigate/snigate/internal/accesslog"
	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/relay"
)

// closeAndRecord closes both sides and records how the connection ended: its counters and
// its access log line. It runs once per connection that got past a reject (p.reject records
// those); unregister follows.
func (c *conn) closeAndRecord(o outcome) {
	c.closeAll()
	p := c.p
	ec := p.endCounters(endKey{c.pl.addr, c.listener, c.route, c.negotiation, o})
	ec.conns.Inc()
	if ec.in != nil {
		ec.in.Add(float64(c.in))
		ec.out.Add(float64(c.out))
	}
	if al := p.opts.AccessLog; al != nil {
		e := al.Begin("connection").AddrPort("client", c.peer).Str("address", c.pl.addr).
			Str("listener", c.listener).Str("negotiation", string(c.negotiation)).Str("sni", c.sni).
			Str("route", c.route).Str("backend", c.backendName).AddrPort("endpoint", c.endpointAddr).
			Int("bytes_in", c.in).Int("bytes_out", c.out).Dur("duration", time.Since(c.start)).
			Str("outcome", string(o))
		c.endLine(e)
	}
}

// endLine ends an access line of c: with "via", the load balancer the client came through
// (its PROXY header gave "client"), when there was one.
func (c *conn) endLine(e *accesslog.Entry) {
	if via := c.via(); via.IsValid() {
		e.AddrPort("via", via)
	}
	e.End()
}

func (c *conn) closeAll() {
	c.backendMu.Lock()
	defer c.backendMu.Unlock()
	c.closeLocked(false)
}

// closeLocked closes both sides (backendMu held). With reset, each socket is closed with a
// reset and the client gets no close_notify: a side's break reaches the other side as one,
// since a clean end would tell that peer the stream ended whole (see relay.Pair.finish).
func (c *conn) closeLocked(reset bool) {
	c.closing = true
	if c.pair != nil {
		// The relay owns both sockets until its callback runs, which closes them.
		c.pair.Stop(relay.OutcomeShutdown)
		return
	}
	if c.tlsConn != nil && !reset {
		c.tlsConn.Close()
	}
	for _, s := range [2]*fdconn.Conn{c.client, c.backend} {
		switch {
		case s == nil:
		case reset:
			s.CloseReset()
		default:
			s.Close()
		}
	}
}

// enterRoute counts the connection among its route's open ones (the status page's live
// count, snigate_route_active_connections) until unregister; once, however many times the
// connection is routed (the relay's router, then the goroutine it released the socket to).
func (c *conn) enterRoute() {
	if c.routeActive != nil {
		return
	}
	g := c.p.routeGauge(c.route)
	g.Inc()
	c.routeActive = g
}

// routeGauge returns route's child of snigate_route_active_connections, resolved once per
// route (as endCounters, to keep the label hashing off the per-connection path).
func (p *Proxy) routeGauge(route string) prometheus.Gauge {
	p.endMu.RLock()
	g := p.routeGauges[route]
	p.endMu.RUnlock()
	if g != nil {
		return g
	}
	g = p.m.RouteActive.WithLabelValues(route)
	p.endMu.Lock()
	p.routeGauges[route] = g
	p.endMu.Unlock()
	return g
}

// endKey is the label set of a finished connection's counters.
type endKey struct {
	addr, listener, route string
	negotiation           negotiation
	outcome               outcome
}

// endCounters are the counters a finished connection adds to: snigate_connections_total's
// child, and snigate_bytes_total's two for its route (nil without a route).
type endCounters struct{ conns, in, out prometheus.Counter }

// endCounters returns k's counters, resolved once: a label lookup costs a hash of every
// label, a UTF-8 check of each and an allocation, three times per connection.
func (p *Proxy) endCounters(k endKey) *endCounters {
	p.endMu.RLock()
	ec := p.ends[k]
	p.endMu.RUnlock()
	if ec != nil {
		return ec
	}
	ec = &endCounters{conns: p.m.Connections.WithLabelValues(k.addr, k.listener, k.route, string(k.negotiation), string(k.outcome))}
	if k.route != "" {
		ec.in = p.m.Bytes.WithLabelValues(k.route, "client_to_backend")
		ec.out = p.m.Bytes.WithLabelValues(k.route, "backend_to_client")
	}
	p.endMu.Lock()
	p.ends[k] = ec
	p.endMu.Unlock()
	return ec
}
