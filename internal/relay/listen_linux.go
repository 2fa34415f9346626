package relay

import (
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Listener is a listening socket whose connections the loops accept themselves (Listen).
type Listener struct {
	r      *Relay
	fd     int
	id     int32
	acc    Acceptor
	closed atomic.Bool
	once   sync.Once
}

// lnState is one loop's view of a listener; only that loop touches paused and delay.
type lnState struct {
	ln     *Listener
	paused bool          // out of the loop's set after an accept error
	delay  time.Duration // how long the last pause was
}

const (
	// acceptTries bounds the accept calls one listener event makes when accepts fail with
	// the client's errors (a connection reset while it waited), which are retried.
	acceptTries = 32
	// The pause after an accept error that is not the client's (EMFILE and the like):
	// doubling from the first to the last while the errors go on.
	firstPause = 5 * time.Millisecond
	lastPause  = time.Second
)

// Listen makes the loops accept the connections of fd, a non-blocking listening TCP socket,
// which the Listener owns from now on (Close closes it; so does Listen when it fails). Each
// loop has the socket in its epoll set with EPOLLEXCLUSIVE, so a new connection wakes one
// loop, which accepts it, asks acc what to do with it, and adopts it itself (see balance):
// it reads the client's first bytes, routes, dials and relays on the thread that accepted,
// with no goroutine and no hand-over between threads.
//
// Why not a goroutine per listener that accepts and hands each socket to a loop: the
// accepting goroutine is woken through Go's poller for every connection, and the hand-over
// wakes a loop thread as well, two wake-ups and a scheduler round where a loop that
// accepts needs one.
func (r *Relay) Listen(fd int, acc Acceptor) (*Listener, error) {
	ln := &Listener{r: r, fd: fd, id: r.lnIDs.Add(1), acc: acc}
	for _, l := range r.loops {
		l.mu.Lock()
		l.lns[ln.id] = &lnState{ln: ln}
		l.mu.Unlock()
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: listenData(ln.id)}
		if l.ring != nil {
			// On the loop, its ring's one submitter. (Close, posted after, comes after.)
			if !l.post(func() { l.ctl(unix.EPOLL_CTL_ADD, fd, &ev) }) {
				ln.Close()
				return nil, errClosed
			}
			continue
		}
		if err := rawEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			ln.Close()
			return nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	return ln, nil
}

// listenData is the epoll data of a listener's events: negative, below kickData.
func listenData(id int32) int32 { return -1 - id }

// Close stops accepting and closes the socket. When it returns, no loop accepts from the
// listener any more and no Acceptor call is running. It must not be called from a loop (a
// Router's or Acceptor's method).
func (ln *Listener) Close() error {
	var err error
	ln.once.Do(func() {
		ln.closed.Store(true)
		var wg sync.WaitGroup
		for _, l := range ln.r.loops {
			wg.Add(1)
			if !l.post(func() { l.dropListener(ln); wg.Done() }) {
				wg.Done() // the loop is gone
			}
		}
		wg.Wait()
		err = unix.Close(ln.fd)
	})
	return err
}

// dropListener takes ln out of the loop, on the loop.
func (l *loop) dropListener(ln *Listener) {
	l.mu.Lock()
	st := l.lns[ln.id]
	delete(l.lns, ln.id)
	l.mu.Unlock()
	if st != nil && !st.paused {
		// ENOENT when Listen's registration failed on this loop: nothing to take out.
		l.ctl(unix.EPOLL_CTL_DEL, ln.fd, &unix.EpollEvent{Fd: listenData(ln.id)})
	}
	if st != nil {
		l.sweep(ln)
	}
}

// sweepMax bounds the connections one loop takes off a listener it drops: more than the
// wake-ups it can have swallowed (one per wait), few enough that a flood of new
// connections cannot keep the loop here.
const sweepMax = 64

// sweep accepts the connections waiting on ln, which this loop has just taken out of its
// set, and adopts them as accept does. Why: a listener's wake-ups are exclusive
// (EPOLLEXCLUSIVE), so the connection that woke this loop as Close began (the loop then
// skips the closed listener) woke no other waiter: no other loop of this relay and, in a
// live upgrade, none of the new process's, whose loops wait on the same socket behind the
// old ones. Left in the queue, it would wait until the next connection woke someone: a
// lone client's handshake timed out during an upgrade (e2e TestUpgradeEstablished). Once
// the loop is out of the socket's wait queue, later connections wake the others.
func (l *loop) sweep(ln *Listener) {
	for range sweepMax {
		fd, peer, err := accept4(ln.fd)
		switch err {
		case nil:
		case unix.EINTR, unix.ECONNABORTED, unix.EPROTO:
			continue
		default:
			return // EAGAIN: none waits; anything else is for whoever still listens
		}
		if rt, tag, deadline, ok := ln.acc.Accepted(fd, peer); ok {
			l.adoptFD(fd, deadline, rt, tag)
		}
	}
}

// accept takes one connection waiting on a listener and adopts it.
//
// One per event, not until the queue is empty: the listener is level-triggered, so while
// more connections wait, the loop's next wait (due after this turn anyway) reports it
// again, and the pairs this loop runs get their turn between two accepts under a flood of
// new connections. Draining the queue would end with an accept that finds nothing, and
// that is not free: the kernel makes the new socket's inode and file before it looks at
// the queue and frees them after, on the way back to user space: 3.4–4.4 µs a call on the
// bench machine's kernel, twenty times a getpid. A loop that drained made 1.6–1.9 accept4
// calls per connection in the bench's conns shape, and one per event makes 1.00, for 3–4
// µs less CPU per connection (bench/results/notes.md).
func (l *loop) accept(st *lnState) {
	ln := st.ln
	for range acceptTries {
		if ln.closed.Load() || st.paused {
			return
		}
		fd, peer, err := accept4(ln.fd)
		switch err {
		case nil:
		case unix.EAGAIN:
			st.delay = 0
			return // another loop took it, or there was none
		case unix.EINTR, unix.ECONNABORTED, unix.EPROTO, unix.ENETDOWN, unix.ENOPROTOOPT,
			unix.EHOSTDOWN, unix.ENONET, unix.EHOSTUNREACH, unix.EOPNOTSUPP, unix.ENETUNREACH:
			continue // that client's trouble (accept(2) says: retry)
		default:
			ln.acc.Failed(os.NewSyscallError("accept4", err))
			l.pause(st)
			return
		}
		st.delay = 0
		if rt, tag, deadline, ok := ln.acc.Accepted(fd, peer); ok {
			if to := l.balance(); to == l || !to.post(func() { to.adoptFD(fd, deadline, rt, tag) }) {
				l.adoptFD(fd, deadline, rt, tag)
			}
		}
		return
	}
}

// balance returns the loop a connection accepted here should go to: this one, unless it
// has more pairs than the least busy loop by more than a sixteenth. Why: EPOLLEXCLUSIVE
// wakes the loop that waits first in the listener's queue, so at a low rate of new
// connections one loop would accept them all, and long-lived database sessions would
// never spread over the CPUs. Moving one costs a wake-up of the other loop.
func (l *loop) balance() *loop {
	n := l.count.Load()
	least, m := l, n
	for _, o := range l.r.loops {
		if c := o.count.Load(); c < m {
			least, m = o, c
		}
	}
	if n > m+1+m/16 {
		return least
	}
	return l
}

// pause takes a listener out of the loop's set for a while after an accept error that
// would come back at once (EMFILE: a level-triggered listener would spin the loop).
func (l *loop) pause(st *lnState) {
	l.ctl(unix.EPOLL_CTL_DEL, st.ln.fd, &unix.EpollEvent{Fd: listenData(st.ln.id)})
	st.paused = true
	st.delay = min(max(2*st.delay, firstPause), lastPause)
	time.AfterFunc(st.delay, func() { l.post(func() { l.resume(st) }) })
}

func (l *loop) resume(st *lnState) {
	l.mu.Lock()
	current := l.lns[st.ln.id] == st
	l.mu.Unlock()
	if !current || !st.paused {
		return // closed meanwhile
	}
	st.paused = false
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: listenData(st.ln.id)}
	if err := l.ctl(unix.EPOLL_CTL_ADD, st.ln.fd, &ev); err != nil {
		st.ln.acc.Failed(os.NewSyscallError("epoll_ctl", err))
		l.pause(st)
	}
}

// accept4 accepts one connection: a non-blocking, close-on-exec socket and its peer.
func accept4(lfd int) (int, netip.AddrPort, error) {
	var sa unix.RawSockaddrAny
	n := uint32(unsafe.Sizeof(sa))
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, errno(e)
	}
	return int(r), sockaddrAddrPort(&sa), nil
}

// sockaddrAddrPort converts what accept4 wrote. IPv4-mapped IPv6 addresses are unmapped,
// as Go's net package shows them.
func sockaddrAddrPort(sa *unix.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case unix.AF_INET:
		s := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		pb := (*[2]byte)(unsafe.Pointer(&s.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(pb[0])<<8|uint16(pb[1]))
	case unix.AF_INET6:
		s := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		pb := (*[2]byte)(unsafe.Pointer(&s.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(s.Addr).Unmap(), uint16(pb[0])<<8|uint16(pb[1]))
	}
	return netip.AddrPort{}
}
