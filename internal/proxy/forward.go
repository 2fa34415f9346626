package proxy

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// forward connects l's route (or r) to a backend, has preface (the bytes already read)
// written to it first, and relays both ways.
func (c *conn) forward(l *snapshot.Listener, r *snapshot.Route, preface []byte) {
	if r == nil {
		r = l.Route
	}
	c.listener = l.Name
	rl, err := c.p.relay()
	if err != nil {
		c.p.log.Error("relay unavailable", "error", err)
		c.reject(reasonRelayFailed, c.sni)
		return
	}
	expectTLS := l.Mode == snapshot.ModePassthrough
	if c.pgBridge {
		c.forwardPG(rl, r, preface)
		return
	}
	// The relay dials: the backend socket goes straight into its event loop.
	var dialed *relay.Pair
	reason := c.connectBackend(r, func(ep netip.AddrPort) error {
		var err error
		dialed, err = rl.Dial(ep, relay.DialOptions{Timeout: c.p.opts.DialTimeout, KeepAlive: c.p.opts.KeepAlive})
		return err
	})
	if reason != "" {
		c.reject(reason, c.sni)
		return
	}
	hdr, err := c.proxyHeader(func() string { return offeredALPN(preface) })
	if err != nil {
		c.p.log.Error("cannot write the backend's PROXY header", "error", err)
		dialed.Abandon()
		c.closeAndRecord(outcomeBackendWriteFailed)
		return
	}
	if hdr != nil {
		preface = append(hdr, preface...)
		c.px.prefixLen = len(hdr) // the relay counts it among the client's bytes
	}
	c.handOver(func() (*relay.Pair, error) {
		err := dialed.Attach(c.client, preface, c.relayOptions(expectTLS), c.relayDone)
		c.releaseHello() // Attach copied the preface
		return dialed, err
	})
}

// handOver gives the connection to the relay with start (Attach or Start): from then on the
// relay's callback, relayDone, ends it.
func (c *conn) handOver(start func() (*relay.Pair, error)) {
	c.async = true // set first: the callback may run before start returns
	pr, err := start()
	if err != nil {
		c.async = false
		c.p.log.Error("relay refused a connection", "error", err)
		c.closeAndRecord(reasonRelayFailed)
		return
	}
	c.holdPair(pr)
}

// forwardPG is forward for PostgreSQL's SSLRequest bridge: the proxy does the SSLRequest
// exchange with the backend itself before the relay takes over.
func (c *conn) forwardPG(rl *relay.Relay, r *snapshot.Route, preface []byte) {
	if reason := c.connectBackend(r, c.dialGo); reason != "" {
		c.reject(reason, c.sni)
		return
	}
	bc := c.backend
	if err := c.writeProxyHeader(bc, func() string { return offeredALPN(preface) }); err != nil {
		c.closeAndRecord(outcomeBackendWriteFailed)
		return
	}
	if err := c.pgSSLExchange(bc); err != nil {
		c.p.log.Warn("postgres backend refused TLS", "route", r.Name, "endpoint", c.endpoint(), "error", err)
		c.closeAndRecord(reasonBackendNoTLS)
		return
	}
	if ip := c.peer.Addr(); ip.IsValid() {
		ep := c.endpointAddr
		c.pl.pg.add(ip, ep)
		c.onEnd = append(c.onEnd, func() { c.pl.pg.remove(ip, ep) })
	}
	if len(preface) > 0 {
		if _, err := bc.Write(preface); err != nil {
			c.closeAndRecord(outcomeBackendWriteFailed)
			return
		}
		c.in += int64(len(preface))
	}
	c.releaseHello()
	c.handOver(func() (*relay.Pair, error) {
		return rl.Start(c.client, bc, c.relayOptions(true), c.relayDone)
	})
}

func (c *conn) relayOptions(expectTLS bool) relay.Options {
	// With expectTLS, the backend's first bytes are checked before anything reaches the
	// client: a backend that does not answer a ClientHello with a TLS record (a MySQL or
	// MariaDB greeting, a plaintext server) is reported instead of handing the client bytes
	// it cannot parse.
	return relay.Options{IdleTimeout: c.p.opts.IdleTimeout, ExpectTLS: expectTLS}
}

// holdPair records the relay's hold on the connection, so that closeAll asks the relay to
// end it, unless the relay has ended it already.
func (c *conn) holdPair(pr *relay.Pair) {
	c.backendMu.Lock()
	c.holdLocked(pr)
	c.backendMu.Unlock()
}

func (c *conn) holdLocked(pr *relay.Pair) {
	if c.relayEnded {
		return
	}
	c.pair = pr
	if c.closing {
		// A drain cut-off came between the hand-over and now: it closed the net.Conns
		// the relay had already duplicated, so the pair must be stopped here.
		pr.Stop(relay.OutcomeShutdown)
	}
}

// relayDone is the relay's callback, on one of its loops: the connection has ended both
// ways. It writes the access log line and metrics.
func (c *conn) relayDone(res relay.Result) {
	c.backendMu.Lock()
	c.pair, c.relayEnded = nil, true
	c.backendMu.Unlock()
	// The backend's PROXY header is not the client's bytes; a pair that ended before it
	// was all written counts none of them.
	var prefix int64
	if c.px != nil {
		prefix = int64(c.px.prefixLen)
	}
	c.in += max(0, res.Bytes[0]-prefix)
	c.out += res.Bytes[1]
	o := outcomeOK
	switch res.Outcome {
	case relay.OutcomeNotTLS:
		o = outcomeBackendNotTLS
		c.p.log.Warn("backend did not answer with TLS; a server-speaks-first protocol (MySQL, MariaDB, NATS without handshake_first) cannot be routed by SNI: expose it on a TCP listener with a TCPRoute",
			"route", c.route, "backend", c.backendName, "endpoint", c.endpoint(), "firstByte", quoteByte(res.FirstByte))
	case "":
	default:
		// outcomeIdle, outcomeShutdown: what the relay or Stop named.
		o = outcome(res.Outcome)
	}
	// Checked first: the arguments would be boxed (allocated) even for a disabled level, and
	// a reset ends many connections.
	if res.Err != nil && c.p.log.Enabled(context.Background(), slog.LevelDebug) {
		c.p.log.Debug("relay ended on an error", "sni", c.sni, "route", c.route, "error", res.Err)
	}
	c.closeAndRecord(o)
	c.unregister()
}
