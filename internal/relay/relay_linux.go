package relay

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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

// Relay is a set of event loops. Its methods are safe for concurrent use.
type Relay struct {
	loops []*loop
	next  atomic.Uint32
	lnIDs atomic.Int32
	hand  *handoffs

	sweepMu   sync.Mutex
	sweepEach time.Duration // 0 until a pair with an idle or dial timeout starts
	// sweepSet mirrors sweepEach for the check every Dial makes, without the mutex.
	sweepSet  atomic.Int64
	sweepWake chan struct{}
	stop      chan struct{}
	closeOnce sync.Once
	ringErr   error // why the loops wait on epoll though WithIOURing asked for rings
	rings     bool  // the loops wait on io_uring
}

// New starts n event loops; n ≤ 0 means one per P the program has (GOMAXPROCS, less the Ps
// other relays reserved). Each loop holds a P of the runtime while it waits (see loop.run),
// so New raises GOMAXPROCS by the number of loops and Close lowers it again: the rest of
// the program keeps the Ps it had.
//
// With WithIOURing(true) each loop waits on an io_uring where the kernel allows it (Linux
// 6.12, io_uring not refused by seccomp or kernel.io_uring_disabled) and on epoll
// otherwise; Wait tells which, and why.
func New(n int, opts ...Option) (*Relay, error) {
	o := settings{ring: defaultIOURing, spin: DefaultSpin}
	for _, opt := range opts {
		opt(&o)
	}
	if n <= 0 {
		procsMu.Lock()
		n = runtime.GOMAXPROCS(0) - reservedProcs
		procsMu.Unlock()
	}
	r := &Relay{stop: make(chan struct{}), sweepWake: make(chan struct{}, 1)}
	var err error
	if r.hand, err = newHandoffs(); err != nil {
		return nil, err
	}
	for range max(n, 1) {
		l, err := newLoop()
		if err != nil {
			for _, l := range r.loops {
				l.closeFDs()
			}
			r.hand.close()
			return nil, err
		}
		l.r = r
		l.wantRing = o.ring
		l.spin = o.spin
		r.loops = append(r.loops, l)
	}
	reserveProcs(len(r.loops))
	go r.hand.run()
	for _, l := range r.loops {
		go l.run()
	}
	// Each loop makes its ring on its own thread; wait for them, so that every loop's
	// choice is made (and l.ring set) before anything is registered.
	r.rings = o.ring
	for _, l := range r.loops {
		if err := <-l.started; err != nil {
			r.rings, r.ringErr = false, err
		}
	}
	return r, nil
}

// Option changes how New makes a Relay.
type Option func(*settings)

type settings struct {
	ring bool
	spin time.Duration
}

// WithIOURing has the loops wait on io_uring instead of epoll where the kernel allows it
// (see ring_linux.go for what it buys and why it is not the default).
func WithIOURing(on bool) Option { return func(s *settings) { s.ring = on } }

// WithSpin sets how long a loop that has just worked asks its epoll set again without
// waiting before it sleeps, when such spins have been paying (spin_linux.go): DefaultSpin
// unless set; 0 or less never spins. Loops waiting on io_uring batch their waits instead
// and do not spin.
func WithSpin(d time.Duration) Option { return func(s *settings) { s.spin = max(d, 0) } }

// DefaultSpin is WithSpin's default.
const DefaultSpin = 10 * time.Microsecond

// defaultIOURing is WithIOURing's default; the package's tests set it from
// SNIGATE_TEST_IO_URING to run every test on both waits.
var defaultIOURing = false

// Wait names what the loops wait on, "io_uring" or "epoll", and, when io_uring was asked
// for and the kernel refused it, why.
func (r *Relay) Wait() (string, error) {
	if r.rings {
		return "io_uring", nil
	}
	return "epoll", r.ringErr
}

// Close stops the loops. Pairs still running are abandoned without their done callbacks:
// call it after every pair has ended.
func (r *Relay) Close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		for _, l := range r.loops {
			l.close()
		}
		r.hand.close()
		reserveProcs(-len(r.loops))
	})
}

var (
	procsMu       sync.Mutex // serializes the changes of GOMAXPROCS that relays make
	reservedProcs int        // Ps added for the loops of the relays running
)

// reserveProcs adds n Ps to GOMAXPROCS (n < 0: takes them away again). Why: a loop that
// waits in a raw system call holds its P; without one more P per loop, every other
// goroutine (TLS handshakes, HTTP, timers) would wait for the loops to yield. (Setting
// GOMAXPROCS stops the runtime from following changes of the cgroup's CPU limit.)
func reserveProcs(n int) {
	procsMu.Lock()
	defer procsMu.Unlock()
	reservedProcs += n
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)+n, 1))
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
func (r *Relay) Start(a, b Conn, o Options, done func(Result)) (*Pair, error) {
	fa, err := dupOf(a)
	if err != nil {
		return nil, err
	}
	fb, err := dupOf(b)
	if err != nil {
		rawClose(fa)
		return nil, err
	}
	p := r.newPair(fa, fb, phaseRelaying)
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
func dupOf(c Conn) (int, error) {
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
