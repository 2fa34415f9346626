package proxy

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// listenFD takes ln's socket over for the relay's loops, which accept from it themselves
// (relay.Listen): ln is closed, the duplicate returned stays open and bound. The duplicate
// shares the original's O_NONBLOCK, as accepting on a loop needs.
func listenFD(ln *net.TCPListener) (int, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	ln.Close() // the duplicate keeps the socket open
	return fd, nil
}

// closeReset closes an accepted socket with a reset (SO_LINGER 0): for connections the
// proxy drops before reading anything, such as those to a port being removed.
func closeReset(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	unix.Close(fd)
}

// sockName is the address a socket is bound to.
func sockName(fd int) (net.Addr, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, os.NewSyscallError("getsockname", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}, nil
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}, nil
	}
	return nil, fmt.Errorf("socket %d: not a TCP socket", fd)
}
