//go:build !linux

package proxy

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
)

// errNotLinux is what listening fails with off Linux: accepting (accept4 into the relay's
// epoll loops) and relaying are built on Linux system calls. The package compiles
// elsewhere so that snigate builds and vets there, and Apply reports this error.
var errNotLinux = errors.New("proxy: snigate's data plane runs on Linux only (accept4, epoll and splice)")

// rawListener is the Linux listener (accept_linux.go); off Linux none is ever made.
type rawListener struct{}

func newRawListener(*net.TCPListener) (*rawListener, error) { return nil, errNotLinux }

func (*rawListener) Close() error                          { return nil }
func (*rawListener) Addr() net.Addr                        { return nil }
func (*rawListener) SyscallConn() (syscall.RawConn, error) { return nil, errNotLinux }

func (*rawListener) accept() (int, netip.AddrPort, error) {
	return -1, netip.AddrPort{}, os.ErrClosed
}

func closeReset(fd int) { syscall.Close(fd) }

func fdConn(fd int) (*net.TCPConn, error) {
	syscall.Close(fd)
	return nil, errNotLinux
}
