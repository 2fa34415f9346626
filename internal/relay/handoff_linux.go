package relay

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// handoffs runs, on a goroutine of its own, what a loop must not do itself: wake a
// goroutine (Router.Release, whose socket goes on with Go's net package; a Dial's
// outcome). Why not from the loop: a goroutine made runnable there goes into the run queue
// of the loop's P, which the loop holds while it waits in the kernel, and the runtime takes
// it from there only after a spinning thread slept a few microseconds to be sure
// (runqgrab), about 50 µs with the kernel's timer slack. A write to an eventfd in Go's
// poller wakes the runtime's poller thread instead, which runs the functions on a P of its
// own.
type handoffs struct {
	efd int
	f   *os.File
	rc  syscall.RawConn

	mu    sync.Mutex
	queue []func()
	spare []func()
}

func newHandoffs() (*handoffs, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	// Non-blocking, so that os.NewFile puts it in Go's poller.
	f := os.NewFile(uintptr(efd), "relay-handoff")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &handoffs{efd: efd, f: f, rc: rc}, nil
}

// add queues fn; the first function of a batch wakes the goroutine.
func (h *handoffs) add(fn func()) {
	h.mu.Lock()
	first := len(h.queue) == 0
	h.queue = append(h.queue, fn)
	h.mu.Unlock()
	if first {
		var one = [8]byte{1}
		writeRetry(h.efd, one[:])
	}
}

func (h *handoffs) run() {
	var b [8]byte
	drain := func(fd uintptr) bool {
		_, err := readRetry(int(fd), b[:])
		return err != unix.EAGAIN // false: wait in the poller
	}
	for {
		if err := h.rc.Read(drain); err != nil {
			return // closed
		}
		h.mu.Lock()
		q := h.queue
		h.queue = h.spare[:0]
		h.mu.Unlock()
		for i, fn := range q {
			fn()
			q[i] = nil
		}
		h.spare = q[:0]
	}
}

func (h *handoffs) close() { h.f.Close() }
