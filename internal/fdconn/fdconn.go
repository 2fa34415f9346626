// Package fdconn serves a TCP socket the program already holds as a raw file descriptor (one
// accepted by the relay's loops, or one it dials itself) as a net.Conn on Go's poller:
// reads, writes and deadlines park the goroutine as net's do, and errors are *net.OpError
// as net's are (net.ErrClosed after Close, os.ErrDeadlineExceeded past a deadline).
//
//	c, err := fdconn.New(fd, peer)           // takes fd over; closing c closes it
//	c, err := fdconn.Dial(ep, timeout, setup) // socket, setup(fd), connect, wait
//
// Why not net.FileConn: it duplicates the descriptor and asks the kernel for the socket's
// type and both addresses, then sets TCP_NODELAY and Go's keepalive defaults (five
// setsockopt calls), twelve system calls in all, before a byte moves; a proxy whose
// listening socket already carries those options pays them for nothing on every connection
// it serves outside the relay (terminated TLS, HTTP, PostgreSQL's negotiation). os.NewFile on
// a non-blocking socket registers it with the same poller in two (fcntl, epoll_ctl; New
// checks the flags first with one more). Likewise net.Dialer formats and parses the address,
// and asks for SO_ERROR and both addresses after the connect, where Dial asks one
// getpeername. No library offers a net.Conn over a socket without that set-up, hence this one.
package fdconn

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is a TCP connection over a socket served by Go's poller. It implements net.Conn,
// CloseWrite and syscall.Conn.
type Conn struct {
	f      *os.File
	remote netip.AddrPort
	local  net.Addr // asked for on first use: few connections need it
}

// ErrBlocking is returned by New for a socket that is not in non-blocking mode: Go's poller
// cannot serve it, and a blocking read would hold a thread and ignore deadlines.
var ErrBlocking = errors.New("fdconn: socket is not non-blocking")

// New serves fd, a connected, non-blocking TCP socket whose peer is remote, on Go's poller.
// It takes fd over: on success closing the Conn closes it; on an error fd is left open.
func New(fd int, remote netip.AddrPort) (*Conn, error) {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		return nil, ErrBlocking
	}
	// NewFile asks for the flags once more: the check above is what makes sure it takes the
	// poller's path (it would quietly return a blocking file otherwise).
	return &Conn{f: os.NewFile(uintptr(fd), ""), remote: remote}, nil
}

// Dial connects to ep from a new non-blocking socket, calling setup on the socket first (for
// its options; nil for none), and waits for the connect until timeout (none if zero).
func Dial(ep netip.AddrPort, timeout time.Duration, setup func(fd int) error) (*Conn, error) {
	family := unix.AF_INET
	if !ep.Addr().Is4() {
		family = unix.AF_INET6
	}
	fd, err := socket(family)
	if err != nil {
		return nil, dialErr(ep, err)
	}
	if setup != nil {
		if err := setup(fd); err != nil {
			unix.Close(fd)
			return nil, dialErr(ep, err)
		}
	}
	var sa unix.Sockaddr
	if ep.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(ep.Port()), Addr: ep.Addr().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ep.Port()), Addr: ep.Addr().As16()}
	}
	// The socket joins the poller before its connect starts: the poller is edge-triggered,
	// and RawConn.Write forgets readiness from before it was called, so a connect that ends
	// between its start and the wait would otherwise never be seen to end.
	c := &Conn{f: os.NewFile(uintptr(fd), ""), remote: ep}
	if timeout > 0 {
		c.f.SetWriteDeadline(time.Now().Add(timeout))
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		c.f.Close()
		return nil, dialErr(ep, err)
	}
	var cerr error
	started := false
	err = rc.Write(func(s uintptr) bool {
		if !started {
			started = true
			switch err := unix.Connect(int(s), sa); err {
			case nil:
				return true // connected at once
			case unix.EINPROGRESS, unix.EINTR:
				// EINTR too: the connect goes on in the background. Writable says it ended,
				// but a connect to a local backend has usually ended already: the kernel
				// handles the SYN and its answer inside the call. Asking costs one
				// getpeername, which a wait would ask too; finding it connected saves the
				// goroutine a park and a wake-up through the poller.
				if _, perr := unix.Getpeername(int(s)); perr == nil {
					return true
				}
				return false
			default:
				cerr = os.NewSyscallError("connect", err)
				return true
			}
		}
		// Writable: the connect ended, or the poller woke us spuriously (it can). Having a
		// peer says connected in one system call; without one, SO_ERROR says why, or
		// nothing when the connect is still under way.
		if _, perr := unix.Getpeername(int(s)); perr == nil {
			return true
		}
		v, gerr := unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case gerr != nil:
			cerr = os.NewSyscallError("getsockopt", gerr)
		case v != 0:
			cerr = os.NewSyscallError("connect", syscall.Errno(v))
		default:
			return false // still connecting
		}
		return true
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		c.f.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = os.ErrDeadlineExceeded
		}
		return nil, dialErr(ep, err)
	}
	if timeout > 0 {
		c.f.SetWriteDeadline(time.Time{})
	}
	return c, nil
}

func dialErr(ep netip.AddrPort, err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ep), Err: err}
}

// Read reads from the socket; io.EOF when the peer has closed its side.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.f.Read(b)
	return n, c.opErr("read", err)
}

// Write writes all of b unless an error (or a deadline) stops it.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.f.Write(b)
	return n, c.opErr("write", err)
}

// Close closes the socket; reads and writes blocked on it return net.ErrClosed.
func (c *Conn) Close() error { return c.opErr("close", c.f.Close()) }

// CloseWrite shuts the sending side down (the peer reads EOF); reading goes on.
func (c *Conn) CloseWrite() error { return c.shutdown(unix.SHUT_WR) }

// CloseRead shuts the receiving side down.
func (c *Conn) CloseRead() error { return c.shutdown(unix.SHUT_RD) }

func (c *Conn) shutdown(how int) error {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return c.opErr("shutdown", err)
	}
	var serr error
	if err := rc.Control(func(s uintptr) { serr = unix.Shutdown(int(s), how) }); err != nil {
		return c.opErr("shutdown", err)
	}
	if serr != nil {
		return c.opErr("shutdown", os.NewSyscallError("shutdown", serr))
	}
	return nil
}

// CloseReset closes the socket with a reset (SO_LINGER 0) instead of an orderly FIN.
func (c *Conn) CloseReset() error {
	if rc, err := c.f.SyscallConn(); err == nil {
		rc.Control(func(s uintptr) {
			unix.SetsockoptLinger(int(s), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		})
	}
	return c.Close()
}

// LocalAddr is the socket's own address (*net.TCPAddr), asked of the kernel on first use;
// nil if it cannot say.
func (c *Conn) LocalAddr() net.Addr {
	if c.local != nil {
		return c.local
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return nil
	}
	var sa unix.Sockaddr
	rc.Control(func(s uintptr) { sa, _ = unix.Getsockname(int(s)) })
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		c.local = &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(sa.Addr).Unmap()
		c.local = net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(sa.Port)))
	default:
		return nil
	}
	return c.local
}

// RemoteAddr is the peer's address (*net.TCPAddr), as accepted or dialed.
func (c *Conn) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(c.remote) }

// RemoteAddrPort is the peer's address without an allocation.
func (c *Conn) RemoteAddrPort() netip.AddrPort { return c.remote }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error { return c.opErr("set", c.f.SetDeadline(t)) }

// SetReadDeadline sets the read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.opErr("set", c.f.SetReadDeadline(t)) }

// SetWriteDeadline sets the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetWriteDeadline(t))
}

// SyscallConn gives access to the socket (the relay takes a duplicate of it through this).
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.f.SyscallConn() }

// opErr turns an *os.File error into what net returns for the same failure, so that code
// written against net (crypto/tls, net/http, errors.Is(err, net.ErrClosed)) reads it alike.
func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, os.ErrClosed):
		err = net.ErrClosed
	case op == "read" || op == "write":
		var errno syscall.Errno
		if errors.As(err, &errno) {
			err = os.NewSyscallError(op, errno)
		}
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: net.TCPAddrFromAddrPort(c.remote), Err: err}
}

var (
	_ net.Conn     = (*Conn)(nil)
	_ syscall.Conn = (*Conn)(nil)
)
