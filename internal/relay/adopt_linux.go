package relay

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Adopt errors, passed to Router.Release.
var (
	// ErrDeadline: the client's first bytes were not routed by the deadline Adopt was given.
	ErrDeadline = errors.New("preface deadline passed")
	// ErrPrefaceFull: the router still waited for more once a 16 KiB buffer was full.
	ErrPrefaceFull = errors.New("preface larger than the relay's buffer")
)

// OutcomeDialFailed ends an adopted pair whose router gave up dialing (Result.Err says why).
const OutcomeDialFailed = "dial_failed"

// Router decides where the clients given to Adopt go, from the first bytes they send. Its
// methods run on a loop goroutine (Route also inside Adopt) and must not block: the loop's
// other pairs wait meanwhile. tag is what Adopt was given.
//
// For every adopted client exactly one of Release and Done is called in the end, unless the
// Relay is closed first.
type Router interface {
	// Route says what to do with a client given everything it sent so far: first with
	// nothing (inside Adopt), then each time more arrived. pre is valid during the call only.
	Route(p *Pair, tag any, pre []byte) Verdict
	// Dialed reports a connect that a Connect verdict started, and how long it took. After a
	// failure, a valid address returned is dialed next (the same options); otherwise the
	// pair ends with OutcomeDialFailed.
	Dialed(tag any, ep netip.AddrPort, took time.Duration, err error) (next netip.AddrPort)
	// Release hands the client's socket back to the caller, out of the loop's epoll set,
	// with the bytes read from it (valid during the call only): because Route said so (err
	// nil), because the client closed or failed (io.EOF, a read error), sent more than the
	// buffer holds while Route kept waiting (ErrPrefaceFull), or was not routed by the
	// deadline (ErrDeadline).
	Release(tag any, fd int, pre []byte, err error)
	// Done is called when the pair ended after a Connect verdict, or was stopped before any
	// (Result.Outcome is then what Stop was given). Both sockets are closed.
	Done(tag any, res Result)
}

// Action is what a Verdict asks for.
type Action uint8

const (
	// Wait for more bytes from the client.
	Wait Action = iota
	// Release the client back to the caller (Router.Release).
	Release
	// Connect to Verdict.To and relay: the bytes read so far go to the backend first.
	Connect
)

// Verdict is Router.Route's answer.
type Verdict struct {
	Action Action
	// With Connect: where, how, and the options of the relay that follows.
	To      netip.AddrPort
	Dial    DialOptions
	Options Options
}

// Adopt takes over fd, a freshly accepted non-blocking client socket: a loop reads what the
// client sends and asks rt where it goes, dials that backend and relays, all without a
// goroutine or Go's poller. Why: a connection that only has to be routed by its first bytes
// (an SNI) and then relayed costs the proxy about a fifth less CPU than a goroutine reading
// it through a net.Conn and handing it over (Go's poller registration and removal, the fd
// duplicate, and three scheduler hand-offs per connection).
//
// Until deadline the client's first bytes must be routed, or rt.Release gets the socket
// back with ErrDeadline. Adopt returns the pair (Stop ends it, in any phase), or nil when
// the client was released or its pair ended (every dial failed at once) inside Adopt.
func (r *Relay) Adopt(fd int, deadline time.Time, rt Router, tag any) *Pair {
	// Bytes go out as they are read, so no Nagle delay (accepted sockets do not inherit it).
	rawSetsockopt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	p := r.newPair(fd, -1)
	p.ownsA, p.rt, p.tag, p.adopting = true, rt, tag, true
	// Everything is set up before the sockets are registered: from then on the loop owns
	// the pair.
	p.publish()
	v := rt.Route(p, tag, nil)
	switch v.Action {
	case Release:
		p.unpublish()
		rt.Release(tag, fd, nil, nil)
		return nil
	case Connect:
		p.adopting = false
		p.setOptions(v.Options)
		p.dialOpts = v.Dial
		if !p.connect(v.To) {
			return nil // every dial failed at once: finish called Done
		}
	default:
		p.dialDeadline.Store(deadline.UnixNano())
		r.watch(time.Until(deadline))
	}
	// From the first registration on the loop owns the pair: what the rest of Adopt needs
	// is read now. The loop reads the fields set above once an event names the pair, which
	// it looks up under l.mu: taking it here orders them before (for the race detector; the
	// epoll_ctl below orders them in fact).
	fa, fb, dialing := p.fd[0], p.fd[1], p.dialing
	p.started.Store(true)
	p.l.mu.Lock()
	p.l.mu.Unlock() //nolint:staticcheck // an empty critical section on purpose
	if dialing {
		if err := p.registerFD(fb, 1); err != nil {
			// Nothing is registered: the loop has not seen the pair.
			p.stopWith(err, "")
			return p
		}
	}
	if err := p.registerFD(fa, 0); err != nil {
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
	v := p.rt.Route(p, p.tag, (*d.buf)[:d.end])
	switch v.Action {
	case Wait:
		if d.end == len(*d.buf) {
			p.release(ErrPrefaceFull)
			return false
		}
		return p.readable[0] // after a FIN: read on, to the EOF
	case Release:
		p.release(nil)
		return false
	}
	p.adopting = false
	p.dialDeadline.Store(0)
	p.dialTimedOut.Store(false)
	p.setOptions(v.Options)
	p.dialOpts = v.Dial
	if p.connect(v.To) {
		p.registerDial()
	}
	return false
}

// registerDial puts the socket connect just opened in the epoll set, from the loop.
func (p *Pair) registerDial() {
	if err := p.register(1); err != nil {
		p.finish(err, OutcomeDialFailed, 0)
	}
}

// connect starts dialing ep for an adopted client, and the next endpoints the router gives
// after immediate failures. It returns false when the router gave up (the pair has ended).
// The socket is registered by the caller.
func (p *Pair) connect(ep netip.AddrPort) bool {
	for {
		p.dialStart = time.Now()
		fd, err := openConnect(ep, p.dialOpts.KeepAlive)
		if err == nil {
			p.fd[1], p.ownsB, p.dialing, p.ep = fd, true, true, ep
			// Events noted for a socket an earlier attempt closed say nothing of this one.
			p.readable[1], p.writable[1], p.sticky[1], p.rdhup[1] = false, false, false, false
			p.dialTimedOut.Store(false)
			p.dialDeadline.Store(p.dialStart.Add(p.dialOpts.Timeout).UnixNano())
			p.r.watch(p.dialOpts.Timeout)
			return true
		}
		next := p.rt.Dialed(p.tag, ep, time.Since(p.dialStart), err)
		if !next.IsValid() {
			p.finish(err, OutcomeDialFailed, 0)
			return false
		}
		ep = next
	}
}

// redial goes on after an adopted client's connect failed: the router's next endpoint, or
// the end.
func (p *Pair) redial(err error) {
	next := p.rt.Dialed(p.tag, p.ep, time.Since(p.dialStart), err)
	if !next.IsValid() {
		p.finish(err, OutcomeDialFailed, 0)
		return
	}
	if p.connect(next) {
		p.registerDial()
	}
}

// release hands an adopted client back to its router.
func (p *Pair) release(err error) {
	p.finished = true
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
