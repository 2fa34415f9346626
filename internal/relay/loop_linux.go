package relay

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// loop is one event loop: an epoll set, waited on by the loop's own goroutine.
type loop struct {
	r      *Relay
	epfd   int
	efd    int // eventfd: writing it wakes the loop (Stop, post, Close)
	closed atomic.Bool
	exited chan struct{}

	mu    sync.Mutex // guards pairs, free, gen, inbox, tasks, lns, done
	done  bool       // the loop has left: post refuses
	pairs []*Pair    // by slot; nil: free
	free  []int32
	gen   uint32
	inbox []*Pair  // pairs that Stop asked to end
	tasks []func() // run on the loop at its next turn (post)
	lns   map[int32]*lnState
	count atomic.Int32

	// Owned by the loop goroutine.
	events     [batch]unix.EpollEvent
	work       []*Pair
	ready      []*Pair // pairs that ran out of budget with work left
	acceptable []*lnState
	todo       []func()

	// ring, when set, is what the loop waits on instead of epfd (WithIOURing; see
	// ring_linux.go). Set by the loop's goroutine before New returns, never changed after.
	ring     *ring
	wantRing bool
	spin     time.Duration // WithSpin; set before the loop starts
	started  chan error    // the loop's goroutine reports here why it waits on epoll, or nil
}

func newLoop() (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
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
	return &loop{epfd: epfd, efd: efd, exited: make(chan struct{}), started: make(chan error, 1), lns: map[int32]*lnState{}}, nil
}

// close stops the loop and waits until its goroutine has left, then closes its fds.
func (l *loop) close() {
	l.closed.Store(true)
	l.kick()
	<-l.exited
	l.closeFDs()
}

func (l *loop) closeFDs() {
	if l.ring != nil {
		l.ring.close()
	}
	unix.Close(l.epfd)
	unix.Close(l.efd)
}

// kick wakes the loop.
func (l *loop) kick() {
	var one = [8]byte{1}
	writeRetry(l.efd, one[:])
}

// post runs f on the loop soon. It reports false when the loop has stopped (f will not run).
func (l *loop) post(f func()) bool {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return false
	}
	l.tasks = append(l.tasks, f)
	l.mu.Unlock()
	l.kick()
	return true
}

// How the loop waits. Busy, it blocks in epoll_pwait with a raw system call: the runtime
// is not told, so the goroutine keeps its P and its thread, and a message costs one
// epoll_pwait and no scheduler round, as in a C event loop (Relay reserves a P for each
// loop: see reserveProcs). Through Go's poller each message cost three epoll calls (the
// runtime's blocking and non-blocking netpoll, then the loop's own set) and a scheduler
// round, and every event on the loop's set woke the runtime's poller as well.
//
// A raw wait holds a P, which the runtime cannot take back while the thread sleeps in the
// kernel: the goroutine stops for the garbage collector only when it returns to Go code.
// The runtime's preemption signal interrupts the wait (EINTR), and the wait is bounded
// (rawWaitMs) for when that signal is off (GODEBUG=asyncpreemptoff=1). After each empty
// bounded wait the loop yields, which also keeps sysmon from preempting it.
//
// Idle for parkAfter waits in a row, the loop blocks with an ordinary system call instead,
// without a time limit: the runtime takes its P back, and an idle proxy wakes for nothing.
// The first event then costs the loop a P to be had again, once.
const (
	rawWaitMs  = 4
	parkAfter  = 25                   // × rawWaitMs: 100 ms without an event
	yieldEvery = 8 * time.Millisecond // before sysmon's 10 ms
)

// repollMin and repollMax bound how the loop asks its epoll set again, without waiting,
// after a batch. Under many busy connections new events arrive while a batch is handled:
// asking again costs one epoll_pwait, while sleeping costs a context switch and the
// wake-up. After a batch of fewer than repollMin events (one connection's message) the
// loop waits at once, as the new asking would mostly come back empty.
const (
	repollMin = 2
	repollMax = 8
)

func (l *loop) run() {
	defer func() {
		// Tasks posted before the loop stopped still run (a Listener's Close waits for its).
		l.mu.Lock()
		l.done = true
		tasks := l.tasks
		l.tasks = nil
		l.mu.Unlock()
		for _, f := range tasks {
			f()
		}
		close(l.exited)
	}()
	var ringErr error
	if l.wantRing {
		ringErr = l.startRing()
	}
	l.started <- ringErr
	if l.ring != nil {
		l.runRing()
		return
	}
	timeout, idle, repolls := rawWaitMs, 0, 0
	y := yielder{at: time.Now()}
	sp := newSpinner(l.spin)
	for !l.closed.Load() {
		var n int
		var err error
		if idle < parkAfter {
			n, err = epollWaitRaw(l.epfd, l.events[:], timeout)
		} else {
			n, err = epollWait(l.epfd, l.events[:], -1)
		}
		if err != nil {
			n = 0 // EINTR: a signal, the runtime's preemption among them
		}
		if n > 0 {
			sp.found() // before the work: a spin is judged by when its events came
		}
		more := l.turn(n)
		switch {
		case more:
			timeout, idle, repolls = 0, 0, 0 // ask again at once
		case n >= repollMin && repolls < repollMax:
			timeout, idle = 0, 0
			repolls++
		case n > 0 || err != nil:
			timeout, idle, repolls = rawWaitMs, 0, 0
			if n > 0 && sp.begin() {
				timeout = 0 // spin
			}
		case timeout > 0:
			idle++
			y.now()
			continue
		default: // an ask without waiting (a repoll or a spin) found nothing
			timeout, repolls = rawWaitMs, 0
			if sp.empty() {
				timeout = 0
			}
		}
		y.ifBusy()
	}
}

// yielder yields the loop's goroutine after an empty bounded wait, and when it has been
// busy for yieldEvery: before sysmon preempts the loop with a signal (after 10 ms without a
// reschedule), which costs the loop a signal and an interrupted wait on top of what a
// yield costs (the runtime wakes a thread to look for work). Measured in the latency test:
// p99 +50 µs over direct yielding every 8 ms, +53 every 5 ms, +65 preempted by sysmon.
// (time.Now reads the vDSO clock: tens of nanoseconds a turn.)
type yielder struct{ at time.Time }

func (y *yielder) now() {
	runtime.Gosched()
	y.at = time.Now()
}

func (y *yielder) ifBusy() {
	if now := time.Now(); now.Sub(y.at) > yieldEvery {
		runtime.Gosched()
		y.at = now
	}
}

// turn handles a batch of n events (in l.events): the pairs and listeners they name, the
// tasks posted and the pairs Stop asked to end, and the pairs left over from the previous
// turn. It reports whether work is left that needs another turn soon: a full batch, or
// pairs that used their budget.
func (l *loop) turn(n int) bool {
	work := l.work[:0]
	l.mu.Lock()
	for i := range n {
		ev := &l.events[i]
		if ev.Fd < 0 {
			if st := l.lns[-1-ev.Fd]; ev.Fd != kickData && st != nil {
				l.acceptable = append(l.acceptable, st)
			}
			continue
		}
		p := l.pairs[ev.Fd>>1]
		if p == nil || p.gen != uint32(ev.Pad) {
			continue // the pair ended earlier in this batch
		}
		p.note(int(ev.Fd&1), ev.Events)
		if p.phase == phaseDialed && !p.started.Load() {
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
	todo := l.tasks
	l.tasks, l.todo = l.todo[:0], todo // the two slices take turns
	l.mu.Unlock()
	for i, f := range todo {
		f()
		todo[i] = nil
	}
	for i, st := range l.acceptable {
		l.accept(st)
		l.acceptable[i] = nil
	}
	l.acceptable = l.acceptable[:0]
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
	return n == len(l.events) || len(l.ready) > 0
}

// runRing is run's loop for a loop that waits on its ring: the same turns, yields and
// parking, with one io_uring_enter where run makes one epoll_pwait. It does not ask again
// after a busy batch as run does: the ring's batched wait does that better (ring_linux.go).
func (l *loop) runRing() {
	r := l.ring
	timeout, idle := rawWaitMs, 0
	y := yielder{at: time.Now()}
	for !l.closed.Load() {
		var err error
		switch {
		case r.pending():
			if r.tail != r.submitted {
				err = r.submit() // the completions are there already: only submit
			}
		case timeout == 0:
			err = r.submit()
		case idle < parkAfter:
			err = r.wait(timeout)
		default:
			err = r.wait(-1)
		}
		if err != nil && err != unix.EINTR {
			// The ring broke (it should not): nothing the loop can wait on is left.
			panic(err)
		}
		n, taken := r.reap(l.events[:], l.pollFailed)
		more := l.turn(n)
		switch {
		case more || r.pending():
			timeout, idle = 0, 0
		case taken > 0 || err != nil:
			// Completions came, if only the ring's own (a closed socket's cancelled poll):
			// not an idle wait, so no yield, which on the loop's locked thread costs a
			// thread hand-off both ways.
			timeout, idle = rawWaitMs, 0
		case timeout > 0:
			idle++
			y.now()
			continue
		default:
			timeout = rawWaitMs
		}
		y.ifBusy()
	}
}
