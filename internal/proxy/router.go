package proxy

import (
	"errors"
	"net/netip"
	"time"

	"github.com/snigate/snigate/internal/clienthello"
	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// router routes the connections the relay adopts (relay.Router), on the relay's loops: from
// the ClientHello's bytes it picks a passthrough route's backend (and a TCP listener's at
// once), and hands every other connection back to a goroutine (conn.serveFD), which serves
// it with Go's net package: terminated TLS, HTTPS, PostgreSQL's negotiation, and every
// rejection, whose logs and metrics stay in one place. Its tag is the *conn.
//
// Why on the loops: a routed passthrough connection then never enters Go's poller and never
// gets a goroutine, which saves about a tenth of the proxy's CPU per connection (see
// relay.Adopt).
type router struct{}

var (
	verdictWait    = relay.Verdict{Action: relay.Wait}
	verdictRelease = relay.Verdict{Action: relay.Release}
)

func (router) Route(_ *relay.Pair, tag any, pre []byte) relay.Verdict {
	c := tag.(*conn)
	port := c.p.snap.Load().Port(c.pl.addr)
	switch {
	case port == nil:
		return verdictRelease
	case port.Protocol == snapshot.ProtocolTCP:
		c.negotiation = "tcp"
		return c.connectVerdict(port.TCP, nil, false)
	case port.Protocol == snapshot.ProtocolHTTP:
		return verdictRelease
	case len(pre) == 0:
		return verdictWait
	case pre[0] != 0x16:
		return verdictRelease // PostgreSQL's requests, or not TLS at all: readPreamble
	}
	var (
		hello  clienthello.Hello
		parser = clienthello.Parser{MaxLen: c.p.opts.HelloMaxBytes}
	)
	if err := parser.Parse(pre, &hello); err != nil {
		if errors.Is(err, clienthello.ErrIncomplete) {
			return verdictWait
		}
		return verdictRelease
	}
	if hello.HasALPN("postgresql") {
		return verdictRelease // direct TLS PostgreSQL: the backend may need the SSLRequest bridge
	}
	var sniBuf [snapshot.MaxHostnameLen]byte
	sni, ok := snapshot.NormalizeSNI(sniBuf[:], hello.SNI)
	if !ok {
		return verdictRelease
	}
	l, r := port.Lookup(sni)
	if l == nil || r == nil || l.HTTP != nil || l.Mode == snapshot.ModeTerminate {
		return verdictRelease
	}
	c.sni = string(sni)
	c.p.m.HelloSeconds.Observe(time.Since(c.start).Seconds())
	return c.connectVerdict(l, r, true)
}

// connectVerdict picks a backend of l's route (or r) and the first endpoint to dial; it
// releases the connection when there is none (forward rejects it).
func (c *conn) connectVerdict(l *snapshot.Listener, r *snapshot.Route, expectTLS bool) relay.Verdict {
	if r == nil {
		r = l.Route
	}
	b := pick(r)
	if b == nil || len(b.Endpoints) == 0 {
		return verdictRelease
	}
	c.listener, c.route, c.backendName = l.Name, r.Name, b.Name
	c.plan = newDialPlan(b)
	ep, _ := c.plan.next(&c.p.health)
	return relay.Verdict{
		Action:  relay.Connect,
		To:      ep,
		Dial:    relay.DialOptions{Timeout: c.p.opts.DialTimeout, KeepAlive: c.p.opts.KeepAlive},
		Options: c.relayOptions(expectTLS),
	}
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
	// What Route noted is decided again from scratch.
	c.sni, c.listener, c.route, c.backendName, c.negotiation = "", "", "", "", "tls"
	// A deadline that passed, an EOF or a read error show again to the goroutine's first
	// read, which rejects the connection with the usual reason.
	go c.serveFD(fd, append([]byte(nil), pre...))
}

func (router) Done(tag any, res relay.Result) {
	c := tag.(*conn)
	if res.Outcome == relay.OutcomeDialFailed {
		c.backendMu.Lock()
		c.pair, c.relayEnded = nil, true
		c.backendMu.Unlock()
		c.p.rejected(c.pl.addr, c.peer.String(), reasonDialFailed, c.sni, c.start, c.negotiation)
		c.end()
		return
	}
	c.relayDone(res)
}
