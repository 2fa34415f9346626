//go:build !linux

package fdconn_test

import "golang.org/x/sys/unix"

// acceptNonblock accepts a socket from ln and makes it non-blocking and close-on-exec:
// accept4 is not in every unix (Darwin has none).
func acceptNonblock(ln int) (int, error) {
	fd, _, err := unix.Accept(ln)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
