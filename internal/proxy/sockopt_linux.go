package proxy

import (
	"time"

	"golang.org/x/sys/unix"
)

// setListenerSockopts sets what every client socket needs on the listening socket, which
// Linux copies into each socket accepted from it: that saves the system calls per
// connection. TCP_NODELAY because the proxy forwards what it reads as it reads it, and
// keepalive (unless keepAlive is negative) to find clients that vanished.
func setListenerSockopts(fd int, keepAlive time.Duration) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return err
	}
	if keepAlive < 0 {
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1); err != nil {
		return err
	}
	return setKeepAliveTimes(fd, keepAlive)
}

// setKeepAliveTimes sets the client side's keepalive idle time, probe interval (half of it)
// and probe count (4), so that a vanished client is found within twice the idle time.
func setKeepAliveTimes(fd int, keepAlive time.Duration) error {
	secs := max(int(keepAlive/time.Second), 1)
	for _, o := range []struct{ opt, val int }{
		{unix.TCP_KEEPIDLE, secs},
		{unix.TCP_KEEPINTVL, max(secs/2, 1)},
		{unix.TCP_KEEPCNT, 4},
	} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, o.opt, o.val); err != nil {
			return err
		}
	}
	return nil
}
