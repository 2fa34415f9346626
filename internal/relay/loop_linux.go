package relay

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
		if err := l.rc.Read(l.wake); err != nil {
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

// repollMin and repollMax bound how a wake-up asks its epoll set again before parking.
// Under many busy connections new events arrive while a batch is handled: asking again
// costs one epoll_wait, while parking costs a scheduler round and Go's own epoll_wait
// before the next turn. A batch of fewer than repollMin events (one connection's
// exchange) parks at once, as the new asking would mostly come back empty; repollMax
// turns in a row let the runtime's other goroutines (accepts, timers) in between.
const (
	repollMin = 2
	repollMax = 8
)

// wake is the loop's Go-poller callback: turns until the set is quiet, then parks (false).
func (l *loop) wake(uintptr) bool {
	for i := 1; ; i++ {
		n, more := l.turn()
		if more {
			// More is waiting (a full batch, pairs with bytes left): come back after the
			// runtime has run what else is runnable, including its own network poller.
			l.kick()
			return false
		}
		if n < repollMin || i == repollMax {
			return false
		}
	}
}

// turn handles one batch of events, the pairs Stop asked to end and the pairs left over
// from the previous turn. It returns how many events the batch had, and whether work is
// left that needs another turn soon.
func (l *loop) turn() (int, bool) {
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
	return n, n == len(l.events) || len(l.ready) > 0 || err != nil
}
