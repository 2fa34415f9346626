package proxy

import (
	"net/netip"
	"time"

	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// router routes the connections the relay accepts (relay.Router), on the relay's loops: it
// asks decide what the client's bytes are, connects the kinds the relay carries by itself
// (passthrough and TCP) right there, and hands every other connection back to a goroutine
// (conn.serveFD) with the decision attached, which serves it with Go's net package:
// terminated TLS, HTTPS, PostgreSQL's negotiation, and every rejection, whose logs and
// metrics stay in one place. Its tag is the *conn.
//
// Why on the loops: a routed passthrough connection then never enters Go's poller and never
// gets a goroutine, which saves about a tenth of the proxy's CPU per connection (see
// relay.Listen).
type router struct{}

var (
	verdictWait    = relay.Verdict{Action: relay.Wait}
	verdictRelease = relay.Verdict{Action: relay.Release}
	verdictClose   = relay.Verdict{Action: relay.Close}
)

func (router) Route(pr *relay.Pair, tag any, pre []byte) relay.Verdict {
	c := tag.(*conn)
	port := c.p.port(c.pl.addr)
	if pre == nil {
		// The first call, as the loop adopts the socket: from here on closeAll asks the
		// relay to end the connection.
		c.holdPair(pr)
		if port != nil && (port.Protocol == snapshot.ProtocolHTTP || port.Protocol == snapshot.ProtocolTLS && !port.HasPassthrough()) {
			// Nothing on this port is relayed: serveFD reads it with Go's net package.
			return verdictRelease
		}
	}
	if port == nil {
		return verdictRelease // serveFD drops it: the port is going away
	}
	// A fresh state each time: the relay presents every byte read so far, and the bytes of
	// a PostgreSQL request are never answered here (kindPGNegotiate is handed over).
	st := c.preambleState()
	d, more := decide(port, pre, &st)
	if more {
		return verdictWait
	}
	c.takeHold(&d)
	switch {
	case d.kind == kindReject && d.reply == nil:
		// Refused without a byte (an unknown SNI, an AccessPolicy…): counted and logged
		// here, closed by the loop. A flood of such connections then costs no goroutine and
		// no hand-over, which the clients that are served wait behind (the PostgreSQL
		// bridge, terminated TLS).
		c.acceptProxy(&d)
		c.negotiation = d.negotiation
		c.noteRejection(&d)
		return verdictClose
	case d.kind == kindTCP:
		if v, ok := c.connectVerdict(d.listener, d.route, false, &d, pre); ok {
			c.negotiation = d.negotiation
			return v
		}
	case d.kind == kindPassthrough && !d.pgBridge:
		c.sni = string(d.sni()) // before connectVerdict: the authority TLV is the SNI
		if v, ok := c.connectVerdict(d.listener, d.route, true, &d, pre); ok {
			c.negotiation = d.negotiation
			c.p.m.HelloSeconds.Observe(time.Since(c.start).Seconds())
			return v
		}
		c.sni = ""
	}
	// Everything else, and a route without a backend to pick (forward picks again and
	// rejects it), is served by the goroutine, which acts on this very decision. It is
	// allocated here, on the way to a goroutine that allocates far more: connections the
	// relay carries keep no copy.
	h := new(decision)
	*h = d
	c.decided = h
	return verdictRelease
}

// connectVerdict picks a backend of r and the first endpoint to dial; ok is false when there
// is none.
//
// d's PROXY header, if a trusted balancer sent one, is skipped and its address becomes the
// client's; the backend's own PROXY header, if its BackendPolicy asks for one, is written
// first (pre holds the bytes read so far, for the ALPN TLV).
func (c *conn) connectVerdict(l *snapshot.Listener, r *snapshot.Route, expectTLS bool, d *decision, pre []byte) (v relay.Verdict, ok bool) {
	b := pick(r)
	if b == nil || len(b.Endpoints) == 0 {
		return v, false
	}
	c.acceptProxy(d)
	c.listener, c.route, c.backendName = l.Name, r.Name, b.Name
	c.setBackendProxy(b.Proxy)
	var prefix []byte
	if b.Proxy != nil {
		var err error
		if prefix, err = c.proxyHeader(func() string { return offeredALPN(pre[d.skip:]) }); err != nil {
			// The goroutine path tries again and closes the connection with the reason.
			c.p.log.Warn("cannot write the backend's PROXY header", "backend", b.Name, "error", err)
			c.listener, c.route, c.backendName = "", "", ""
			c.setBackendProxy(nil)
			return v, false
		}
	}
	if prefix != nil {
		c.px.prefixLen = len(prefix) // the relay counts it among the client's bytes
	}
	c.enterRoute()
	c.plan = newDialPlan(b)
	ep, _ := c.plan.next(&c.p.health)
	return relay.Verdict{
		Action:  relay.Connect,
		To:      ep,
		Dial:    relay.DialOptions{Timeout: c.p.opts.DialTimeout, KeepAlive: c.p.opts.KeepAlive},
		Options: c.relayOptions(expectTLS),
		Skip:    d.skip,
		Prefix:  prefix,
	}, true
}

func (router) Dialed(tag any, ep netip.AddrPort, took time.Duration, err error) netip.AddrPort {
	c := tag.(*conn)
	c.dialed(c.backendName, ep, took, err)
	if err == nil {
		return netip.AddrPort{}
	}
	if next, ok := c.plan.next(&c.p.health); ok {
		return next
	}
	c.p.log.Warn("backend unreachable", "route", c.route, "backend", c.backendName, "error", err)
	return netip.AddrPort{}
}

func (router) Release(tag any, fd int, pre []byte, err error) {
	c := tag.(*conn)
	c.backendMu.Lock()
	c.released, c.pair = true, nil
	c.backendMu.Unlock()
	if err != nil {
		// Undecided: a deadline that passed, an EOF or a read error show again to the
		// goroutine's first read, which rejects the connection with the usual reason; a
		// full buffer is read on from there.
		c.decided = nil
	}
	// Route notes the connection's names only when it connects, so nothing is left to undo.
	go c.serveFD(fd, append([]byte(nil), pre...))
}

func (router) Done(tag any, res relay.Result) {
	c := tag.(*conn)
	if res.Outcome == relay.OutcomeClosed {
		// Route counted and logged the rejection it closed.
		c.backendMu.Lock()
		c.pair, c.relayEnded = nil, true
		c.backendMu.Unlock()
		c.unregister()
		return
	}
	if res.Outcome == relay.OutcomeDialFailed {
		c.backendMu.Lock()
		c.pair, c.relayEnded = nil, true
		c.backendMu.Unlock()
		c.p.rejected(c.rejection(reasonDialFailed, c.sni, ""))
		c.unregister()
		return
	}
	c.relayDone(res)
}
