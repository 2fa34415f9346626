//go:build !linux

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// errNotLinux is what listening fails with off Linux: accepting (accept4 on the relay's
// epoll loops) and relaying are built on Linux system calls. The package compiles
// elsewhere so that snigate builds and vets there, and Apply reports this error.
var errNotLinux = errors.New("proxy: snigate's data plane runs on Linux only (accept4, epoll and splice)")

func listenFD(*net.TCPListener) (int, error) { return -1, errNotLinux }

func closeReset(fd int) { syscall.Close(fd) }

func sockName(int) (net.Addr, error) { return nil, errNotLinux }
