package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/accesslog"
	"github.com/snigate/snigate/internal/clienthello"
	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/proxyproto"
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

// proxyState is a connection's PROXY protocol state.
type proxyState struct {
	// via is the load balancer's address, when its PROXY header gave the client's.
	via netip.AddrPort
	// backend is the PROXY header the picked backend takes (nil: none). prefixLen is how
	// many bytes of the relay's client→backend count were that header, where the relay
	// wrote it (set by whoever hands it the header with the client's bytes).
	backend   *snapshot.ProxyHeader
	prefixLen int
}

// proxy returns px, made on first use.
func (c *conn) proxy() *proxyState {
	if c.px == nil {
		c.px = &proxyState{}
	}
	return c.px
}

// setBackendProxy notes the picked backend's PROXY header (nil: none).
func (c *conn) setBackendProxy(h *snapshot.ProxyHeader) {
	if h != nil || c.px != nil {
		c.proxy().backend = h
	}
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
	port := c.p.snap.Load().Port(c.pl.addr)
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
		if d.reason == reasonTimeout && len(pre) == 0 && d.negotiation == negTLS {
			// The client sent nothing at all: it is most likely waiting for the server to
			// speak first (MySQL, MariaDB, NATS without handshake_first), which SNI routing
			// cannot serve. Say so once per connection, next to the access log line.
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

// writeProxyHeader writes the picked backend's PROXY header, if it takes one, to bc.
func (c *conn) writeProxyHeader(bc *fdconn.Conn, alpn func() string) error {
	hdr, err := c.proxyHeader(alpn)
	if err == nil && hdr != nil {
		_, err = bc.Write(hdr)
	}
	if err != nil {
		c.p.log.Warn("cannot write the backend's PROXY header", "backend", c.backendName, "endpoint", c.endpoint(), "error", err)
	}
	return err
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

// terminate completes the TLS handshake with the listener's certificate, replaying the
// ClientHello bytes already read, then forwards the plaintext.
func (c *conn) terminate(l *snapshot.Listener, r *snapshot.Route, hello []byte) {
	pc := &prefixConn{Conn: c.client, prefix: hello}
	tc := tls.Server(pc, l.TLS)
	c.backendMu.Lock()
	c.tlsConn = tc
	c.backendMu.Unlock()
	c.client.SetDeadline(c.start.Add(c.p.opts.HelloTimeout))
	if err := tc.Handshake(); err != nil {
		// crypto/tls has answered with an alert where the protocol calls for one: this
		// listener terminates TLS, so its handshake errors are the client's to read. (An SNI
		// with a trailing dot, which RFC 6066 forbids, ends here with decode_error: it is
		// routed, but Go's TLS server refuses it.)
		c.route = r.Name
		c.p.log.Debug("tls handshake failed", "sni", c.sni, "error", err)
		c.closeAndRecord(reasonHandshake)
		return
	}
	c.client.SetDeadline(time.Time{})
	c.releaseHello()
	reason := c.connectBackend(r, c.dialGo)
	if reason != "" {
		// The handshake is done: closing is all that is left. No application data was sent.
		tc.Close()
		c.p.rejectedCounter(reason, c.route).Inc()
		c.closeAndRecord(reason)
		return
	}
	if err := c.writeProxyHeader(c.backend, func() string { return tc.ConnectionState().NegotiatedProtocol }); err != nil {
		tc.Close()
		c.closeAndRecord(outcomeBackendWriteFailed)
		return
	}
	c.closeAndRecord(c.pipeTLS(tc, c.backend))
}

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

// endHalf ends a terminated connection's copy toward dst: a clean EOF is passed on as a
// half-close (a close_notify toward the client); an idle timeout or an error of either
// side ends both directions (endEarly), and *ended says why.
func (c *conn) endHalf(ended *outcome, dst interface{ CloseWrite() error }, res copyResult) {
	switch {
	case res.idle:
		c.endEarly(ended, outcomeIdle, false)
	case res.err != nil:
		c.endEarly(ended, outcomeOK, true)
	default:
		dst.CloseWrite()
	}
}

// endEarly ends both directions of a terminated connection for o (closeLocked; reset for a
// side's break, a clean close for the idle timeout, as the relay does), unless something
// ended them already: the first reason stands in *ended (guarded by backendMu). Closed by
// no endEarly, the sockets were closed by the drain's cut-off (closeAll).
func (c *conn) endEarly(ended *outcome, o outcome, reset bool) {
	c.backendMu.Lock()
	defer c.backendMu.Unlock()
	switch {
	case !c.closing:
		*ended = o
		c.closeLocked(reset)
	case *ended == "":
		*ended = outcomeShutdown
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

// tcpPeer is the address the connection came from: the load balancer's, after a header.
func (c *conn) tcpPeer() netip.Addr {
	if c.px != nil && c.px.via.IsValid() {
		return c.px.via.Addr()
	}
	return c.peer.Addr()
}

// via is the load balancer's address, when a PROXY header gave the client's (else invalid).
func (c *conn) via() netip.AddrPort {
	if c.px == nil {
		return netip.AddrPort{}
	}
	return c.px.via
}

// acceptProxy takes the client's address from the PROXY header d skipped (once). A LOCAL
// header (the balancer's own connection) leaves the balancer's address as the client's.
func (c *conn) acceptProxy(d *decision) {
	if d.skip == 0 || c.via().IsValid() {
		return
	}
	c.proxy().via = c.peer
	if d.source.IsValid() {
		c.peer = d.source
	}
}

// localAddr is the address the client connected to (the PROXY header's destination).
func (c *conn) localAddr() netip.AddrPort {
	if c.client != nil {
		if a, ok := c.client.LocalAddr().(*net.TCPAddr); ok {
			return a.AddrPort()
		}
	}
	sa, err := unix.Getsockname(int(c.fd))
	if err == nil {
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		case *unix.SockaddrInet6:
			return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
		}
	}
	ap, _ := netip.ParseAddrPort(c.pl.addr)
	return ap
}

// proxyHeader is the PROXY header for the picked backend (nil when it takes none), with
// alpn the ALPN TLV's value when the policy asks for it.
func (c *conn) proxyHeader(alpn func() string) ([]byte, error) {
	if c.px == nil || c.px.backend == nil {
		return nil, nil
	}
	h := c.px.backend
	var tlvs proxyproto.TLVs
	if h.Authority {
		tlvs.Authority = c.sni
	}
	if h.ALPN {
		tlvs.ALPN = alpn()
	}
	b, err := proxyproto.Header(h.Version, c.peer, c.localAddr(), tlvs)
	if err != nil {
		return nil, fmt.Errorf("PROXY header for %s: %w", c.backendName, err)
	}
	return b, nil
}

// offeredALPN is the first ALPN protocol the ClientHello at the start of hello offers ("" if
// none): the ALPN TLV where snigate passes TLS through, the backend not having chosen yet.
func offeredALPN(hello []byte) string {
	var h clienthello.Hello
	var p clienthello.Parser
	if p.Parse(hello, &h) != nil || len(h.ALPN) < 1 || int(h.ALPN[0]) >= len(h.ALPN) {
		return ""
	}
	return string(h.ALPN[1 : 1+int(h.ALPN[0])])
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

// endpoint is the backend address for logs ("" before one was dialed). Formatted only when
// a line is written, not on every connection.
func (c *conn) endpoint() string {
	if !c.endpointAddr.IsValid() {
		return ""
	}
	return c.endpointAddr.String()
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// pipeTLS copies between a terminated TLS client and a plain backend, through pooled
// buffers (splice cannot help: the bytes must pass through crypto/tls), until both
// directions have ended; it returns the connection's outcome.
func (c *conn) pipeTLS(client *tls.Conn, backend *fdconn.Conn) outcome {
	c.touch()
	var ended outcome
	done := make(chan struct{})
	go func() {
		res := c.copyBuf(backend, client)
		c.in += res.n
		c.endHalf(&ended, backend, res)
		close(done)
	}()
	res := c.copyBuf(client, backend)
	c.out += res.n
	c.endHalf(&ended, client, res)
	<-done
	return cmp.Or(ended, outcomeOK)
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyResult is how one copy of copyBuf ended: at the source's EOF (no error), at an idle
// timeout, or on an error of either side.
type copyResult struct {
	n    int64
	idle bool
	err  error
}

// copyBuf copies src to dst through a pooled buffer until src's EOF or an error. With an
// idle timeout, reads carry a deadline that moves with activity in either direction.
func (c *conn) copyBuf(dst io.Writer, src interface {
	io.Reader
	SetReadDeadline(time.Time) error
}) (res copyResult) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	idle := c.p.opts.IdleTimeout
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := src.Read(buf)
		if err != nil && n == 0 && idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			if time.Since(time.Unix(0, c.lastActive.Load())) < idle {
				continue // the other direction was active
			}
			res.idle = true
			return res
		}
		if n > 0 && idle > 0 {
			c.touch()
		}
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			res.n += int64(w)
			if werr != nil {
				res.err = werr
				return res
			}
		}
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			return res
		}
	}
}

// prefixConn replays bytes already read from a connection before reading it further: it
// lets crypto/tls see the ClientHello the proxy consumed for routing.
type prefixConn struct {
	*fdconn.Conn
	prefix []byte
}

func (pc *prefixConn) Read(b []byte) (int, error) {
	if len(pc.prefix) > 0 {
		n := copy(b, pc.prefix)
		pc.prefix = pc.prefix[n:]
		return n, nil
	}
	return pc.Conn.Read(b)
}
