package proxy

import (
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawListener is a listening socket accepted from without Go's net package: accepted sockets
// are plain non-blocking fds with their peer's address, which the relay adopts directly.
// The socket itself still waits in Go's poller (it is an *os.File), so the accept loop is a
// parked goroutine between connections.
type rawListener struct {
	f      *os.File
	rc     syscall.RawConn
	addr   net.Addr
	closed atomic.Bool

	// What one accept4 call returns, kept here with the callback that fills them so that
	// accepting allocates nothing (one goroutine accepts per listener).
	acceptFn func(uintptr) bool
	sa       unix.RawSockaddrAny
	fd       int
	aerr     error
}

// newRawListener takes ln's socket over (ln is closed; the socket stays open and bound).
func newRawListener(ln *net.TCPListener) (*rawListener, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	addr := ln.Addr()
	ln.Close() // the duplicate keeps the socket open
	// The duplicate shares the original's O_NONBLOCK, so os.NewFile puts it in Go's poller.
	f := os.NewFile(uintptr(fd), "listener "+addr.String())
	frc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &rawListener{f: f, rc: frc, addr: addr}
	l.acceptFn = l.accept4
	return l, nil
}

func (l *rawListener) Close() error {
	l.closed.Store(true)
	return l.f.Close()
}

func (l *rawListener) Addr() net.Addr                        { return l.addr }
func (l *rawListener) SyscallConn() (syscall.RawConn, error) { return l.rc, nil }

// accept returns the next connection's socket (non-blocking, close-on-exec) and its peer
// address, parking until one comes. After Close it returns an error that is os.ErrClosed.
// Only one goroutine may call it.
func (l *rawListener) accept() (int, netip.AddrPort, error) {
	l.fd, l.aerr = -1, nil
	if err := l.rc.Read(l.acceptFn); err != nil {
		if l.closed.Load() {
			err = os.ErrClosed // the poller's own error for it is not exported
		}
		return -1, netip.AddrPort{}, err
	}
	if l.aerr != nil {
		return -1, netip.AddrPort{}, l.aerr
	}
	return l.fd, sockaddrAddrPort(&l.sa), nil
}

// accept4 is accept's callback: true when it has a socket or an error, false to wait.
func (l *rawListener) accept4(s uintptr) bool {
	for {
		n := uint32(unsafe.Sizeof(l.sa))
		r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, s, uintptr(unsafe.Pointer(&l.sa)), uintptr(unsafe.Pointer(&n)),
			unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
			l.fd = int(r)
			return true
		case unix.EAGAIN:
			return false // wait in the poller
		case unix.EINTR, unix.ECONNABORTED:
			continue // that one gave up before it was accepted: take the next
		default:
			l.aerr = os.NewSyscallError("accept4", e)
			return true
		}
	}
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

// closeReset closes an accepted socket with a reset (SO_LINGER 0): for connections the
// proxy drops before reading anything, such as those to a port being removed.
func closeReset(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	unix.Close(fd)
}

// fdConn wraps an accepted socket in a *net.TCPConn, for the paths that need Go's net
// package (terminated TLS, HTTP, PostgreSQL's negotiation). The fd is closed: the conn holds
// a duplicate.
func fdConn(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return nc.(*net.TCPConn), nil
}
