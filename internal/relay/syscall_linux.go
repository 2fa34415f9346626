package relay

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls of the data path are made with RawSyscall: every one of them is on a
// non-blocking socket, pipe or epoll set and returns at once, so the scheduler hand-off of
// syscall.Syscall is pure cost, and worse, its entersyscall wakes the runtime's sysmon
// thread whenever the process was idle: a futex wake and a context switch on every message
// of a quiet connection (measured: ~8 % of the relay's CPU in a ping-pong), after which
// sysmon polls every 20 µs for at least a millisecond. One such call per connection is
// enough to keep it polling under load.

// ioRetry makes one read-like or write-like system call on b (trap: recvfrom, sendto, read
// or write; flags is recvfrom's and sendto's, which read and write ignore), again when a
// signal interrupted it.
func ioRetry(trap uintptr, fd int, b []byte, flags uintptr) (int, error) {
	for {
		r, _, e := unix.RawSyscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), flags, 0, 0)
		if e != unix.EINTR {
			return int(r), errno(e)
		}
	}
}

// recvRetry and sendRetry read and write the relayed sockets with recvfrom and sendto rather
// than read and write, which go through the VFS layer first (vfs_read/vfs_write,
// rw_verify_area, security_file_permission, fdget_pos): about 7 % of the proxy's CPU under
// 50 busy connections (perf). sendto also takes MSG_NOSIGNAL: a write to a reset peer fails
// with EPIPE without raising SIGPIPE for the runtime to ignore.
func recvRetry(fd int, b []byte) (int, error) { return ioRetry(unix.SYS_RECVFROM, fd, b, 0) }

func sendRetry(fd int, b []byte) (int, error) {
	return ioRetry(unix.SYS_SENDTO, fd, b, unix.MSG_NOSIGNAL)
}

// readRetry and writeRetry are for the eventfds, which are not sockets.
func readRetry(fd int, b []byte) (int, error) { return ioRetry(unix.SYS_READ, fd, b, 0) }

func writeRetry(fd int, b []byte) (int, error) { return ioRetry(unix.SYS_WRITE, fd, b, 0) }

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
	return rawSetsockoptPtr(fd, level, opt, unsafe.Pointer(&val), 4)
}

func rawSetsockoptPtr(fd, level, opt int, val unsafe.Pointer, size uintptr) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(val), size, 0)
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

// rawLingerZero makes the socket's close send a reset and drop what it has not sent.
func rawLingerZero(fd int) {
	l := unix.Linger{Onoff: 1, Linger: 0}
	rawSetsockoptPtr(fd, unix.SOL_SOCKET, unix.SO_LINGER, unsafe.Pointer(&l), unsafe.Sizeof(l))
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

// epollWaitRaw waits at most msec milliseconds for events without telling the runtime (see
// loop.run for why that is safe there and nowhere else).
func epollWaitRaw(epfd int, evs []unix.EpollEvent, msec int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), uintptr(msec), 0, 0)
	return int(r), errno(e)
}

// epollWait waits for events as an ordinary blocking system call (msec -1: no limit): the
// runtime may give the goroutine's P to others meanwhile.
func epollWait(epfd int, evs []unix.EpollEvent, msec int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), uintptr(msec), 0, 0)
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
