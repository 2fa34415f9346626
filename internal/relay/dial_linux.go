package relay

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dial connects a new socket to ep from one of the loops and returns the pair that will relay
// it as side B: call Attach to start relaying, or Abandon to close it. Why not net.Dial: the
// socket is put in the loop's epoll set once, for the connect and the relay both, and never
// in Go's poller, which saves four system calls per connection (Go's registration and
// removal, getsockname, getpeername) and the net.Conn bookkeeping an idle connection keeps.
func (r *Relay) Dial(ep netip.AddrPort, o DialOptions) (*Pair, error) {
	fd, err := openConnect(ep)
	if err != nil {
		return nil, err
	}
	p := r.newPair(-1, fd, phaseDialing)
	p.ownsB = true
	p.ep = ep
	now := time.Now()
	p.keepAliveLater(o.KeepAlive, now)
	p.dialed = make(chan error, 1)
	p.dialDeadline.Store(now.Add(o.Timeout).UnixNano())
	p.publish()
	r.watch(o.Timeout)
	if err := p.register(1); err != nil {
		p.unpublish()
		rawClose(fd)
		return nil, err
	}
	// The loop reports the connect's outcome when the socket turns writable (or fails).
	if err := <-p.dialed; err != nil {
		return nil, err
	}
	return p, nil
}

// openConnect makes a non-blocking socket with the options a relayed backend socket needs
// before its connect (keepalive comes later: see keepAliveLater) and starts its connect to ep.
func openConnect(ep netip.AddrPort) (int, error) {
	fd, err := rawSocket(ep)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := SetBackendSockopts(fd, -1); err != nil {
		rawClose(fd)
		return -1, err
	}
	switch err := rawConnect(fd, ep); err {
	case nil, unix.EINPROGRESS:
		return fd, nil
	default:
		rawClose(fd)
		return -1, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ep), Err: os.NewSyscallError("connect", err)}
	}
}

// SetBackendSockopts sets what a backend socket needs before its connect, whether the relay
// or the proxy itself dials it: no Nagle delay (a proxy forwards what it reads as it reads
// it) and, unless keepAlive is negative, keepalive with that idle time (the probe interval
// and count stay at the kernel's defaults).
func SetBackendSockopts(fd int, keepAlive time.Duration) error {
	if err := rawSetsockopt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	if keepAlive < 0 {
		return nil
	}
	return setKeepAlive(fd, keepAlive)
}

func setKeepAlive(fd int, keepAlive time.Duration) error {
	if err := rawSetsockopt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	if err := rawSetsockopt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, max(int(keepAlive/time.Second), 1)); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	return nil
}

// Attach starts relaying between a (side A) and the backend this pair dialed, writing
// preface (bytes already read from a) to the backend first. Like Start, it takes a over
// (a is closed; the relay keeps a duplicate of its fd), and the relay closes both sockets
// when both directions have ended, then calls done. On an error nothing started, the dialed
// backend is closed, and a is still the caller's.
func (p *Pair) Attach(a Conn, preface []byte, o Options, done func(Result)) error {
	fa, err := dupOf(a)
	if err != nil {
		p.Abandon()
		return err
	}
	a.Close() // the duplicate keeps the socket open, outside Go's poller
	p.fd[0] = fa
	p.ownsA = true
	p.setup(o, done, preface)
	p.started.Store(true) // publishes the fields above to the loop
	if err := p.register(0); err != nil {
		p.stopWith(err, "")
	}
	return nil
}

// Abandon closes a dialed backend that will not be attached.
func (p *Pair) Abandon() { p.stopWith(nil, OutcomeShutdown) }

// dial moves a connect on: it reports the outcome once the socket is writable or failed,
// or the timeout once the sweeper flagged it. It returns true when an adopted client's
// backend has just connected: its bytes can move at once.
func (p *Pair) dial(stopped bool) bool {
	var err error
	switch {
	case stopped:
		err = errAbandoned
	case p.dialTimedOut.Load():
		err = ErrDialTimeout
	case p.writable[1] || p.sticky[1]:
		soerr, gerr := rawGetsockopt(p.fd[1], unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case gerr != nil:
			err = os.NewSyscallError("getsockopt", gerr)
		case soerr != 0:
			err = os.NewSyscallError("connect", syscall.Errno(soerr))
		default:
			p.dialDeadline.Store(0)
			if p.rt != nil {
				p.phase = phaseRelaying
				p.rt.Dialed(p.tag, p.ep, time.Since(p.dialStart), nil)
				return true
			}
			// Before Dial returns: Attach may follow at once. Dial's goroutine is woken through
			// the relay's hand-offs (see handoffs).
			p.phase = phaseDialed
			p.r.hand.add(func() { p.dialed <- nil })
			return false
		}
	default:
		return false // not connected yet
	}
	// The phase stays phaseDialing until redial (another connect, or the end) or finish
	// moves it on.
	oerr := &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(p.ep), Err: err}
	if p.rt != nil {
		p.closeSide(1)
		p.fd[1], p.ownsB = -1, false
		p.redial(oerr)
		return false
	}
	p.finish(nil, "", 0) // closes the socket; no done callback before Attach
	p.r.hand.add(func() { p.dialed <- oerr })
	return false
}

var errAbandoned = errors.New("dial abandoned")

// keepAliveAfter is how long a relayed backend socket lives before it gets its keepalive.
//
// Keepalive is there to find a backend that vanished from a connection left idle: its first
// probe goes out after the idle time (30 s by default, never under 1 s), so a connection
// that ends within a second or two never sends one, yet setting it cost every connection
// two system calls, about 3 µs of a short connection's 100 on the benchmark machine. The
// sweeper asks the pair's loop to set it once the pair has lived keepAliveAfter (see
// sweep), so the idle time counts from at most keepAliveAfter plus one sweep (1 s) after the
// connect.
const keepAliveAfter = time.Second

// keepAliveLater records that the backend socket, connected at now, gets keepalive with
// idle time d once it has lived keepAliveAfter (none if d is negative). Called by whoever
// owns the pair before the connect's socket is registered (Dial before publishing it, the
// loop for an adopted client's connects), with the time it read for the connect already.
func (p *Pair) keepAliveLater(d time.Duration, now time.Time) {
	if d < 0 {
		p.keepAt.Store(0)
		return
	}
	p.keepIdle = d
	p.keepAt.Store(now.Add(keepAliveAfter).UnixNano())
}

// keepAliveNow sets keepalive on the backend socket, on the loop (which owns fd[1]: a pair
// that ended or is between two connects has none to set).
func (p *Pair) keepAliveNow() {
	if p.phase == phaseDone || p.fd[1] < 0 {
		return
	}
	// A failure (the socket reset meanwhile) shows on the socket's next read or write.
	setKeepAlive(p.fd[1], p.keepIdle)
}
