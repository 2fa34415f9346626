package proxy

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/handover"
	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// Relayed connections in a live upgrade: the old process takes each relaying pair off its
// loops (relay.Pair.Detach, a task posted to the pair's loop: the per-connection path does
// nothing for it) and sends it with its state; the new process serves it as its own
// (Resume). What is not relaying (terminated TLS, HTTPS, HTTP, a connection still being
// routed or dialed when the passes end) stays here, and Shutdown drains it.

// detachPasses bounds how often DetachPairs looks again for connections that were not
// relaying yet (being routed or dialed as accepting stopped), detachPause apart.
const (
	detachPasses = 10
	detachPause  = 50 * time.Millisecond
)

// DetachPairs hands every relayed connection to send, which gets its state and its two
// sockets (client, backend) and returns nil once they are the other process's: the
// connection then leaves this proxy's books without an access log line (the other process
// writes it when the connection ends). Call it after StopAccepting. A send that fails is
// not tried again: that connection, and every one detached after it, is resumed here.
// It returns how many were sent, and the first send's error.
func (p *Proxy) DetachPairs(send func(st *handover.Pair, client, backend int) error) (int, error) {
	rl, err := p.relay()
	if err != nil {
		return 0, err
	}
	type result struct {
		c   *conn
		det relay.Detached
		err error
	}
	sent := 0
	var sendErr error
	for pass := 0; pass < detachPasses; pass++ {
		if pass > 0 {
			time.Sleep(detachPause)
		}
		var cands []*conn
		p.connMu.Lock()
		for c := range p.connSet {
			cands = append(cands, c)
		}
		p.connMu.Unlock()
		results := make(chan result, len(cands))
		asked, notYet := 0, 0
		for _, c := range cands {
			c.backendMu.Lock()
			pr := c.pair
			if pr == nil || c.closing {
				// Not on the relay: being routed, dialed or bridged (PostgreSQL's exchange)
				// it may be soon; terminated TLS never is. (HTTP connections count too, and
				// cost the passes' wait: they are few where databases are upgraded.)
				if !c.relayEnded && !c.closing && c.tlsConn == nil {
					notYet++
				}
				c.backendMu.Unlock()
				continue
			}
			c.backendMu.Unlock()
			asked++
			pr.Detach(handover.MaxPending, func(det relay.Detached, err error) { results <- result{c, det, err} })
		}
		for range asked {
			r := <-results
			if r.err != nil {
				if errors.Is(r.err, relay.ErrNotDetached) {
					notYet++
				}
				continue
			}
			c := r.c
			c.backendMu.Lock()
			c.pair, c.relayEnded = nil, true
			c.backendMu.Unlock()
			st := c.handoverState(r.det)
			if sendErr == nil {
				if sendErr = send(st, r.det.FD[0], r.det.FD[1]); sendErr == nil {
					unix.Close(r.det.FD[0])
					unix.Close(r.det.FD[1])
					sent++
					c.unregister()
					continue
				}
			}
			c.resumeHere(rl, st, r.det)
		}
		if sendErr != nil || notYet == 0 {
			break
		}
	}
	return sent, sendErr
}

// handoverState is the state of c, whose pair det was detached, for the other process.
func (c *conn) handoverState(det relay.Detached) *handover.Pair {
	// The backend's PROXY header is not the client's bytes (as relayDone counts them).
	var prefix int64
	if c.px != nil {
		prefix = int64(c.px.prefixLen)
	}
	st := &handover.Pair{
		Address: c.pl.addr, Client: c.peer, Via: c.via(), Endpoint: c.endpointAddr,
		Start: c.start.UnixNano(), Listener: c.listener, Route: c.route, Backend: c.backendName,
		SNI: c.sni, Negotiation: string(c.negotiation),
		In: c.in + max(0, det.Bytes[0]-prefix), Out: c.out + det.Bytes[1],
		PGCancel:  c.pgBridge && c.peer.Addr().IsValid(),
		ExpectTLS: det.ExpectTLS,
	}
	for i := range st.Flow {
		st.Flow[i] = handover.Flow{Pending: det.Pending[i], EOF: det.EOF[i], Shut: det.Shut[i]}
	}
	return st
}

// resumeHere puts a detached pair back on this process's relay: the other process did not
// take it.
func (c *conn) resumeHere(rl *relay.Relay, st *handover.Pair, det relay.Detached) {
	c.in, c.out = st.In, st.Out
	if c.px != nil {
		c.px.prefixLen = 0 // counted out of In already
	}
	pr, err := rl.Resume(det, relay.Options{IdleTimeout: c.p.opts.IdleTimeout, ExpectTLS: det.ExpectTLS}, c.relayDone)
	if err != nil {
		unix.Close(det.FD[0])
		unix.Close(det.FD[1])
		c.p.log.Error("a connection taken off the relay could not be put back", "route", c.route, "error", err)
		c.closeAndRecord(outcomeShutdown)
		c.unregister()
		return
	}
	c.backendMu.Lock()
	c.relayEnded = false
	c.holdLocked(pr)
	c.backendMu.Unlock()
}

// Resume serves a connection the process this one replaced handed over, from where it was:
// client and backend are its sockets, which the proxy owns once Resume returns nil (on
// error they are still the caller's). It counts as this proxy's from now on, in its port's
// and route's gauges, and its access log line, written when it ends, has its whole life.
// It counts against the connection limits of the AccessPolicies on its path here
// (carryAccess), refusing nothing.
func (p *Proxy) Resume(st *handover.Pair, client, backend int) error {
	rl, err := p.relay()
	if err != nil {
		return err
	}
	for i := range st.Flow {
		if len(st.Flow[i].Pending) > handover.MaxPending {
			return fmt.Errorf("%d bytes in flight", len(st.Flow[i].Pending))
		}
	}
	// The backend socket may not have had its keepalive yet (the relay sets it a second
	// after the connect).
	if err := relay.SetBackendSockopts(backend, p.opts.KeepAlive); err != nil {
		return err
	}
	pl := p.portFor(st.Address)
	pl.active.Add(1)
	p.conns.Add(1)
	c := p.newConn(pl, st.Client)
	c.fd = int32(client)
	c.start = time.Unix(0, st.Start)
	c.listener, c.route, c.backendName, c.sni = st.Listener, st.Route, st.Backend, st.SNI
	c.negotiation, c.endpointAddr = negotiation(st.Negotiation), st.Endpoint
	c.in, c.out = st.In, st.Out
	if st.Via.IsValid() {
		c.proxy().via = st.Via
	}
	if c.route != "" {
		c.enterRoute()
		c.carryAccess(st)
	}
	if ip := c.peer.Addr(); st.PGCancel && ip.IsValid() {
		ep := c.endpointAddr
		pl.pg.add(ip, ep)
		c.pgBridge = true
		c.onEnd = append(c.onEnd, func() { pl.pg.remove(ip, ep) })
	}
	det := relay.Detached{FD: [2]int{client, backend}, ExpectTLS: st.ExpectTLS}
	for i, f := range st.Flow {
		det.Pending[i], det.EOF[i], det.Shut[i] = f.Pending, f.EOF, f.Shut
	}
	c.async = true // set first: the callback may run before Resume returns
	pr, err := rl.Resume(det, relay.Options{IdleTimeout: p.opts.IdleTimeout, ExpectTLS: st.ExpectTLS}, c.relayDone)
	if err != nil {
		c.async = false
		c.unregister()
		return err
	}
	c.holdPair(pr)
	return nil
}

// carryAccess counts a handed-over connection against the limits of the AccessPolicies on
// its path in this proxy's configuration, when its SNI (or its TCP port) still leads to its
// route: the connections the old process admitted count against what comes after them, so
// an upgrade does not reset a database's maxConnections. Nothing is refused or checked
// (a held connection is never cut, as on a reload); the counts are given back when the
// connection ends (unregister).
func (c *conn) carryAccess(st *handover.Pair) {
	s := c.p.snap.Load()
	if s == nil {
		return
	}
	port := s.Port(st.Address)
	if port == nil {
		return
	}
	var l *snapshot.Listener
	var r *snapshot.Route
	if port.Protocol == snapshot.ProtocolTCP {
		if l = port.TCP; l != nil {
			r = l.Route
		}
	} else {
		l, r = port.Lookup([]byte(st.SNI))
	}
	if l == nil || r == nil || r.Name != st.Route {
		return
	}
	var h access.Hold
	c.p.access.Carry(st.Client.Addr(), l.Access, r.Access, &h)
	if !h.Empty() {
		c.hold = holds.Get().(*access.Hold)
		*c.hold = h
	}
}

// portFor is the port a handed-over connection counts in: the one serving addr, or, when
// the new configuration has no such port, one of its own that only keeps the books.
func (p *Proxy) portFor(addr string) *portListener {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl := p.listeners[addr]; pl != nil {
		return pl
	}
	if pl := p.orphans[addr]; pl != nil {
		return pl
	}
	if p.orphans == nil {
		p.orphans = map[string]*portListener{}
	}
	pl := &portListener{p: p, addr: addr, fd: -1, activeGauge: p.m.Active.WithLabelValues(addr)}
	p.orphans[addr] = pl
	return pl
}
