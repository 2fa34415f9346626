//go:build !linux

package fdconn

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// socket opens a non-blocking, close-on-exec TCP socket. Without SOCK_NONBLOCK and
// SOCK_CLOEXEC the flags are set after; ForkLock keeps a concurrent exec from inheriting it
// in between.
func socket(family int) (int, error) {
	syscall.ForkLock.RLock()
	fd, err := unix.Socket(family, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("fcntl", err)
	}
	return fd, nil
}
