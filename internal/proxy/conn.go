package proxy

import (
	"crypto/tls"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// holds holds the access holds of connections that count against a limit.
var holds = sync.Pool{New: func() any { return new(access.Hold) }}

// takeHold takes what a final decision counts against its AccessPolicies' limits, which
// unregister gives back: from here on the connection owns it, whatever acts on the
// decision (the relay, or the goroutine it is released to with a copy of it).
func (c *conn) takeHold(d *decision) {
	if d.hold.Empty() {
		return
	}
	if c.hold != nil {
		// A second final decision (a PostgreSQL request answered, then the ClientHello):
		// the first counted nothing the second does not, but give it back all the same.
		c.p.access.Release(c.hold)
	} else {
		c.hold = holds.Get().(*access.Hold)
	}
	*c.hold, d.hold = d.hold, access.Hold{}
}

// helloBufs holds the buffers ClientHellos are read into. A buffer lives only until the
// connection is routed, so a busy proxy needs few of them.
var helloBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// conn is the state of one proxied connection.
type conn struct {
	p      *Proxy
	pl     *portListener
	client *fdconn.Conn // nil while the relay holds the client's socket (adopted)
	// fd is the client's socket as accepted (for its local address while the relay holds
	// it; see localAddr).
	fd int32
	// peer is the client's address: the TCP peer's, or the one a trusted load balancer's
	// PROXY header gave (px.via is then the balancer's).
	peer netip.AddrPort
	// px is the PROXY protocol state, nil for a connection that has none (most): kept out
	// of line so that a connection without a policy costs not a byte more.
	px    *proxyState
	start time.Time
	// plan is the endpoint order of the dial in progress on a relay loop (router).
	plan dialPlan

	backendMu sync.Mutex
	backend   *fdconn.Conn
	tlsConn   *tls.Conn

	negotiation negotiation
	// decided is the relay router's decision, handed over with the socket (router.Route),
	// until handle takes it; nil when the relay gave the socket back undecided.
	decided *decision
	// pgBridge makes the backend side do PostgreSQL's SSLRequest exchange before the
	// ClientHello is written (see package pgwire).
	pgBridge bool
	// pgTracked is set while the connection counts for plaintext cancel routing.
	pgTracked netip.AddrPort
	// helloBuf is the pooled buffer the preamble was read into; it goes back to the pool
	// as soon as its bytes were handed on, so idle connections hold no buffer.
	helloBuf     *[]byte
	sni          string
	listener     string
	route        string
	backendName  string
	endpointAddr netip.AddrPort
	in, out      int64 // client→backend, backend→client
	lastActive   atomic.Int64
	// routeActive is the route's child of snigate_route_active_connections while the
	// connection counts there (enterRoute); unregister takes it off.
	routeActive prometheus.Gauge
	// hold is what the connection counts against its AccessPolicies' limits (takeHold),
	// given back by unregister; nil when it counts nothing (most connections): out of line,
	// so that a connection without limits costs not a byte more.
	hold *access.Hold

	// async is set once the relay owns the connection: its callback ends it, and handle's
	// goroutine (with the deep stack it grew while routing and dialing) exits instead of
	// waiting. An idle connection then costs no goroutine at all.
	async bool
	// pair is the relay's hold on both sockets, from holdPair until the relay's callback
	// (guarded by backendMu, like relayEnded).
	pair       *relay.Pair
	relayEnded bool
	released   bool // the relay gave the client back (guarded by backendMu)
	closing    bool // closeAll or endEarly ran (guarded by backendMu)
	onEnd      []func()
}

// unregister takes the connection out of the proxy's books (its onEnd hooks, the port's
// active count and gauge, the set Shutdown drains); it runs exactly once per connection,
// after its sockets were closed and its outcome recorded.
func (c *conn) unregister() {
	for _, f := range c.onEnd {
		f()
	}
	if h := c.hold; h != nil {
		c.p.access.Release(h)
		c.hold = nil
		holds.Put(h)
	}
	c.pl.activeGauge.Dec()
	if c.routeActive != nil {
		c.routeActive.Dec()
	}
	p := c.p
	p.connMu.Lock()
	delete(p.connSet, c)
	p.connMu.Unlock()
	c.pl.active.Add(-1)
	p.conns.Done()
}

// newConn registers a connection just accepted from peer.
func (p *Proxy) newConn(pl *portListener, peer netip.AddrPort) *conn {
	c := &conn{p: p, pl: pl, peer: peer, start: time.Now(), negotiation: negTLS}
	p.connMu.Lock()
	p.connSet[c] = struct{}{}
	p.connMu.Unlock()
	pl.activeGauge.Inc()
	return c
}

// serveFD serves a connection on a goroutine through Go's net package, with pre the bytes
// the relay read from it already (see router.Release).
func (c *conn) serveFD(fd int, pre []byte) {
	// The socket carries the listener's options already (setListenerSockopts): fdconn
	// serves it as it is, where net.FileConn would spend twelve system calls resetting them.
	client, err := fdconn.New(fd, c.peer)
	if err != nil {
		unix.Close(fd)
		c.p.log.Warn("accepted socket unusable", "address", c.pl.addr, "error", err)
		c.p.rejected(rejection{addr: c.pl.addr, client: c.peer, reason: reasonAcceptFailed, start: c.start, negotiation: c.negotiation})
		c.unregister()
		return
	}
	c.backendMu.Lock()
	c.client = client
	closing := c.closing
	c.backendMu.Unlock()
	if closing {
		// A drain cut-off came while the relay held the socket.
		client.Close()
		c.closeAndRecord(outcomeShutdown)
		c.unregister()
		return
	}
	port := c.p.port(c.pl.addr)
	if port == nil {
		client.CloseReset()
		c.unregister()
		return
	}
	c.handle(port, pre)
}

// handle serves a connection with Go's net package: the decisions the relay's router does
// not carry itself (terminated TLS, HTTP, PostgreSQL's negotiation, rejections), or any
// connection not adopted by the relay. already holds the bytes read from the client; the
// relay's decision on them, if it made one, is in c.decided.
func (c *conn) handle(port *snapshot.Port, already []byte) {
	p, pl, client := c.p, c.pl, c.client
	defer func() {
		if !c.async {
			c.unregister()
		}
	}()
	defer c.releaseHello()
	first := c.decided
	c.decided = nil
	d, pre := c.readPreamble(port, first, already)
	c.takeHold(&d)
	c.negotiation = d.negotiation
	if d.skip > 0 {
		// A trusted balancer's PROXY header: its address is the client's from here on, and
		// its bytes go nowhere (a CancelRequest's consumed counts them).
		c.acceptProxy(&d)
		if d.kind == kindPGCancel {
			d.consumed -= d.skip
		}
		pre = pre[d.skip:]
	}
	switch d.kind {
	case kindReject:
		if d.reason == reasonTimeout && len(pre) == 0 && d.negotiation == negTLS && port.SpeaksFirstHint == "" {
			// The client sent nothing at all: it is most likely waiting for the server to
			// speak first (MySQL, MariaDB, NATS without handshake_first), which SNI routing
			// cannot serve. Say so once per connection, next to the access log line (on a
			// port of one such engine's exposures, rejected names its fix instead).
			p.log.Warn("client sent nothing before the hello timeout; server-speaks-first protocols (MySQL, MariaDB, NATS without handshake_first) cannot be routed by SNI: expose them on a TCP listener with a TCPRoute",
				"client", client.RemoteAddr().String(), "address", pl.addr)
		}
		if d.reply != nil {
			client.Write(d.reply)
		}
		c.p.rejected(c.decidedRejection(&d))
		client.Close()
	case kindTCP:
		c.forward(d.listener, d.route, pre)
	case kindHTTP:
		c.servePlainHTTP()
	case kindPGCancel:
		c.forwardCancel(append([]byte(nil), pre[:d.consumed]...))
	case kindHTTPS:
		c.sni = string(d.sni())
		p.m.HelloSeconds.Observe(time.Since(c.start).Seconds())
		c.serveHTTPS(d.listener, pre)
	case kindTerminate:
		c.sni, c.listener = string(d.sni()), d.listener.Name
		p.m.HelloSeconds.Observe(time.Since(c.start).Seconds())
		c.terminate(d.listener, d.route, pre)
	case kindPassthrough:
		c.sni, c.listener = string(d.sni()), d.listener.Name
		p.m.HelloSeconds.Observe(time.Since(c.start).Seconds())
		c.pgBridge = d.pgBridge
		c.forward(d.listener, d.route, pre)
	default:
		// readPreamble returns only final decisions: a kind nobody acts on is closed like a
		// reject, never served.
		p.log.Error("connection left undecided", "address", pl.addr, "kind", d.kind.String())
		c.reject(reasonMalformed, "")
	}
}

func (c *conn) releaseHello() {
	if c.helloBuf != nil {
		helloBufs.Put(c.helloBuf)
		c.helloBuf = nil
	}
}

// endpoint is the backend address for logs ("" before one was dialed). Formatted only when
// a line is written, not on every connection.
func (c *conn) endpoint() string {
	if !c.endpointAddr.IsValid() {
		return ""
	}
	return c.endpointAddr.String()
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }
