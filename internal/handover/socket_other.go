//go:build !linux

package handover

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketpair makes a SOCK_SEQPACKET pair, close-on-exec once made (ForkLock keeps an exec
// from inheriting it in between). Live upgrades run on Linux only (the relay does), but the
// protocol builds and is tested everywhere.
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		return fds, os.NewSyscallError("socketpair", err)
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	return fds, nil
}
