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

// setKeepAliveTimes sets the client side's keepalive idle time, probe interval and probe
// count. serveFD uses it alone to put back what net.FileConn changed: Go's defaults of
// 15 s, 15 s and 9 probes (FileConn also turns SO_KEEPALIVE and TCP_NODELAY on, which the
// listener had set already).
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
