package proxy

import (
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rejection is a connection closed without a byte written (or only a PostgreSQL
// ErrorResponse), as rejected records it. listener, route and policy are set when the
// connection got that far (a policy refused it, its route had no backend).
type rejection struct {
	addr                    string
	client                  netip.AddrPort
	reason                  outcome
	sni                     string
	listener, route, policy string
	start                   time.Time
	negotiation             negotiation
}

// rejected counts and logs a connection closed without a byte written.
func (p *Proxy) rejected(r rejection) {
	if (r.reason == reasonClientGone || r.reason == reasonTimeout) && r.sni == "" {
		p.speaksFirstHint(r)
	}
	p.rejectedCounter(r.reason, r.route).Inc()
	p.m.Connections.WithLabelValues(r.addr, r.listener, r.route, string(r.negotiation), string(r.reason)).Inc()
	if al := p.opts.AccessLog; al != nil {
		e := al.Begin("connection rejected").AddrPort("client", r.client).Str("address", r.addr).
			Str("negotiation", string(r.negotiation)).Str("sni", r.sni)
		if r.listener != "" {
			e.Str("listener", r.listener)
		}
		if r.route != "" {
			e.Str("route", r.route)
		}
		if r.policy != "" {
			e.Str("policy", r.policy)
		}
		e.Str("outcome", string(r.reason)).Dur("duration", time.Since(r.start)).End()
	}
}

// rejectedCounter is snigate_rejected_connections_total's child for reason and route,
// resolved once per pair: a flood of refused connections must not hash labels each time.
func (p *Proxy) rejectedCounter(reason outcome, route string) prometheus.Counter {
	k := [2]string{string(reason), route}
	p.endMu.RLock()
	ctr := p.rejects[k]
	p.endMu.RUnlock()
	if ctr != nil {
		return ctr
	}
	ctr = p.m.Rejected.WithLabelValues(string(reason), route)
	p.endMu.Lock()
	p.rejects[k] = ctr
	p.endMu.Unlock()
	return ctr
}

// reject closes the connection without writing a byte, and counts and logs why.
func (c *conn) reject(reason outcome, sni string) {
	// Counted before the close: a client that sees its connection end finds the rejection
	// in the metrics already.
	c.p.rejected(c.rejection(reason, sni, ""))
	c.client.Close()
}

// decidedRejection is c's rejection as decide made it: its reason, and the listener, route
// and policy it names when an AccessPolicy refused it.
func (c *conn) decidedRejection(d *decision) rejection {
	if d.listener != nil {
		c.listener = d.listener.Name
	}
	if d.route != nil {
		c.route = d.route.Name
	}
	policy := ""
	if d.policy != nil {
		policy = d.policy.Name
	}
	return c.rejection(d.reason, string(d.sni()), policy)
}

// noteRejection counts and logs a rejection the relay's loop closes (router.Route).
func (c *conn) noteRejection(d *decision) { c.p.rejected(c.decidedRejection(d)) }

// rejection is c's rejection for reason.
func (c *conn) rejection(reason outcome, sni, policy string) rejection {
	return rejection{addr: c.pl.addr, client: c.peer, reason: reason, sni: sni, listener: c.listener, route: c.route,
		policy: policy, start: c.start, negotiation: c.negotiation}
}

// speaksFirstHint logs, for a client that closed or timed out before its ClientHello on a
// port whose databases' servers may speak first, that engine's fix, at once: NATS clients
// give up after 2 s, long before the hello timeout, and the log said only client_closed.
// Only on this path, never on an accepted connection's.
func (p *Proxy) speaksFirstHint(r rejection) {
	s := p.snap.Load()
	if s == nil {
		return
	}
	if port := s.Port(r.addr); port != nil && port.SpeaksFirstHint != "" {
		// At most one a second: a flood of empty connections must not flood the log (the
		// access log, which drops what it cannot write, has every one).
		now := time.Now().UnixNano()
		last := p.hintAt.Load()
		if now-last < int64(time.Second) || !p.hintAt.CompareAndSwap(last, now) {
			return
		}
		p.log.Warn("client sent no ClientHello on a port whose databases' servers may speak first: "+port.SpeaksFirstHint,
			"client", r.client.String(), "address", r.addr, "outcome", string(r.reason))
	}
}
