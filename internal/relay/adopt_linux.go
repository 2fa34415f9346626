package relay

import (
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Adopt takes over fd, a freshly accepted non-blocking client socket: a loop reads what the
// client sends and asks rt where it goes, dials that backend and relays, all without a
// goroutine or Go's poller. Why: a connection that only has to be routed by its first bytes
// (an SNI) and then relayed costs the proxy about a tenth less CPU than a goroutine reading
// it through a net.Conn and handing it over (Go's poller registration and removal, the fd
// duplicate, and three scheduler hand-offs per connection).
//
// Until deadline the client's first bytes must be routed, or rt.Release gets the socket
// back with ErrDeadline. Adopt returns the pair (Stop ends it, in any phase), or nil when
// the client was released or its pair ended (every dial failed at once) inside Adopt.
//
// The relay writes what it reads as it reads it, so fd should have TCP_NODELAY set. Adopt
// does not set it: set it once on the listening socket, which Linux copies into every
// socket accepted from it, and save a system call per connection.
func (r *Relay) Adopt(fd int, deadline time.Time, rt Router, tag any) *Pair {
	p := r.newPair(fd, -1, phaseRouting)
	p.ownsA, p.rt, p.tag = true, rt, tag
	// A is assumed writable until a write says otherwise: registered without EPOLLOUT, its
	// registration reports nothing (a fresh socket is writable) and wakes no loop.
	p.writable[0] = true
	// Everything is set up before the sockets are registered: from then on the loop owns
	// the pair.
	p.publish()
	if v := rt.Route(p, tag, nil); v.Action != Wait {
		p.decide(v)
	} else {
		// The loop reads the ClientHello: registering reports it if it is in already. (Reading
		// it here would save that wake-up, but it makes the accepting goroutine route, dial
		// and write for every connection, and it measured no better in five A/B pairs.)
		p.dialDeadline.Store(deadline.UnixNano())
		r.watch(time.Until(deadline))
	}
	if p.phase == phaseDone {
		return nil // released, or every dial failed: the router heard of it
	}
	// From the first registration on the loop owns the pair: what the rest of Adopt needs
	// is read now. The loop reads the fields set above once an event names the pair, which
	// it looks up under l.mu: taking it here orders them before (for the race detector; the
	// epoll_ctl below orders them in fact).
	fa, fb, regB, outB := p.fd[0], p.fd[1], p.regB, p.outArmed[1]
	p.regB = false
	p.started.Store(true)
	p.l.mu.Lock()
	p.l.mu.Unlock() //nolint:staticcheck // an empty critical section on purpose
	if regB {
		if err := p.registerFD(fb, 1, outB); err != nil {
			// Nothing is registered: the loop has not seen the pair.
			p.stopWith(err, "")
			return p
		}
	}
	if err := p.registerFD(fa, 0, false); err != nil {
		p.stopWith(err, "")
	}
	return p
}

// adopt reads an adopted client's first bytes and acts on its router's verdict. It returns
// true when the pair must run again without a new event.
func (p *Pair) adopt() bool {
	if p.dialTimedOut.Load() {
		p.release(ErrDeadline)
		return false
	}
	if !p.readable[0] {
		return false
	}
	d := &p.d[0]
	if d.buf == nil {
		d.buf, d.off, d.end = bufs.Get().(*[]byte), 0, 0
	}
	before := d.end
	for p.readable[0] && d.end < len(*d.buf) {
		space := len(*d.buf) - d.end
		n, err := readRetry(p.fd[0], (*d.buf)[d.end:])
		switch {
		case err == unix.EAGAIN:
			p.readable[0] = false
			continue
		case err != nil:
			p.release(os.NewSyscallError("read", err))
			return false
		case n == 0:
			p.release(io.EOF)
			return false
		}
		d.end += n
		if n < space && !p.sticky[0] && !p.rdhup[0] {
			p.readable[0] = false // a short read took all there was (see pump)
		}
	}
	if d.end == before {
		if d.end == 0 {
			bufs.Put(d.buf) // nothing yet: a waiting client holds no buffer
			d.buf = nil
		}
		return false
	}
	p.decide(p.rt.Route(p, p.tag, (*d.buf)[:d.end]))
	return p.phase == phaseRouting && p.readable[0] // after a FIN: read on, to the EOF
}

// decide acts on a verdict for an adopted client.
func (p *Pair) decide(v Verdict) {
	d := &p.d[0]
	switch v.Action {
	case Wait:
		if d.buf != nil && d.end == len(*d.buf) {
			p.release(ErrPrefaceFull)
		}
		return
	case Release:
		p.release(nil)
		return
	}
	if v.Skip > 0 || len(v.Prefix) > 0 {
		if !d.reframe(v.Skip, v.Prefix) {
			p.release(ErrPrefaceFull)
			return
		}
	}
	p.phase = phaseDialing // connect moves it on: relaying, or done when every dial failed
	p.dialDeadline.Store(0)
	p.dialTimedOut.Store(false)
	p.setOptions(v.Options)
	p.dialOpts = v.Dial
	p.connect(v.To)
}

// reframe drops the first skip bytes of what is to be written and puts prefix in front of
// the rest, in the buffer (taking one when there is none: a TCP route decided before the
// client sent anything). It reports false when they do not fit.
func (d *direction) reframe(skip int, prefix []byte) bool {
	if d.buf == nil {
		d.buf, d.off, d.end = bufs.Get().(*[]byte), 0, 0
	}
	buf := *d.buf
	start := d.off + skip
	if start > d.end {
		return false
	}
	if start >= len(prefix) {
		d.off = start - len(prefix)
		copy(buf[d.off:], prefix)
		return true
	}
	rest := d.end - start
	if len(prefix)+rest > len(buf) {
		return false
	}
	copy(buf[len(prefix):], buf[start:d.end])
	copy(buf, prefix)
	d.off, d.end = 0, len(prefix)+rest
	return true
}

// registerDial puts the socket connect opened in the epoll set, from the loop.
func (p *Pair) registerDial() {
	if !p.regB {
		return
	}
	p.regB = false
	if err := p.registerFD(p.fd[1], 1, p.outArmed[1]); err != nil {
		p.finish(err, OutcomeDialFailed, 0)
	}
}

// connect dials ep for an adopted client, and the next endpoints the router gives after
// immediate failures; when the router gives up, the pair ends. The socket is left for the
// caller to register (regB).
//
// On loopback and fast networks the handshake is often complete when connect returns, so
// the bytes read from the client are written at once: if that works the backend is
// connected, and its registration needs no EPOLLOUT, which saves the loop the wake-up that
// would only report the connect. A write on a socket still connecting fails with EAGAIN
// (then the loop waits for writability as usual), and on one whose connect failed with the
// connect's error.
func (p *Pair) connect(ep netip.AddrPort) {
	d := &p.d[0]
	for {
		p.dialStart = time.Now()
		fd, err := openConnect(ep, p.dialOpts.KeepAlive)
		if err == nil {
			p.fd[1], p.ownsB, p.ep, p.regB = fd, true, ep, true
			// Events noted for a socket an earlier attempt closed say nothing of this one.
			p.readable[1], p.writable[1], p.sticky[1], p.rdhup[1] = false, false, false, false
			if !d.pending() {
				break // nothing to write (a TCP route): wait for writability
			}
			_, werr := d.flush(fd)
			if werr == nil {
				p.phase = phaseRelaying
				p.dialDeadline.Store(0)
				p.rt.Dialed(p.tag, ep, time.Since(p.dialStart), nil)
				// A short write: the rest waits for an edge, so EPOLLOUT is needed.
				p.writable[1] = !d.pending()
				p.outArmed[1] = d.pending()
				if !d.pending() {
					bufs.Put(d.buf) // pump takes a fresh one for the next read
					d.buf = nil
				}
				return
			}
			if werr == unix.EAGAIN {
				break
			}
			rawClose(fd)
			p.fd[1], p.ownsB, p.regB = -1, false, false
			err = &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ep), Err: os.NewSyscallError("connect", werr)}
		}
		next := p.rt.Dialed(p.tag, ep, time.Since(p.dialStart), err)
		if !next.IsValid() {
			p.finish(err, OutcomeDialFailed, 0)
			return
		}
		ep = next
	}
	p.phase, p.outArmed[1] = phaseDialing, true
	p.dialTimedOut.Store(false)
	p.dialDeadline.Store(p.dialStart.Add(p.dialOpts.Timeout).UnixNano())
	p.r.watch(p.dialOpts.Timeout)
}

// redial goes on after an adopted client's connect failed: the router's next endpoint, or
// the end.
func (p *Pair) redial(err error) {
	next := p.rt.Dialed(p.tag, p.ep, time.Since(p.dialStart), err)
	if !next.IsValid() {
		p.finish(err, OutcomeDialFailed, 0)
		return
	}
	p.connect(next)
	if p.phase != phaseDone {
		p.registerDial()
	}
}

// release hands an adopted client back to its router.
func (p *Pair) release(err error) {
	p.phase = phaseDone
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	// The fd stays open for the caller, so closing cannot take it out of the epoll set.
	rawEpollCtl(p.l.epfd, unix.EPOLL_CTL_DEL, p.fd[0], &unix.EpollEvent{})
	p.unpublish()
	d := &p.d[0]
	var pre []byte
	if d.buf != nil {
		pre = (*d.buf)[:d.end]
	}
	p.rt.Release(p.tag, p.fd[0], pre, err)
	if d.buf != nil {
		bufs.Put(d.buf)
		d.buf = nil
	}
}
