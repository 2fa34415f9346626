package fdconn_test

import "golang.org/x/sys/unix"

// acceptNonblock accepts a non-blocking, close-on-exec socket from ln in one system call,
// as the relay's loops do.
func acceptNonblock(ln int) (int, error) {
	fd, _, err := unix.Accept4(ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	return fd, err
}
