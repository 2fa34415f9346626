//go:build linux

package relay

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenerSocket is a loopback listening socket for Relay.Listen, which takes it over, and
// its address. The test's net.Listener is closed: the duplicate keeps the socket and its
// accept queue.
func listenerSocket(t *testing.T) (int, *net.TCPAddr) {
	t.Helper()
	ln := listen(t)
	fd, err := listenerFD(ln)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return fd, ln.Addr().(*net.TCPAddr)
}

// countingAcceptor adopts every connection with rt (with refuseEven, every second one is
// refused and closed instead, as an Acceptor over its limit does) and counts Accepted and
// Failed calls.
type countingAcceptor struct {
	rt         Router
	refuseEven bool
	accepted   atomic.Int32
	mu         sync.Mutex
	failed     []error
}

func (a *countingAcceptor) Accepted(fd int, _ netip.AddrPort) (Router, any, time.Time, bool) {
	if n := a.accepted.Add(1); a.refuseEven && n%2 == 0 {
		unix.Close(fd)
		return nil, nil, time.Time{}, false
	}
	return a.rt, nil, time.Now().Add(5 * time.Second), true
}

func (a *countingAcceptor) Failed(err error) {
	a.mu.Lock()
	a.failed = append(a.failed, err)
	a.mu.Unlock()
}

// When Close returns, the listener is closed and no loop accepts from it any more.
func TestListenerClose(t *testing.T) {
	r := newRelay(t, 2)
	fd, laddr := listenerSocket(t)
	addr := laddr.String()
	rt := newTestRouter(func([]byte) Verdict { return Verdict{Action: Release} })
	rt.released = make(chan released, 100)
	a := &countingAcceptor{rt: rt}
	rl, err := r.Listen(fd, a)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Write([]byte("x"))
		rel := rt.waitReleased(t)
		unix.Close(rel.fd)
		c.Close()
	}
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	n := a.accepted.Load()
	if n != 10 {
		t.Fatalf("%d connections accepted, want 10", n)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("connected to a closed listener")
	}
	if rl.Close() != nil {
		t.Fatal("a second Close failed")
	}
	if got := a.accepted.Load(); got != n {
		t.Fatalf("%d Accepted calls after Close", got-n)
	}
}

// Out of file descriptors, accept4 fails with EMFILE as long as the connection waits: the
// loop reports it and stops asking for a while, backing off, instead of spinning on a
// level-triggered listener, and accepts the connection once descriptors are free again.
func TestListenBacksOffWhenOutOfFDs(t *testing.T) {
	r := newRelay(t, 1)
	fd, laddr := listenerSocket(t)
	bln := listen(t)
	rt := newTestRouter(untilLine(bln.Addr().(*net.TCPAddr).AddrPort()))
	a := &countingAcceptor{rt: rt}
	rl, err := r.Listen(fd, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })

	// The client's socket first: once the limit is down, no descriptor can be made.
	cfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(highestFD(t) + 1)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	// Every free descriptor below the limit taken as well: accept4 takes the lowest free one.
	var fillers []int
	for {
		f, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fillers = append(fillers, f)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			for _, f := range fillers {
				unix.Close(f)
			}
			unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
		}
	}
	defer restore()
	sa := &unix.SockaddrInet4{Port: laddr.Port, Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Connect(cfd, sa); err != nil {
		restore()
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	restore()
	a.mu.Lock()
	failed := append([]error(nil), a.failed...)
	a.mu.Unlock()
	if len(failed) == 0 || !errors.Is(failed[0], unix.EMFILE) {
		t.Fatalf("Failed calls %v, want EMFILE", failed)
	}
	// Pauses of 5, 10, 20, 40 and 80 ms fit in 120 ms: a few reports, not a spin.
	if len(failed) > 8 {
		t.Fatalf("%d Failed calls in 120 ms: the loop spins on the listener", len(failed))
	}

	f := os.NewFile(uintptr(cfd), "client")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("late\n"))
	backend := acceptBackend(t, bln)
	defer backend.Close()
	readExpect(t, "backend", backend, "late\n")
	if a.accepted.Load() != 1 {
		t.Fatalf("%d connections accepted, want 1", a.accepted.Load())
	}
}

// highestFD is the highest descriptor the process has open.
func highestFD(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	hi := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > hi {
			hi = n
		}
	}
	return hi + 1 // ReadDir's own descriptor is closed by now, and may be the highest
}

// Router.Release runs off the loops: a Release that waits does not hold up the loop's
// other pairs (with one loop, a Release run on it would stall the second client forever).
func TestReleaseRunsOffTheLoop(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	blocked := make(chan struct{})
	hold := &blockingRelease{
		testRouter: newTestRouter(func([]byte) Verdict { return Verdict{Action: Release} }),
		until:      blocked,
		entered:    make(chan struct{}),
	}
	first := rl.adopted(t, hold, nil, time.Now().Add(5*time.Second))
	first.Write([]byte("x"))
	<-hold.entered

	rt := newTestRouter(untilLine(bln.Addr().(*net.TCPAddr).AddrPort()))
	second := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	second.Write([]byte("hi\n"))
	backend := acceptBackend(t, bln)
	readExpect(t, "backend", backend, "hi\n")
	backend.Write([]byte("yo"))
	second.SetDeadline(time.Now().Add(5 * time.Second))
	readExpect(t, "second client", second, "yo")
	close(blocked)
	rel := hold.waitReleased(t)
	unix.Close(rel.fd)
	backend.Close()
	second.Close()
	rt.waitDone(t)
}

type blockingRelease struct {
	*testRouter
	until   chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (b *blockingRelease) Release(tag any, fd int, pre []byte, err error) {
	b.once.Do(func() { close(b.entered) })
	<-b.until
	b.testRouter.Release(tag, fd, pre, err)
}

// New reserves a P per loop on top of what the program had; Close gives them back. New(0)
// makes one loop per P the program has, not counting the Ps other relays reserved.
func TestRelayReservesProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	r, err := New(3)
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != before+3 {
		r.Close()
		t.Fatalf("GOMAXPROCS %d with 3 loops, want %d", got, before+3)
	}
	r2, err := New(0)
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	if len(r2.loops) != before || runtime.GOMAXPROCS(0) != 2*before+3 {
		t.Errorf("New(0) beside a relay of 3 loops: %d loops, GOMAXPROCS %d; want %d and %d",
			len(r2.loops), runtime.GOMAXPROCS(0), before, 2*before+3)
	}
	r2.Close()
	r.Close()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS %d after Close, want %d", got, before)
	}
}

// Loops waiting in raw system calls hold their Ps, yet stop for the garbage collector at
// once: the runtime's preemption signal cuts their waits short.
func TestGarbageCollectionStopsWaitingLoops(t *testing.T) {
	newRelay(t, 2)
	time.Sleep(20 * time.Millisecond) // the loops are in their raw waits
	t0 := time.Now()
	for range 50 {
		runtime.GC()
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("50 collections took %v", d)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var worst uint64
	for _, ns := range ms.PauseNs {
		worst = max(worst, ns)
	}
	t.Logf("50 collections in %v, longest pause %v", time.Since(t0), time.Duration(worst))
}

// An idle relay wakes for nothing: after parkAfter empty waits its loops block without a
// time limit. Judged on the threads blocked on the loops' own epoll sets or rings, read
// from /proc (the system call each thread is in and its arguments): each loop must come to
// a wait without a time limit (epoll_pwait's timeout -1, io_uring_enter without a timeout
// argument) soon after parkAfter waits' time, and its thread then stay there, switching no
// more than a few times in 500 ms; a loop that still waited 4 ms at a time would switch
// about 125 times. Other threads are not judged: sysmon alone switches 20 to 30 times in
// that half second (it naps in nanosleep), and the runtime's own netpoller thread, in an
// epoll wait too, wakes for every timer the runtime arms (the background scavenger's, after
// the package's earlier tests freed memory): 26 times in one CI run, when the test still
// picked the waiting threads by wchan.
func TestIdleLoopsSleep(t *testing.T) {
	r := newRelay(t, 2)
	waits := map[uint64]bool{}
	for _, l := range r.loops {
		waits[uint64(l.epfd)] = true
		if l.ring != nil { // published to New by the loop's start report
			waits[uint64(l.ring.fd)] = true
		}
	}
	parkedThreads := func(m map[string]threadState) (parked []string, bounded int) {
		for tid, th := range m {
			switch th.wait {
			case waitParked:
				parked = append(parked, tid)
			case waitBounded:
				bounded++
			}
		}
		return parked, bounded
	}
	// A signal that cuts a bounded wait short starts the count of empty waits again, so
	// parking may come a little later than parkAfter waits' time.
	limit := time.Duration(parkAfter*rawWaitMs)*time.Millisecond + 2*time.Second
	deadline := time.Now().Add(limit)
	var before map[string]threadState
	var parked []string
	for {
		before = threadSwitches(t, waits)
		var bounded int
		parked, bounded = parkedThreads(before)
		if len(parked) == len(r.loops) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d loops parked in a wait without a time limit (%d in bounded waits) after %v of idleness",
				len(parked), len(r.loops), bounded, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	after := threadSwitches(t, waits)
	var total int64
	for tid, th := range after {
		total += th.switches - before[tid].switches
	}
	t.Logf("%d context switches in the process in 500 ms of idleness, with threads %v parked", total, parked)
	for _, tid := range parked {
		th, ok := after[tid]
		if d := th.switches - before[tid].switches; !ok || th.wait != waitParked || d > 5 {
			t.Errorf("loop thread %s, parked, after 500 ms of idleness: still parked %v, %d context switches", tid, ok && th.wait == waitParked, d)
		}
	}
}

type loopWait int

const (
	waitNone    loopWait = iota // not in a system call on a loop's descriptor
	waitBounded                 // in a loop's wait with a time limit
	waitParked                  // in a loop's wait without one
)

type threadState struct {
	switches int64 // voluntary and involuntary context switches so far
	wait     loopWait
}

// threadSwitches reads each of the process's threads, by thread id. waits holds the
// descriptors a loop waits on. /proc's syscall file gives the number and the arguments, in
// hexadecimal, of the system call a blocked thread is in: epoll_pwait(epfd, events, n,
// timeout, ...) and io_uring_enter(fd, submit, min, flags, arg, size), where a bounded
// wait passes its timeout in arg (enterExtArg).
func threadSwitches(t *testing.T, waits map[uint64]bool) map[string]threadState {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]threadState, len(ents))
	for _, e := range ents {
		dir := "/proc/self/task/" + e.Name()
		b, err := os.ReadFile(dir + "/status")
		if err != nil {
			continue // the thread has exited
		}
		var th threadState
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				th.switches += n
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				th.switches += n
			}
		}
		sc, _ := os.ReadFile(dir + "/syscall") // "running", "-1 sp pc" or "nr arg1 ... arg6 sp pc"
		if f := strings.Fields(string(sc)); len(f) == 9 {
			var args [6]uint64
			for i := range args {
				args[i], _ = strconv.ParseUint(strings.TrimPrefix(f[i+1], "0x"), 16, 64)
			}
			switch {
			case !waits[args[0]]:
			case f[0] == strconv.Itoa(unix.SYS_EPOLL_PWAIT) && int32(args[3]) == -1,
				f[0] == strconv.Itoa(sysIOURingEnter) && args[3]&enterExtArg == 0:
				th.wait = waitParked
			default:
				th.wait = waitBounded
			}
		}
		m[e.Name()] = th
	}
	return m
}

// Connections opened one at a time spread over the loops, though the loop that waits first
// in the listener's queue accepts them all.
func TestAcceptedConnectionsSpread(t *testing.T) {
	r := newRelay(t, 2)
	fd, laddr := listenerSocket(t)
	wait := newTestRouter(func([]byte) Verdict { return Verdict{Action: Wait} })
	wait.pair = make(chan *Pair, 100)
	rl, err := r.Listen(fd, &countingAcceptor{rt: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	const n = 64
	for i := range n {
		c, err := net.Dial("tcp", laddr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitPairs(t, r, i+1) // one at a time: the loops are idle when the next comes
	}
	for i, l := range r.loops {
		if c := l.count.Load(); c < n/2-4 {
			t.Errorf("loop %d runs %d of %d pairs", i, c, n)
		}
	}
}

// Connections that queued up on the listener before any loop looked are all accepted,
// refused ones among them: a loop takes one connection per event, and the listener, being
// level-triggered, is reported again while more wait. (An edge-triggered listener would
// strand them.)
func TestListenerTakesBacklog(t *testing.T) {
	r := newRelay(t, 1)
	fd, laddr := listenerSocket(t)
	const n = 100
	for i := range n {
		c, err := net.Dial("tcp", laddr.String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
	}
	wait := newTestRouter(func([]byte) Verdict { return Verdict{Action: Wait} })
	wait.pair = make(chan *Pair, n)
	a := &countingAcceptor{rt: wait, refuseEven: true}
	rl, err := r.Listen(fd, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	waitPairs(t, r, n/2)
	if got := a.accepted.Load(); got != n {
		t.Fatalf("%d connections accepted, want %d", got, n)
	}
}

// A connection that arrives as a listener is being closed is accepted, by the closing
// relay or by another on the same socket, never left in the queue. The case is a live
// upgrade's: the old process's loops and the new one's wait on one listening socket, with
// EPOLLEXCLUSIVE, so a connection wakes one loop only; when that is an old loop that has
// stopped accepting, no loop of the new process hears of it, and a lone client waits until
// the next connection wakes someone (e2e TestUpgradeEstablished: one handshake timed out).
// The old relay's loops registered first and idle, so they are the ones woken.
func TestClosingListenerStrandsNoConnection(t *testing.T) {
	for round := range 3 {
		old, next := newRelay(t, 1), newRelay(t, 1)
		fd, laddr := listenerSocket(t)
		dup, err := rawDup(fd)
		if err != nil {
			t.Fatal(err)
		}
		release := func() *testRouter {
			rt := newTestRouter(func([]byte) Verdict { return Verdict{Action: Release} })
			rt.released = make(chan released, 10)
			return rt
		}
		a, b := &countingAcceptor{rt: release()}, &countingAcceptor{rt: release()}
		lnOld, err := old.Listen(fd, a)
		if err != nil {
			t.Fatal(err)
		}
		lnNext, err := next.Listen(dup, b)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // both loops asleep in their waits
		// Close has begun: the old loop no longer accepts, and has not yet dropped the
		// listener from its set.
		lnOld.closed.Store(true)
		c, err := net.Dial("tcp", laddr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		time.Sleep(100 * time.Millisecond)
		if err := lnOld.Close(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for a.accepted.Load()+b.accepted.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := a.accepted.Load() + b.accepted.Load(); n != 1 {
			t.Fatalf("round %d: the connection was accepted %d times within 3 s of the close, want once", round, n)
		}
		c.Close()
		lnNext.Close()
	}
}
