package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	bufSize      = 16 << 10  // a read that fills this switches the direction to splice
	pipeSize     = 256 << 10 // F_SETPIPE_SZ; also the most one splice moves
	maxIdlePipes = 64        // pipes kept for reuse; more are closed after use
	spliceFlags  = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK

	// batch is how many events one epoll_wait returns at most.
	batch = 128
	// turnBudget is how many bytes one direction moves per turn before other pairs get
	// theirs: a bulk transfer must not hold a loop while small requests wait.
	turnBudget = 512 << 10

	// epoll registration of every socket: edge-triggered, so an idle pair or a pair waiting
	// for one side to drain costs no wakeup, and the interest set never changes (no
	// EPOLL_CTL_MOD per blocked write).
	sockEvents = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
	kickData   = -1 // epoll data of a loop's eventfd
)

// Outcomes a Result can carry besides the empty one (both sides ended by themselves).
const (
	// OutcomeIdle: nothing moved either way for Options.IdleTimeout.
	OutcomeIdle = "idle_timeout"
	// OutcomeNotTLS: with Options.ExpectTLS, side B's first byte did not start a TLS record.
	OutcomeNotTLS = "backend_not_tls"
	// OutcomeShutdown is what callers usually pass to Pair.Stop.
	OutcomeShutdown = "shutdown"
)

// Options tune one pair.
type Options struct {
	// IdleTimeout ends the pair once no byte moved in either direction for this long
	// (checked a few times per timeout). Zero: never.
	IdleTimeout time.Duration
	// ExpectTLS checks the first byte side B sends: it must start a TLS record (handshake
	// or alert), or the pair ends with OutcomeNotTLS before A sees any of it. A passthrough
	// proxy uses this to catch backends that speak first in plaintext (MySQL greetings).
	ExpectTLS bool
}

// Result is what a pair did, passed to its done callback.
type Result struct {
	// Bytes written: [0] from A to B, [1] from B to A.
	Bytes [2]int64
	// Err is the first socket error that ended the pair, nil when it ended cleanly or by
	// Outcome.
	Err error
	// Outcome is empty when both sides closed by themselves or on an error; see the
	// Outcome constants otherwise (or what Stop was given).
	Outcome string
	// FirstByte is side B's first byte when Outcome is OutcomeNotTLS.
	FirstByte byte
}

// Relay is a set of event loops. Its methods are safe for concurrent use.
type Relay struct {
	loops []*loop
	next  atomic.Uint32

	sweepMu   sync.Mutex
	sweepEach time.Duration // 0 until a pair with an idle or dial timeout starts
	// sweepSet mirrors sweepEach for the check every Dial makes, without the mutex.
	sweepSet  atomic.Int64
	sweepWake chan struct{}
	stop      chan struct{}
	closeOnce sync.Once
}

// New starts n event loops (at least one).
func New(n int) (*Relay, error) {
	r := &Relay{stop: make(chan struct{}), sweepWake: make(chan struct{}, 1)}
	for range max(n, 1) {
		l, err := newLoop()
		if err != nil {
			r.Close()
			return nil, err
		}
		r.loops = append(r.loops, l)
		go l.run()
	}
	return r, nil
}

// Close stops the loops. Pairs still running are abandoned without their done callbacks:
// call it after every pair has ended.
func (r *Relay) Close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		for _, l := range r.loops {
			l.close()
		}
	})
}

// Pairs returns how many pairs are running.
func (r *Relay) Pairs() int {
	n := 0
	for _, l := range r.loops {
		n += int(l.count.Load())
	}
	return n
}

// Start relays between a and b until both directions have ended, then calls done on a loop
// goroutine (done should not block: other pairs wait for it). Like Attach, it takes both
// connections over: their sockets leave Go's poller (a and b are closed; the relay keeps
// duplicates of their fds and closes them at the end).
//
// An error means nothing started, done will not be called, and a and b are still the
// caller's. Once Start returns a Pair, done is called exactly once, possibly before Start
// returns; Pair.Stop ends the pair early.
func (r *Relay) Start(a, b *net.TCPConn, o Options, done func(Result)) (*Pair, error) {
	fa, err := dupOf(a)
	if err != nil {
		return nil, err
	}
	fb, err := dupOf(b)
	if err != nil {
		rawClose(fa)
		return nil, err
	}
	p := r.newPair(fa, fb)
	p.ownsA, p.ownsB = true, true
	p.setup(o, done, nil)
	p.started.Store(true)
	p.publish()
	if err := p.register(1); err != nil {
		p.unpublish()
		rawClose(fa)
		rawClose(fb)
		return nil, err
	}
	a.Close()
	b.Close()
	if err := p.register(0); err != nil {
		// Side B is registered and may already be moving bytes: the loop ends the pair.
		p.stopWith(err, "")
	}
	return p, nil
}

// dupOf returns a duplicate of c's fd: a socket the relay can own while c is closed, which
// takes it out of Go's poller. Why: a socket registered in both Go's epoll set and a loop's
// costs each of its events three epoll callbacks instead of one (Go's set, the loop's, and
// the loop's set waking Go's), and its netFD, pollDesc and addresses stay in memory as long
// as the connection lives.
func dupOf(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = rawDup(int(s)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return fd, nil
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

// ErrDialTimeout is the error of a Dial that did not connect within its timeout.
var ErrDialTimeout = errors.New("connect timed out")

// DialOptions tune Dial.
type DialOptions struct {
	// Timeout bounds the connect (required); it is enforced within a quarter of itself.
	Timeout time.Duration
	// KeepAlive is the TCP keepalive idle time; negative: none.
	KeepAlive time.Duration
}

// Dial connects a new socket to ep from one of the loops and returns the pair that will relay
// it as side B: call Attach to start relaying, or Abandon to close it. Why not net.Dial: the
// socket is put in the loop's epoll set once, for the connect and the relay both, and never
// in Go's poller, which saves four system calls per connection (Go's registration and
// removal, getsockname, getpeername) and the net.Conn bookkeeping an idle connection keeps.
func (r *Relay) Dial(ep netip.AddrPort, o DialOptions) (*Pair, error) {
	fd, err := openConnect(ep, o.KeepAlive)
	if err != nil {
		return nil, err
	}
	p := r.newPair(-1, fd)
	p.ownsB = true
	p.dialing = true
	p.ep = ep
	p.dialed = make(chan error, 1)
	p.dialDeadline.Store(time.Now().Add(o.Timeout).UnixNano())
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
// and starts its connect to ep.
func openConnect(ep netip.AddrPort, keepAlive time.Duration) (int, error) {
	fd, err := rawSocket(ep)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := setDialSockopts(fd, keepAlive); err != nil {
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

// setDialSockopts sets what a relayed backend socket needs: no Nagle delay (the relay
// forwards what it reads as it reads it) and keepalive with the given idle time.
func setDialSockopts(fd int, keepAlive time.Duration) error {
	if err := rawSetsockopt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	if keepAlive < 0 {
		return nil
	}
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
func (p *Pair) Attach(a *net.TCPConn, preface []byte, o Options, done func(Result)) error {
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

// watch makes sure the sweeper runs often enough for a timeout of d (idle or dial): four
// checks per timeout, so a pair ends between d and 1.25 d after its last byte.
func (r *Relay) watch(d time.Duration) {
	each := min(max(d/4, 5*time.Millisecond), time.Second)
	if cur := r.sweepSet.Load(); cur != 0 && time.Duration(cur) <= each {
		return // the common case: every connection's dial asks for the same timeout
	}
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	if r.sweepEach != 0 && r.sweepEach <= each {
		return
	}
	first := r.sweepEach == 0
	r.sweepEach = each
	r.sweepSet.Store(int64(each))
	if first {
		go r.sweep()
	} else {
		select {
		case r.sweepWake <- struct{}{}:
		default:
		}
	}
}

func (r *Relay) sweep() {
	r.sweepMu.Lock()
	t := time.NewTicker(r.sweepEach)
	r.sweepMu.Unlock()
	defer t.Stop()
	var idle, timedOut []*Pair
	for {
		select {
		case <-r.stop:
			return
		case <-r.sweepWake:
			r.sweepMu.Lock()
			t.Reset(r.sweepEach)
			r.sweepMu.Unlock()
			continue
		case <-t.C:
		}
		now := time.Now().UnixNano()
		for _, l := range r.loops {
			idle = idle[:0]
			l.mu.Lock()
			for _, p := range l.pairs {
				if p == nil {
					continue
				}
				if dl := p.dialDeadline.Load(); dl != 0 && now >= dl {
					timedOut = append(timedOut, p)
				} else if it := p.idle.Load(); it > 0 && p.started.Load() && now-p.lastActive.Load() >= it {
					idle = append(idle, p)
				}
			}
			l.mu.Unlock()
			for _, p := range idle {
				p.Stop(OutcomeIdle)
			}
			for _, p := range timedOut {
				// A flag, not Stop: should the connect succeed meanwhile, the pair lives on.
				p.dialTimedOut.Store(true)
				p.poke()
			}
			timedOut = timedOut[:0]
		}
	}
}

// loop is one event loop: an epoll set, waited on through Go's poller.
type loop struct {
	epfd int
	efd  int // eventfd: writing it wakes the loop (Stop, more work than one turn)
	f    *os.File
	rc   syscall.RawConn

	mu    sync.Mutex // guards pairs, free, gen, inbox
	pairs []*Pair    // by slot; nil: free
	free  []int32
	gen   uint32
	inbox []*Pair // pairs that Stop asked to end
	count atomic.Int32

	// Owned by the loop goroutine.
	events [batch]unix.EpollEvent
	work   []*Pair
	ready  []*Pair // pairs that ran out of budget with work left
}

func newLoop() (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile puts it in Go's poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	// Edge-triggered and never read: every write is a new edge (the counter would take
	// centuries to saturate).
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: kickData}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(efd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	f := os.NewFile(uintptr(epfd), "relay-epoll")
	// A file outside Go's poller would make Read below block a thread instead of parking;
	// deadlines are supported exactly when the file is in the poller.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		unix.Close(efd)
		return nil, fmt.Errorf("epoll fd not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(efd)
		return nil, err
	}
	return &loop{epfd: epfd, efd: efd, f: f, rc: rc}, nil
}

func (l *loop) close() {
	l.f.Close() // run's Read returns
	unix.Close(l.efd)
}

func (l *loop) run() {
	// The callback handles what is ready and returns false, which makes Go's poller park
	// this goroutine until the epoll fd is readable again; it returns only when closed.
	for {
		if err := l.rc.Read(func(uintptr) bool { l.turn(); return false }); err != nil {
			return
		}
	}
}

// kick makes the loop run again soon, after the runtime had a chance to run other
// goroutines.
func (l *loop) kick() {
	var one = [8]byte{1}
	writeRetry(l.efd, one[:])
}

// turn handles one batch of events, the pairs Stop asked to end and the pairs left over
// from the previous turn.
func (l *loop) turn() {
	n, err := epollPoll(l.epfd, l.events[:])
	if err != nil {
		n = 0 // EINTR: the pairs left over still get their turn; the kick below retries
	}
	work := l.work[:0]
	l.mu.Lock()
	for i := range n {
		ev := &l.events[i]
		if ev.Fd == kickData {
			continue
		}
		p := l.pairs[ev.Fd>>1]
		if p == nil || p.gen != uint32(ev.Pad) {
			continue // the pair ended earlier in this batch
		}
		p.note(int(ev.Fd&1), ev.Events)
		if !p.started.Load() && !p.dialing {
			continue // dialed, not attached yet: the readiness noted waits for Attach
		}
		if !p.queued {
			p.queued = true
			work = append(work, p)
		}
	}
	for _, p := range l.inbox {
		if !p.queued {
			p.queued = true
			work = append(work, p)
		}
	}
	l.inbox = l.inbox[:0]
	l.mu.Unlock()
	for _, p := range l.ready {
		if !p.queued {
			p.queued = true
			work = append(work, p)
		}
	}
	l.ready = l.ready[:0]

	for i, p := range work {
		p.queued = false
		if p.run() {
			l.ready = append(l.ready, p) // queued is for this turn's list only
		}
		work[i] = nil
	}
	l.work = work[:0]
	// More may be waiting (a full batch, pairs with bytes left): come back after the
	// runtime has run what else is runnable, including its own network poller.
	if n == len(l.events) || len(l.ready) > 0 || err != nil {
		l.kick()
	}
}

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

// direction is one way of a pair: d[0] reads A and writes B, d[1] reads B and writes A.
type direction struct {
	buf       *[]byte // bytes buf[off:end] wait for the destination
	off, end  int
	pipe      *pipe // bulk mode: splice through this pipe
	inPipe    int   // bytes in pipe waiting for the destination
	eof, shut bool  // source at EOF; the EOF was passed on
	n         int64 // bytes written to the destination
}

func (d *direction) pending() bool { return d.end > d.off || d.inPipe > 0 }

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
			p.dialing = false
			p.dialDeadline.Store(0)
			if p.rt != nil {
				p.rt.Dialed(p.tag, p.ep, time.Since(p.dialStart), nil)
				return true
			}
			p.dialed <- nil
			return false
		}
	default:
		return false // not connected yet
	}
	p.dialing = false
	oerr := &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(p.ep), Err: err}
	if p.rt != nil {
		rawClose(p.fd[1]) // also takes it out of the epoll set
		p.fd[1], p.ownsB = -1, false
		p.redial(oerr)
		return false
	}
	p.finish(nil, "", 0) // closes the socket; no done callback before Attach
	p.dialed <- oerr
	return false
}

var errAbandoned = errors.New("dial abandoned")

type notTLSError byte

func (e notTLSError) Error() string { return fmt.Sprintf("first byte %#02x is not TLS", byte(e)) }

// pump moves bytes of direction i until the source has nothing, the destination is full,
// or the budget is spent (left true).
func (p *Pair) pump(i int) (moved int, left bool, err error) {
	d := &p.d[i]
	src, dst := i, 1-i
	for moved < turnBudget {
		if d.pending() {
			if !p.writable[dst] {
				return moved, false, nil
			}
			m, err := d.flush(p.fd[dst])
			moved += m
			if err == unix.EAGAIN {
				p.writable[dst] = false
				if aerr := p.armOut(dst); aerr != nil {
					return moved, false, os.NewSyscallError("epoll_ctl", aerr)
				}
				return moved, false, nil
			}
			if err != nil {
				return moved, false, os.NewSyscallError("write", err)
			}
			if d.pending() {
				// A short write: the kernel marked the socket full and will send an edge
				// when there is room.
				if !p.sticky[dst] {
					p.writable[dst] = false
					if aerr := p.armOut(dst); aerr != nil {
						return moved, false, os.NewSyscallError("epoll_ctl", aerr)
					}
				}
				return moved, false, nil
			}
			if d.buf != nil {
				bufs.Put(d.buf)
				d.buf = nil
			}
			continue
		}
		if d.eof {
			if !d.shut {
				d.shut = true
				d.releasePipe()
				// ENOTCONN when the destination is gone already: the other direction's read
				// reports that.
				rawShutdown(p.fd[dst])
			}
			return moved, false, nil
		}
		if !p.readable[src] {
			return moved, false, nil
		}
		if d.pipe != nil {
			n, err := spliceRetry(p.fd[src], d.pipe.w, pipeSize)
			switch {
			case err == unix.EAGAIN:
				p.readable[src] = false
				d.releasePipe() // the burst is over; small reads go through buffers again
				return moved, false, nil
			case err != nil:
				return moved, false, os.NewSyscallError("splice", err)
			case n == 0:
				d.eof = true
			default:
				d.inPipe = int(n)
			}
			continue
		}
		bp := bufs.Get().(*[]byte)
		n, err := readRetry(p.fd[src], *bp)
		if err != nil || n == 0 {
			bufs.Put(bp)
			if err == unix.EAGAIN {
				p.readable[src] = false
				return moved, false, nil
			}
			if err != nil {
				return moved, false, os.NewSyscallError("read", err)
			}
			d.eof = true
			continue
		}
		if i == 1 && p.checkTLS {
			p.checkTLS = false
			if b := (*bp)[0]; b != 0x16 && b != 0x15 {
				bufs.Put(bp)
				return moved, false, notTLSError(b)
			}
		}
		d.buf, d.off, d.end = bp, 0, n
		if n == len(*bp) {
			// A full buffer: a burst. Splice the rest of it (without a pipe to be had, go on
			// through buffers).
			d.pipe = getPipe()
		} else if !p.sticky[src] && !p.rdhup[src] {
			// A short read took everything there was: new bytes bring a new edge. (After
			// the peer's FIN, no edge would come for the EOF that follows the data.)
			p.readable[src] = false
		}
	}
	return moved, true, nil
}

// flush writes pending bytes to fd: the buffer first, then the pipe. Errors are bare
// errnos.
func (d *direction) flush(fd int) (int, error) {
	if d.end > d.off {
		n, err := writeRetry(fd, (*d.buf)[d.off:d.end])
		if n > 0 {
			d.off += n
			d.n += int64(n)
		}
		if err != nil || d.end > d.off {
			return max(n, 0), err
		}
		return n, nil
	}
	n, err := spliceRetry(d.pipe.r, fd, d.inPipe)
	if n > 0 {
		d.inPipe -= int(n)
		d.n += n
	}
	return int(max(n, 0)), err
}

func (d *direction) releasePipe() {
	if d.pipe == nil {
		return
	}
	if d.inPipe == 0 {
		putPipe(d.pipe)
	} else {
		d.pipe.close() // bytes are stuck in it
	}
	d.pipe, d.inPipe = nil, 0
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

// The system calls of the data path are made with RawSyscall: every one of them is on a
// non-blocking socket, pipe or epoll set and returns at once, so the scheduler hand-off of
// syscall.Syscall is pure cost, and worse, its entersyscall wakes the runtime's sysmon
// thread whenever the process was idle: a futex wake and a context switch on every message
// of a quiet connection (measured: ~8 % of the relay's CPU in a ping-pong), after which
// sysmon polls every 20 µs for at least a millisecond. One such call per connection is
// enough to keep it polling under load.

func readRetry(fd int, b []byte) (int, error) {
	for {
		r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e != unix.EINTR {
			return int(r), errno(e)
		}
	}
}

func writeRetry(fd int, b []byte) (int, error) {
	for {
		r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e != unix.EINTR {
			return int(r), errno(e)
		}
	}
}

func spliceRetry(from, to, n int) (int64, error) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(from), 0, uintptr(to), 0, uintptr(n), spliceFlags)
		if e != unix.EINTR {
			return int64(r), errno(e)
		}
	}
}

// rawSocket makes a non-blocking TCP socket for ep's address family.
func rawSocket(ep netip.AddrPort) (int, error) {
	family := unix.AF_INET
	if !ep.Addr().Is4() {
		family = unix.AF_INET6
	}
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	return int(r), errno(e)
}

// rawConnect starts a non-blocking connect. On loopback the kernel runs the whole handshake
// inside this call, which can take long enough for syscall.Syscall's hand-off to let sysmon
// retake the P (and keep sysmon polling every 20 µs): hence raw.
func rawConnect(fd int, ep netip.AddrPort) error {
	var (
		sa4 unix.RawSockaddrInet4
		sa6 unix.RawSockaddrInet6
		ptr unsafe.Pointer
		n   uintptr
	)
	port := ep.Port()
	pb := (*[2]byte)(unsafe.Pointer(&sa4.Port))
	if ep.Addr().Is4() {
		sa4.Family = unix.AF_INET
		pb[0], pb[1] = byte(port>>8), byte(port)
		sa4.Addr = ep.Addr().As4()
		ptr, n = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else {
		sa6.Family = unix.AF_INET6
		pb = (*[2]byte)(unsafe.Pointer(&sa6.Port))
		pb[0], pb[1] = byte(port>>8), byte(port)
		sa6.Addr = ep.Addr().As16()
		ptr, n = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	for {
		_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(ptr), n)
		if e != unix.EINTR {
			return errno(e)
		}
	}
}

func rawSetsockopt(fd, level, opt, v int) error {
	val := int32(v)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&val)), 4, 0)
	return errno(e)
}

func rawGetsockopt(fd, level, opt int) (int, error) {
	var val int32
	l := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&val)), uintptr(unsafe.Pointer(&l)), 0)
	return int(val), errno(e)
}

func rawEpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errno(e)
}

// rawShutdown half-closes a socket (SHUT_WR): its FIN goes out.
func rawShutdown(fd int) {
	unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
}

func rawDup(fd int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	return int(r), errno(e)
}

// rawClose closes a socket; a last close with unsent data or a pending FIN runs TCP work
// inline, like connect.
func rawClose(fd int) {
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// epollPoll returns the events ready now (timeout 0: it never blocks).
func epollPoll(epfd int, evs []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
	return int(r), errno(e)
}

// errno turns a raw errno into an error (nil for 0) without allocating for the common ones.
func errno(e syscall.Errno) error {
	switch e {
	case 0:
		return nil
	case unix.EAGAIN:
		return unix.EAGAIN
	}
	return e
}

var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

type pipe struct{ r, w int }

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

var pipes = struct {
	sync.Mutex
	free []*pipe
}{}

func getPipe() *pipe {
	pipes.Lock()
	if n := len(pipes.free); n > 0 {
		p := pipes.free[n-1]
		pipes.free = pipes.free[:n-1]
		pipes.Unlock()
		return p
	}
	pipes.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil
	}
	// A bigger pipe moves more per splice; the kernel may refuse (per-user pipe budget),
	// which only makes splices smaller.
	unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	return &pipe{r: fds[0], w: fds[1]}
}

func putPipe(p *pipe) {
	pipes.Lock()
	if len(pipes.free) < maxIdlePipes {
		pipes.free = append(pipes.free, p)
		pipes.Unlock()
		return
	}
	pipes.Unlock()
	p.close()
}

// PooledPipes returns how many pipes wait in the pool for the next burst.
func PooledPipes() int {
	pipes.Lock()
	defer pipes.Unlock()
	return len(pipes.free)
}
