package proxy

import (
	"time"

	"golang.org/x/sys/unix"
)

// setListenerSockopts enables TCP keepalive on a listening socket. Linux copies these
// options into every socket accepted from it, which saves per-connection syscalls.
func setListenerSockopts(fd int, keepAlive time.Duration) error {
	if keepAlive < 0 {
		return nil
	}
	secs := int(keepAlive / time.Second)
	if secs < 1 {
		secs = 1
	}
	for _, o := range []struct{ level, opt, val int }{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, max(secs/2, 1)},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 4},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			return err
		}
	}
	return nil
}

// setDialSockopts enables TCP keepalive on a backend socket with the given idle time; the
// probe interval and count stay at the kernel's defaults.
func setDialSockopts(fd int, keepAlive time.Duration) error {
	if keepAlive < 0 {
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1); err != nil {
		return err
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, max(int(keepAlive/time.Second), 1))
}
