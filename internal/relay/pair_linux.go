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

// Pair is one relayed connection. Its phase says where it is in its life; the pair is
// made in the first phase of its constructor and moves on only along these arrows:
//
//	Start:  phaseRelaying
//	Dial:   phaseDialing ─connected─▶ phaseDialed ─Attach─▶ phaseRelaying
//	Listen: phaseRouting ─Connect─▶ phaseDialing ─connected─▶ phaseRelaying
//	        phaseRouting ─Connect, the backend took the bytes at once─▶ phaseRelaying
//	        phaseDialing ─failed, the router names the next endpoint─▶ phaseDialing
//	        phaseDialing ─failed, next connect took the bytes at once─▶ phaseRelaying
//	any:    ─▶ phaseDone
//
// A pair ends (phaseDone) when both directions are shut, on a socket error, when side B
// is not TLS (Options.ExpectTLS), when Stop or Abandon was called, when a Dial fails or
// times out, when an adopted client's router gives up dialing, and when an adopted client
// is released (Router.Release: a Release verdict, EOF or a read error, a full buffer, the
// preface deadline).
//
// A pair a loop accepted belongs to that loop from the start. Until its first epoll
// registration a pair belongs to the goroutine in Start or Dial, which sets the phase; from
// then on only its loop changes the phase. Attach, the
// one step taken on another goroutine while the loop may be running the pair, does not
// touch the phase: it sets started, and the loop's next run of the pair moves it from
// phaseDialed to phaseRelaying.
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
	// started is set once the loop may run the pair (Start, Attach, an accepted client); it
	// publishes opts, done, fd[0] and the preface to the loop. It is not the phase: it is
	// the one hand-over from another goroutine to a loop already running the pair (Attach,
	// while the pair is in phaseDialed), and the sweeper reads it.
	started atomic.Bool
	// dialDeadline is when a Dial gives up, or when an adopted client's preface must be
	// routed (unix nanoseconds); 0 when nothing waits.
	dialDeadline atomic.Int64
	// dialTimedOut: the sweeper saw dialDeadline pass. A request like stopped, not a
	// phase: the loop acts on it in phaseRouting (ErrDeadline) or phaseDialing
	// (ErrDialTimeout), and a pair that moved on meanwhile ignores it.
	dialTimedOut atomic.Bool
	// keepAt is when the sweeper asks the loop to set keepalive on side B (unix
	// nanoseconds; 0: nothing to set), and keepIdle its idle time (see keepAliveLater).
	keepAt       atomic.Int64
	keepIdle     time.Duration
	dialed       chan error // Dial's outcome, sent once by the loop
	ep           netip.AddrPort
	ownsA, ownsB bool // the relay closes these sockets (Attach, Dial, accepted clients)

	// An accepted client's router and its Acceptor's tag for it; dialStart is when the
	// connect the router asked for began.
	rt        Router
	tag       any
	dialOpts  DialOptions
	dialStart time.Time

	mu sync.Mutex // guards closed, stopped and what Stop records
	// closed is phaseDone for other goroutines (Stop), which must not read phase.
	closed bool
	// stopped: Stop was called. A request, not a phase: it arrives in any phase and the
	// loop acts on it at the pair's next run.
	stopped bool
	stopOut string
	stopErr error

	// Owned by the loop goroutine (set before the first registration by Start and Dial).
	phase phase
	// The flags below are not phases: each can be set or not in more than one phase.
	//
	// regB: an adopted client's backend socket waits to be registered, whether its connect
	// is under way (phaseDialing) or done at once (phaseRelaying). regA: an adopted client's
	// socket is in the epoll set (adoptFD reads first, and may release it before).
	regB, regA bool
	// outArmed: the side is registered with EPOLLOUT (see armOut); in every phase.
	outArmed [2]bool
	// queued: the pair is on this turn's work list (loop.turn), whatever its phase.
	queued bool
	// checkTLS: side B's first byte is still to be checked (Options.ExpectTLS). Set with
	// the options (Start, Attach, a Connect verdict: in whatever phase the pair is then),
	// cleared by side B's first read.
	checkTLS bool
	readable [2]bool
	writable [2]bool
	sticky   [2]bool // error or hang-up seen: never assume the socket drained
	rdhup    [2]bool // the peer's FIN is in: read until EOF, or until a short read
	// broke is 1 + the side whose socket failed first (a read or write error: a reset, a
	// keepalive timeout), 0 while none has. finish closes the other side with a reset.
	broke uint8
	d     [2]direction
}

// failed records that side's socket failed, unless the other's failed first.
func (p *Pair) failed(side int) {
	if p.broke == 0 {
		p.broke = uint8(side) + 1
	}
}

// phase is where a pair is in its life (see Pair for the transitions). It is a plain
// field that only the pair's owner writes (see Pair), so reading it on every event costs
// no atomic.
type phase uint8

const (
	// phaseRouting: an adopted client whose router has not chosen a backend yet. The loop
	// reads its first bytes and asks Router.Route after each read (adopt).
	phaseRouting phase = iota
	// phaseDialing: a connect is under way (Dial, or an adopted client's Connect verdict).
	// The loop waits for side B to turn writable or fail, or for the sweeper's
	// dialTimedOut (dial).
	phaseDialing
	// phaseDialed: Dial's connect succeeded and Dial returned; the pair waits for Attach or
	// Abandon. Events are noted, but the pair runs only once started is set (or for a
	// Stop).
	phaseDialed
	// phaseRelaying: bytes move both ways (pump).
	phaseRelaying
	// phaseDone: the pair ended (finish) or its client was released (release). Its slot is
	// free; a run still on its way (a poke) returns at once.
	phaseDone
)

// newPair makes a pair for the fds on the next loop, starting in phase ph.
func (r *Relay) newPair(fa, fb int, ph phase) *Pair {
	return &Pair{r: r, l: r.loops[r.next.Add(1)%uint32(len(r.loops))], fd: [2]int{fa, fb}, phase: ph}
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

// register puts side's socket in the loop's set, from outside the loop (Start, Dial,
// Attach). A ring has one submitter, the loop: there the registration is posted to it, and
// a poll that fails ends the pair from the loop (loop.pollFailed).
func (p *Pair) register(side int) error {
	p.outArmed[side] = true
	return p.registerArmed(side)
}

// registerArmed is register for a pair whose outArmed was set before it was published
// (Resume: its loop may run it, and read outArmed, as soon as one side is registered).
func (p *Pair) registerArmed(side int) error {
	if l := p.l; l.ring != nil {
		fd := p.fd[side]
		if !l.post(func() {
			if p.phase != phaseDone && p.fd[side] == fd {
				p.registerFD(fd, side, true)
			}
		}) {
			return errClosed
		}
		return nil
	}
	return p.registerFD(p.fd[side], side, true)
}

// registerFD puts fd, the pair's socket on side, in the loop's epoll set, with EPOLLOUT
// when out is set (see armOut).
func (p *Pair) registerFD(fd, side int, out bool) error {
	ev := unix.EpollEvent{Events: sockEvents &^ unix.EPOLLOUT, Fd: p.slot<<1 | int32(side), Pad: int32(p.gen)}
	if out {
		ev.Events = sockEvents
	}
	if err := p.l.ctl(unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
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
	return p.l.ctl(unix.EPOLL_CTL_MOD, p.fd[side], &ev)
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
	if p.phase == phaseDone {
		return false
	}
	p.mu.Lock()
	stopped, out, serr := p.stopped, p.stopOut, p.stopErr
	p.mu.Unlock()
	if stopped && p.rt != nil {
		p.finish(serr, out, 0) // an adopted client, in any phase: the router hears of it
		return false
	}
	if p.phase == phaseRouting {
		more := p.adopt()
		if p.phase != phaseDone {
			p.registerDial()
		}
		if p.phase != phaseRelaying {
			return more
		}
		// Connected at once (see connect): bytes can move now.
	}
	if p.phase == phaseDialing && !p.dial(stopped) {
		return false
	}
	if stopped {
		p.finish(serr, out, 0)
		return false
	}
	if p.phase == phaseDialed {
		if !p.started.Load() {
			return false // dialed, not attached yet
		}
		p.phase = phaseRelaying // Attach published the client side
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
	p.phase = phaseDone
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
	// Closing takes a socket out of the epoll set too. The other side of a side that broke
	// is closed with a reset (SO_LINGER 0): a FIN would tell its peer the stream ended
	// cleanly, and a reply cut off by a backend's crash would look complete to a client
	// that reads until the end. (HAProxy passes a client's reset on to the backend too. A
	// close with a reset also leaves no TIME_WAIT socket behind.)
	for i, owned := range [2]bool{p.ownsA, p.ownsB} {
		if !owned {
			continue
		}
		if p.broke == uint8(1-i)+1 {
			rawLingerZero(p.fd[i])
		}
		p.closeSide(i)
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

// closeSide closes side's socket, on the loop. Closing takes a socket out of an epoll set
// by itself; a poll on a ring holds it open, so it is taken off the ring first.
func (p *Pair) closeSide(side int) {
	if l := p.l; l != nil && l.ring != nil {
		l.ring.remove(ringUD(p.slot<<1|int32(side), int32(p.gen)))
	}
	rawClose(p.fd[side])
}
