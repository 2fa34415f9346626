package relay

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Pair is one relayed connection.
type Pair struct {
	r    *Relay
	l    *loop
	slot int32
	gen  uint32
	fd   [2]int // A, B
	opts Options
	done func(Result)

	lastActive atomic.Int64 // unix nanoseconds of the last byte moved (with IdleTimeout)
	// idle is opts.IdleTimeout for the sweeper, which must not read opts: an adopted pair
	// gets its options on the loop, after it is published.
	idle atomic.Int64
	// started is set once the loop may run the pair (Start, Attach, Adopt); it publishes
	// opts, done, fd[0] and the preface to the loop.
	started atomic.Bool
	// dialDeadline is when a Dial gives up, or when an adopted client's preface must be
	// routed (unix nanoseconds); 0 when nothing waits.
	dialDeadline atomic.Int64
	dialTimedOut atomic.Bool
	dialed       chan error // Dial's outcome, sent once by the loop
	ep           netip.AddrPort
	ownsA, ownsB bool // the relay closes these sockets (Attach, Dial, Adopt)

	// An adopted client's router and the caller's tag for it (Adopt); dialStart is when
	// the connect the router asked for began.
	rt        Router
	tag       any
	dialOpts  DialOptions
	dialStart time.Time

	mu      sync.Mutex // guards closed, stopped and what Stop records
	closed  bool       // the loop has ended the pair
	stopped bool
	stopOut string
	stopErr error

	// Owned by the loop goroutine (dialing and adopting are set before the socket is
	// registered).
	dialing  bool
	adopting bool // an adopted client whose router has not chosen a backend yet
	regB     bool // an adopted client's backend socket waits to be registered
	// outArmed: the side is registered with EPOLLOUT (see armOut).
	outArmed [2]bool
	queued   bool
	finished bool
	checkTLS bool
	readable [2]bool
	writable [2]bool
	sticky   [2]bool // error or hang-up seen: never assume the socket drained
	rdhup    [2]bool // the peer's FIN is in: read until EOF
	d        [2]direction
}

// newPair makes a pair for the fds on the next loop.
func (r *Relay) newPair(fa, fb int) *Pair {
	return &Pair{r: r, l: r.loops[r.next.Add(1)%uint32(len(r.loops))], fd: [2]int{fa, fb}}
}

// publish gives the pair a slot, where the loop finds it by its events. Fields set before
// are visible to the loop (through l.mu); later ones must be published by started.
func (p *Pair) publish() {
	l := p.l
	l.mu.Lock()
	l.gen++
	p.gen = l.gen
	if n := len(l.free); n > 0 {
		p.slot = l.free[n-1]
		l.free = l.free[:n-1]
		l.pairs[p.slot] = p
	} else {
		p.slot = int32(len(l.pairs))
		l.pairs = append(l.pairs, p)
	}
	l.mu.Unlock()
	l.count.Add(1)
}

func (p *Pair) setup(o Options, done func(Result), preface []byte) {
	p.done = done
	p.setOptions(o)
	if len(preface) > 0 {
		// Bytes already read from A go to B first, written by the loop like any others.
		var bp *[]byte
		if len(preface) <= bufSize {
			bp = bufs.Get().(*[]byte)
		} else {
			b := make([]byte, len(preface))
			bp = &b
		}
		p.d[0].buf, p.d[0].off, p.d[0].end = bp, 0, copy(*bp, preface)
	}
}

// setOptions applies o to a pair about to move bytes.
func (p *Pair) setOptions(o Options) {
	p.opts, p.checkTLS = o, o.ExpectTLS
	if o.IdleTimeout > 0 {
		p.lastActive.Store(time.Now().UnixNano())
		p.idle.Store(int64(o.IdleTimeout))
		p.r.watch(o.IdleTimeout)
	}
}

func (p *Pair) register(side int) error {
	p.outArmed[side] = true
	return p.registerFD(p.fd[side], side, true)
}

// registerFD puts fd, the pair's socket on side, in the loop's epoll set, with EPOLLOUT
// when out is set (see armOut).
func (p *Pair) registerFD(fd, side int, out bool) error {
	ev := unix.EpollEvent{Events: sockEvents &^ unix.EPOLLOUT, Fd: p.slot<<1 | int32(side), Pad: int32(p.gen)}
	if out {
		ev.Events = sockEvents
	}
	if err := rawEpollCtl(p.l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// armOut asks for EPOLLOUT edges on side from now on, once a write to it could not take
// everything. Adopted sockets start without: a socket is writable when it is new, and
// registering it with EPOLLOUT would report just that, a wake-up for nothing. The
// modification reports the socket at once if it drained meanwhile, so no edge is lost.
func (p *Pair) armOut(side int) error {
	if p.outArmed[side] {
		return nil
	}
	p.outArmed[side] = true
	ev := unix.EpollEvent{Events: sockEvents, Fd: p.slot<<1 | int32(side), Pad: int32(p.gen)}
	return rawEpollCtl(p.l.epfd, unix.EPOLL_CTL_MOD, p.fd[side], &ev)
}

// unpublish frees the pair's slot: for a pair the loop cannot have seen, or from the loop.
func (p *Pair) unpublish() {
	l := p.l
	l.mu.Lock()
	l.pairs[p.slot] = nil
	l.free = append(l.free, p.slot)
	l.mu.Unlock()
	l.count.Add(-1)
}

// Stop ends the pair soon with the given outcome (the first Stop wins). It does nothing
// once the pair has ended.
func (p *Pair) Stop(outcome string) { p.stopWith(nil, outcome) }

func (p *Pair) stopWith(err error, outcome string) {
	p.mu.Lock()
	if p.closed || p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped, p.stopErr, p.stopOut = true, err, outcome
	p.mu.Unlock()
	p.poke()
}

// poke makes the loop run the pair soon.
func (p *Pair) poke() {
	l := p.l
	l.mu.Lock()
	l.inbox = append(l.inbox, p)
	l.mu.Unlock()
	l.kick()
}

// note records what an event says about one side.
func (p *Pair) note(side int, ev uint32) {
	if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		p.sticky[side] = true
	}
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP) != 0 {
		p.rdhup[side] = true
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		p.readable[side] = true
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		p.writable[side] = true
	}
}

// run moves what can be moved now. It returns true when a direction used its whole
// budget and may have more.
func (p *Pair) run() (more bool) {
	if p.finished {
		return false
	}
	p.mu.Lock()
	stopped, out, serr := p.stopped, p.stopOut, p.stopErr
	p.mu.Unlock()
	if stopped && p.rt != nil {
		p.finish(serr, out, 0) // an adopted client, in any phase: the router hears of it
		return false
	}
	if p.adopting {
		more := p.adopt()
		if !p.finished {
			p.registerDial()
		}
		if p.finished || p.adopting || p.dialing {
			return more
		}
		// Connected at once (see connect): bytes can move now.
	}
	if p.dialing && !p.dial(stopped) {
		return false
	}
	if stopped {
		p.finish(serr, out, 0)
		return false
	}
	if !p.started.Load() {
		return false // dialed, not attached yet
	}
	moved := 0
	for i := range 2 {
		m, left, err := p.pump(i)
		if err != nil {
			var nt notTLSError
			if errors.As(err, &nt) {
				p.finish(nil, OutcomeNotTLS, byte(nt))
			} else {
				p.finish(err, "", 0)
			}
			return false
		}
		moved += m
		more = more || left
	}
	if moved > 0 && p.opts.IdleTimeout > 0 {
		p.lastActive.Store(time.Now().UnixNano())
	}
	if p.d[0].shut && p.d[1].shut {
		p.finish(nil, "", 0)
		return false
	}
	return more
}

// finish ends the pair and calls done. The sockets stay open (done closes them, which also
// takes them out of the epoll set); their later events find the slot freed or reused with
// another generation.
func (p *Pair) finish(err error, outcome string, first byte) {
	p.finished = true
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for i := range p.d {
		d := &p.d[i]
		if d.buf != nil {
			bufs.Put(d.buf)
			d.buf = nil
		}
		d.releasePipe()
	}
	p.unpublish()
	// Closing takes a socket out of the epoll set too.
	if p.ownsA {
		rawClose(p.fd[0])
	}
	if p.ownsB {
		rawClose(p.fd[1])
	}
	if errors.Is(err, unix.EAGAIN) {
		err = nil
	}
	res := Result{Bytes: [2]int64{p.d[0].n, p.d[1].n}, Err: err, Outcome: outcome, FirstByte: first}
	switch {
	case p.rt != nil:
		p.rt.Done(p.tag, res)
	case p.done != nil:
		p.done(res)
	}
	// (Neither: a Dial that failed or was abandoned.)
}
