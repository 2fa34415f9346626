package fdconn

import (
	"os"

	"golang.org/x/sys/unix"
)

// socket opens a non-blocking, close-on-exec TCP socket in one system call.
func socket(family int) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	return fd, nil
}
