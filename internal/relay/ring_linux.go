package relay

// A loop can wait on an io_uring instead of its epoll set (WithIOURing). Every socket the
// loop watches then has a multishot POLL_ADD on the loop's ring (a listener a one-shot
// one, armed again after each completion, so that it reports a backlog as epoll's level
// triggering does); registering is a queued submission, and the loop's wait is one
// io_uring_enter that submits what is queued and collects the completions, which become
// the epoll events the loop's turn reads. Accept, reads, writes, connects and closes stay
// the same system calls as on the epoll path.
//
// What it buys is the wait. After a wake-up that brought two completions or more, the
// loop waits for up to minWaitCount of them or minWaitUsec µs (the ring's min_wait, Linux
// 6.12), so a busy loop sleeps and wakes less; epoll has no such wait. A lone connection's
// messages never wait: one completion ends a wait that did not follow a busy wake-up.
// Measured on the benchmark machine against the epoll loop, 94 interleaved comparisons of
// each shape over 75 minutes (bench/results/notes.md, "the loop's wait on an io_uring"):
// under 50 connections of small requests, CPU per request ×0.91 (in none of the 94 more
// than ×1.05) and requests/s ×1.05; per new connection CPU ×0.97 and rate ×1.05, but in the
// machine's slow phases (11 of the 94) ×1.12 the CPU and ×0.79 the rate. Latency even.
// Without the batched wait the ring is even with epoll. That slow-phase loss is why it is
// not the default: it pays where connections are long-lived and busy (database sessions).
//
// Why written here: the Go io_uring libraries are not among the modules this project can
// use, and the loop needs only setup, two mapped rings and two opcodes.
//
// Where it is refused, the loop waits on epoll: containerd 2.0's and Docker's default
// seccomp profiles refuse the io_uring system calls, some distributions disable them
// (kernel.io_uring_disabled), and min_wait needs 6.12. newRing fails on any of these, and
// Relay.Wait says why.

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	minWaitCount = 16
	minWaitUsec  = 20 // 10 µs gained nothing, 50 µs cost ×0.91 of the connection rate
	batchAfter   = 2  // completions in a wake-up that make the next wait a batched one
	batchKeep    = 4  // and in a batched wait's, to batch again

	ringEntries = 1024
)

// io_uring ABI (include/uapi/linux/io_uring.h).
const (
	opPollAdd     = 6
	opAsyncCancel = 14

	setupCQSize       = 1 << 3
	setupSubmitAll    = 1 << 7
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13
	setupNoSQArray    = 1 << 16

	featMinTimeout = 1 << 15

	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3

	cqeFMore = 1 << 1

	sqeCQESkipSuccess = 1 << 6

	pollAddMulti      = 1 << 0
	cancelAll         = 1 << 0
	sqeSize           = 64
	sqesOffset        = 0x10000000
	sysIOURingSetup   = 425
	sysIOURingEnter   = 426
	udRemove          = ^uint64(0) // the completions of removals and updates
	ringPollEventMask = 0xffff
)

type ringSQE struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32
	userData uint64
	bufIndex uint16
	person   uint16
	fileIdx  uint32
	addr3    uint64
	pad      uint64
}

type ringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  [10]uint32 // head, tail, ring_mask, ring_entries, flags, dropped, array, resv1, user_addr (2)
	cqOff                                                                  [10]uint32 // head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1, user_addr (2)
}

type geteventsArg struct {
	sigmask   uint64
	sigmaskSz uint32
	minWait   uint32
	ts        uint64
}

// ring is a loop's io_uring. Only the loop's goroutine, locked to the thread that made the
// ring (SINGLE_ISSUER), touches it.
type ring struct {
	fd              int
	mem, sqMem      []byte
	sqHead, sqTail  *uint32
	sqMask, entries uint32
	sqes            []ringSQE
	cqHead, cqTail  *uint32
	cqMask          uint32
	cqes            []ringCQE
	tail, submitted uint32
	lastBatch       int
	batched         bool // the last wait was a batched one

	ts  unix.Timespec
	arg geteventsArg
	// regs and slots are the polls armed, by user data (an epoll event's Fd and Pad): what a
	// poll that ended is armed again with, and which sockets a close must take off first.
	// A pair's two sockets are in slots, by the pair's slot (16 bytes each, no map entry
	// per socket); listeners and the eventfd in regs.
	slots [][2]ringReg
	regs  map[uint64]*ringReg
}

type ringReg struct {
	fd     int32
	events uint32
	gen    uint32 // the pair's generation (slots only)
	on     bool
}

// reg is the registration of user data ud, nil when none is armed.
func (r *ring) reg(ud uint64) *ringReg {
	data := int32(uint32(ud))
	if data < 0 {
		return r.regs[ud]
	}
	slot, side := int(data>>1), data&1
	if slot >= len(r.slots) {
		return nil
	}
	if g := &r.slots[slot][side]; g.on && g.gen == uint32(ud>>32) {
		return g
	}
	return nil
}

// set records an armed poll.
func (r *ring) set(ud uint64, fd int, events uint32) {
	data := int32(uint32(ud))
	g := ringReg{fd: int32(fd), events: events, gen: uint32(ud >> 32), on: true}
	if data < 0 {
		r.regs[ud] = &g
		return
	}
	slot := int(data >> 1)
	for slot >= len(r.slots) {
		r.slots = append(r.slots, [2]ringReg{})
	}
	r.slots[slot][data&1] = g
}

// forget drops the record of the poll with user data ud.
func (r *ring) forget(ud uint64) {
	if data := int32(uint32(ud)); data < 0 {
		delete(r.regs, ud)
	} else if g := r.reg(ud); g != nil {
		*g = ringReg{}
	}
}

var (
	errNoMinWait = errors.New("io_uring: the kernel has no min_wait (Linux 6.12 or later)")
	errClosed    = errors.New("relay: closed")
)

// newRing makes a ring on the calling thread, which becomes its only submitter.
func newRing() (*ring, error) {
	var p ringParams
	p.flags = setupCQSize | setupSubmitAll | setupSingleIssuer | setupDeferTaskrun | setupNoSQArray
	p.cqEntries = ringEntries * 8
	fd, _, e := syscall.Syscall(sysIOURingSetup, ringEntries, uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, os.NewSyscallError("io_uring_setup", e)
	}
	r := &ring{fd: int(fd), entries: p.sqEntries, regs: map[uint64]*ringReg{}}
	if p.features&featMinTimeout == 0 {
		r.close()
		return nil, errNoMinWait
	}
	var err error
	cqSize := p.cqOff[5] + p.cqEntries*uint32(unsafe.Sizeof(ringCQE{}))
	if r.mem, err = unix.Mmap(r.fd, 0, int(cqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, os.NewSyscallError("mmap", err)
	}
	base := unsafe.Pointer(&r.mem[0])
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Add(base, off)) }
	r.sqHead, r.sqTail, r.sqMask = u32(p.sqOff[0]), u32(p.sqOff[1]), *u32(p.sqOff[2])
	r.cqHead, r.cqTail, r.cqMask = u32(p.cqOff[0]), u32(p.cqOff[1]), *u32(p.cqOff[2])
	r.cqes = unsafe.Slice((*ringCQE)(unsafe.Add(base, p.cqOff[5])), p.cqEntries)
	if r.sqMem, err = unix.Mmap(r.fd, sqesOffset, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, os.NewSyscallError("mmap", err)
	}
	r.sqes = unsafe.Slice((*ringSQE)(unsafe.Pointer(&r.sqMem[0])), p.sqEntries)
	r.tail = *r.sqTail
	r.submitted = r.tail
	r.arg.ts = uint64(uintptr(unsafe.Pointer(&r.ts)))
	return r, nil
}

func (r *ring) close() {
	if r.sqMem != nil {
		unix.Munmap(r.sqMem)
	}
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
	unix.Close(r.fd)
}

func (r *ring) get() *ringSQE {
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.entries {
		r.submit() // full: submit what is queued
	}
	s := &r.sqes[r.tail&r.sqMask]
	*s = ringSQE{}
	r.tail++
	return s
}

// add arms a poll for events on fd, reported with user data ud. Listeners get a one-shot
// poll (see ring's package note).
func (r *ring) add(fd int, events uint32, ud uint64) {
	events = ringEvents(events)
	r.set(ud, fd, events)
	r.arm(fd, events, ud)
}

func (r *ring) arm(fd int, events uint32, ud uint64) {
	s := r.get()
	s.opcode, s.fd, s.opFlags, s.userData = opPollAdd, int32(fd), events, ud
	if int32(uint32(ud)) >= 0 || int32(uint32(ud)) == kickData {
		s.len = pollAddMulti // a pair's socket or the loop's eventfd
	}
}

// ringEvents are the poll events of an epoll registration: the events alone. A multishot
// poll reports each wake-up once, as an edge-triggered epoll set does, without EPOLLET;
// the prototype that measured the gain set neither EPOLLET nor EPOLLEXCLUSIVE (not measured
// with them; several loops on one listener then all wake for a connection, and those that
// find none pay an accept).
func ringEvents(events uint32) uint32 {
	return events &^ (unix.EPOLLET | unix.EPOLLEXCLUSIVE)
}

// update changes the events of the poll with user data ud: it cancels the poll and arms a
// new one. (POLL_REMOVE's own update fails with EALREADY while a wake-up of the poll is
// being handled, and the poll then keeps its old events: a socket waiting for EPOLLOUT
// would wait for good. A cancel does not fail that way.) The new poll reports the events
// that hold already, as an epoll_ctl MOD does.
func (r *ring) update(ud uint64, events uint32) {
	reg := r.reg(ud)
	if reg == nil {
		return
	}
	reg.events = ringEvents(events)
	r.cancel(ud)
	r.arm(int(reg.fd), reg.events, ud)
}

// remove takes the poll with user data ud off the ring, if there is one. The ring holds a
// reference to the socket until the cancel is submitted (at the loop's next wait), so a
// socket closed meanwhile sends its FIN or reset then, not at its close.
func (r *ring) remove(ud uint64) {
	if r.reg(ud) == nil {
		return
	}
	r.forget(ud)
	r.cancel(ud)
}

// cancel cancels every poll with user data ud; their last completions say ECANCELED. The
// cancel itself completes without a completion when it succeeds (CQE_SKIP_SUCCESS): one
// completion fewer for the loop to wake for and skip.
func (r *ring) cancel(ud uint64) {
	s := r.get()
	s.opcode, s.flags, s.fd, s.addr, s.opFlags, s.userData = opAsyncCancel, sqeCQESkipSuccess, -1, ud, cancelAll, udRemove
}

// submit submits what is queued and runs the completions due, without waiting.
func (r *ring) submit() error {
	atomic.StoreUint32(r.sqTail, r.tail)
	n := uintptr(r.tail - r.submitted)
	_, _, e := syscall.RawSyscall6(sysIOURingEnter, uintptr(r.fd), n, 0, enterGetEvents, 0, 0)
	r.submitted = r.tail
	return enterErr(e)
}

// wait submits what is queued and waits up to msec ms for a completion; after a busy
// wake-up for up to minWaitCount of them or minWaitUsec µs. msec < 0: without a time
// limit, as an ordinary system call (the runtime takes the loop's P back meanwhile).
func (r *ring) wait(msec int) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	n := uintptr(r.tail - r.submitted)
	var e syscall.Errno
	if msec < 0 {
		_, _, e = syscall.Syscall6(sysIOURingEnter, uintptr(r.fd), n, 1, enterGetEvents, 0, 0)
	} else {
		r.ts = unix.Timespec{Nsec: int64(msec) * 1e6}
		want := uintptr(1)
		r.arg.minWait = 0
		// Batch after a busy wake-up, but not after a batched wait that brought few: the
		// events come too slowly to fill a batch, and waiting for them only delays those
		// that came.
		r.batched = r.lastBatch >= batchAfter && !(r.batched && r.lastBatch < batchKeep)
		if r.batched {
			want, r.arg.minWait = minWaitCount, minWaitUsec
		}
		_, _, e = syscall.RawSyscall6(sysIOURingEnter, uintptr(r.fd), n, want, enterGetEvents|enterExtArg,
			uintptr(unsafe.Pointer(&r.arg)), unsafe.Sizeof(r.arg))
	}
	r.submitted = r.tail
	return enterErr(e)
}

func enterErr(e syscall.Errno) error {
	switch e {
	case 0, unix.ETIME:
		return nil
	case unix.EINTR:
		return e // a signal, the runtime's preemption among them
	}
	return os.NewSyscallError("io_uring_enter", e)
}

func (r *ring) pending() bool { return *r.cqHead != atomic.LoadUint32(r.cqTail) }

// reap moves up to len(evs) completions into evs as epoll events, n of them, and reports
// how many completions it took off the ring, the ring's own among them (a cancelled
// poll's last one): a wake-up that brought only those is not an idle one. A poll that
// ended (a listener's one-shot one, or a multishot one the kernel stopped) is armed
// again; one that failed is reported through failed.
func (r *ring) reap(evs []unix.EpollEvent, failed func(ud uint64, err error)) (n, taken int) {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail)
	start := head
	for head != tail && n < len(evs) {
		c := r.cqes[head&r.cqMask]
		head++
		if c.userData == udRemove || c.res == -int32(unix.ECANCELED) {
			continue // a failed cancel's completion, or a poll's last one after its cancel
		}
		reg := r.reg(c.userData)
		if reg == nil {
			continue // removed meanwhile: a late completion, or the removal's -ECANCELED
		}
		if c.res < 0 {
			r.forget(c.userData)
			failed(c.userData, os.NewSyscallError("io_uring poll", syscall.Errno(-c.res)))
			continue
		}
		if c.flags&cqeFMore == 0 {
			r.arm(int(reg.fd), reg.events, c.userData)
		}
		evs[n] = unix.EpollEvent{Events: uint32(c.res) & ringPollEventMask, Fd: int32(uint32(c.userData)), Pad: int32(c.userData >> 32)}
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	r.lastBatch = n
	return n, int(head - start)
}

// ringUD is the user data of a poll: an epoll event's data, Fd in the low half.
func ringUD(data, pad int32) uint64 { return uint64(uint32(pad))<<32 | uint64(uint32(data)) }

// startRing makes the loop's ring if it was asked for one, on the loop's goroutine, which
// it locks to its thread for good: the ring's completions are run by the thread that
// submits. It reports why the loop waits on epoll instead, or nil.
func (l *loop) startRing() error {
	runtime.LockOSThread()
	r, err := newRing()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	r.add(l.efd, unix.EPOLLIN, ringUD(kickData, 0))
	l.ring = r
	return nil
}

// ctl puts fd in the loop's epoll set or on its ring, changes its events or takes it out.
// On the ring it must run on the loop (post it from elsewhere; see Pair.register).
func (l *loop) ctl(op, fd int, ev *unix.EpollEvent) error {
	if l.ring == nil {
		return rawEpollCtl(l.epfd, op, fd, ev)
	}
	ud := ringUD(ev.Fd, ev.Pad)
	switch op {
	case unix.EPOLL_CTL_ADD:
		l.ring.add(fd, ev.Events, ud)
	case unix.EPOLL_CTL_MOD:
		l.ring.update(ud, ev.Events)
	case unix.EPOLL_CTL_DEL:
		l.ring.remove(ud)
	}
	return nil
}

// pollFailed ends the pair whose poll failed; a listener's is reported to its Acceptor
// and paused, as a failed accept is.
func (l *loop) pollFailed(ud uint64, err error) {
	data, gen := int32(uint32(ud)), uint32(ud>>32)
	if data == kickData {
		l.ring.add(l.efd, unix.EPOLLIN, ud) // nothing else wakes the loop: arm it again
		return
	}
	if data < 0 {
		l.mu.Lock()
		st := l.lns[-1-data]
		l.mu.Unlock()
		if st != nil && !st.paused {
			st.ln.acc.Failed(err)
			l.pause(st)
		}
		return
	}
	l.mu.Lock()
	p := l.pairs[data>>1]
	l.mu.Unlock()
	if p != nil && p.gen == gen {
		p.stopWith(err, "")
	}
}
