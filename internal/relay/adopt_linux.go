package relay

import (
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// adoptFD adopts a client socket the loop accepted (Listen): the loop reads what the client
// sends and asks rt where it goes, dials that backend and relays, with no goroutine or Go's
// poller at any point. The pair belongs to the loop from the start. The client most likely
// sent its first bytes as it connected (a ClientHello follows the handshake at once): they
// are read before the socket is registered, which saves the wake-up that would only
// report them; when nothing is there yet the registration reports what comes. Until
// deadline the client's first bytes must be routed, or rt.Release gets the socket back
// with ErrDeadline.
//
// The relay writes what it reads as it reads it, so the socket should have TCP_NODELAY set:
// set it once on the listening socket, which Linux copies into every socket accepted from
// it, and save a system call per connection.
func (l *loop) adoptFD(fd int, deadline time.Time, rt Router, tag any) {
	p := &Pair{r: l.r, l: l, fd: [2]int{fd, -1}, phase: phaseRouting}
	p.ownsA, p.rt, p.tag = true, rt, tag
	// A is assumed writable until a write says otherwise: registered without EPOLLOUT, its
	// registration reports nothing (a fresh socket is writable) and wakes no loop.
	p.writable[0] = true
	p.publish()
	p.started.Store(true)
	if v := rt.Route(p, tag, nil); v.Action != Wait {
		p.decide(v)
	} else {
		p.dialDeadline.Store(deadline.UnixNano())
		l.r.watch(time.Until(deadline))
		p.readable[0] = true
	}
	more := p.run()
	p.registerDial() // a backend dialed at once: a TCP route, or a preface read above
	if p.phase == phaseDone {
		return // released, finished, or every dial failed: the router heard of it
	}
	if err := p.registerFD(p.fd[0], 0, p.outArmed[0]); err != nil {
		p.finish(os.NewSyscallError("epoll_ctl", err), "", 0)
		return
	}
	p.regA = true
	if more {
		l.ready = append(l.ready, p)
	}
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
		n, err := recvRetry(p.fd[0], (*d.buf)[d.end:])
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
	case Close:
		p.finish(nil, OutcomeClosed, 0)
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
		fd, err := openConnect(ep)
		if err == nil {
			p.fd[1], p.ownsB, p.ep, p.regB = fd, true, ep, true
			p.keepAliveLater(p.dialOpts.KeepAlive, p.dialStart)
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

// release hands an adopted client back to its router, from a goroutine (see handoffs):
// the router goes on with it on goroutines.
func (p *Pair) release(err error) {
	p.phase = phaseDone
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.regA {
		// The fd stays open for the caller, so closing cannot take it out of the epoll set.
		p.l.ctl(unix.EPOLL_CTL_DEL, p.fd[0], &unix.EpollEvent{Fd: p.slot << 1, Pad: int32(p.gen)})
	}
	p.unpublish()
	d := &p.d[0]
	buf, end := d.buf, d.end
	d.buf = nil
	rt, tag, fd := p.rt, p.tag, p.fd[0]
	p.r.hand.add(func() {
		var pre []byte
		if buf != nil {
			pre = (*buf)[:end]
		}
		rt.Release(tag, fd, pre, err)
		if buf != nil {
			bufs.Put(buf)
		}
	})
}
