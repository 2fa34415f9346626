package handover

import (
	"os"

	"golang.org/x/sys/unix"
)

// socketpair makes a close-on-exec SOCK_SEQPACKET pair: each message one datagram, its fds
// with it.
func socketpair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fds, os.NewSyscallError("socketpair", err)
	}
	return fds, nil
}
