package fdconn_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/fdconn"
)

// accepted returns a Conn over a socket accepted from ln (as the relay's loops accept:
// accept4 with SOCK_NONBLOCK), and the peer that dialed it.
func accepted(t *testing.T, ln *net.TCPListener) (*fdconn.Conn, *net.TCPConn) {
	t.Helper()
	peer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// The dial has returned, so the connection waits in the backlog: one accept takes it.
	// (A listener's RawConn serves Control only.)
	fd := -1
	var aerr error
	if err := rc.Control(func(s uintptr) {
		fd, aerr = acceptNonblock(int(s))
	}); err != nil {
		t.Fatal(err)
	}
	if aerr != nil {
		t.Fatal("accept:", aerr)
	}
	c, err := fdconn.New(fd, peer.LocalAddr().(*net.TCPAddr).AddrPort())
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, peer
}

func listen(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestReadWriteAndHalfClose(t *testing.T) {
	c, peer := accepted(t, listen(t))
	if _, err := peer.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want ping", buf, err)
	}
	// A write larger than the socket buffers: Write must finish it, parking on the poller.
	big := bytes.Repeat([]byte("x"), 8<<20)
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(peer); got <- b }()
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("wrote %d, %v; want %d", n, err, len(big))
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; len(b) != len(big) {
		t.Fatalf("peer read %d bytes; want %d then EOF", len(b), len(big))
	}
	// Reading goes on after CloseWrite; the peer's close reads as a plain io.EOF.
	peer.Write([]byte("pong"))
	peer.CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "pong" {
		t.Fatalf("read %q, %v; want pong then EOF", b, err)
	}
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after EOF: %d, %v; want 0, io.EOF", n, err)
	}
}

func TestAddrs(t *testing.T) {
	ln := listen(t)
	c, peer := accepted(t, ln)
	if got, want := c.RemoteAddr().String(), peer.LocalAddr().String(); got != want {
		t.Errorf("RemoteAddr = %s; want %s", got, want)
	}
	if got, want := c.RemoteAddrPort(), peer.LocalAddr().(*net.TCPAddr).AddrPort(); got != want {
		t.Errorf("RemoteAddrPort = %s; want %s", got, want)
	}
	la, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok || la.String() != ln.Addr().String() {
		t.Errorf("LocalAddr = %v; want %s", c.LocalAddr(), ln.Addr())
	}
	if c.LocalAddr() != la {
		t.Error("LocalAddr asked the kernel twice; want the first answer kept")
	}
}

func TestDeadlines(t *testing.T) {
	c, peer := accepted(t, listen(t))
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("read past the deadline: %v is not a net.Error with Timeout()", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("read past the deadline: %#v; want a *net.OpError for read", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("deadline fired after %s", d)
	}
	// Clearing the deadline makes the connection usable again.
	c.SetDeadline(time.Time{})
	peer.Write([]byte("k"))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("read after clearing the deadline: %v", err)
	}
	// A write deadline in the past stops a write that cannot finish.
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
}

func TestCloseUnblocksAndReportsErrClosed(t *testing.T) {
	c, _ := accepted(t, listen(t))
	errc := make(chan error)
	go func() {
		_, err := c.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read park on the poller
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed conn: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a pending read")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v; want net.ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v; want net.ErrClosed", err)
	}
}

func TestCloseReset(t *testing.T) {
	c, peer := accepted(t, listen(t))
	if err := c.CloseReset(); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := peer.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer read after CloseReset: %v; want ECONNRESET", err)
	}
}

func TestNewRefusesBlockingSocket(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := fdconn.New(fd, netip.AddrPort{}); !errors.Is(err, fdconn.ErrBlocking) {
		t.Fatalf("New on a blocking socket: %v; want ErrBlocking", err)
	}
}

func TestDial(t *testing.T) {
	for _, loopback := range []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback} {
		t.Run(loopback.String(), func(t *testing.T) {
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: loopback})
			if err != nil {
				t.Fatalf("%v loopback unavailable: %v", loopback, err)
			}
			defer ln.Close()
			testDial(t, ln)
		})
	}
}

func testDial(t *testing.T, ln *net.TCPListener) {
	var setupFD int
	c, err := fdconn.Dial(ln.Addr().(*net.TCPAddr).AddrPort(), 5*time.Second, func(fd int) error {
		setupFD = fd
		return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if got, want := c.RemoteAddr().String(), ln.Addr().String(); got != want {
		t.Errorf("RemoteAddr = %s; want %s", got, want)
	}
	if got, want := c.LocalAddr().String(), sc.RemoteAddr().String(); got != want {
		t.Errorf("LocalAddr = %s; want %s", got, want)
	}
	rc, _ := c.SyscallConn()
	rc.Control(func(s uintptr) {
		if int(s) != setupFD {
			t.Errorf("setup saw fd %d; the conn holds %d", setupFD, s)
		}
		if v, _ := unix.GetsockoptInt(int(s), unix.IPPROTO_TCP, unix.TCP_NODELAY); v == 0 {
			t.Error("the option setup set is not on the socket")
		}
	})
	c.Write([]byte("hi"))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("server read %q, %v", buf, err)
	}
}

func TestDialSetupErrorClosesSocket(t *testing.T) {
	ln := listen(t)
	boom := errors.New("boom")
	leaked := -1
	_, err := fdconn.Dial(ln.Addr().(*net.TCPAddr).AddrPort(), time.Second, func(fd int) error {
		leaked = fd
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Dial: %v; want the setup error", err)
	}
	if _, err := unix.FcntlInt(uintptr(leaked), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("the socket setup failed on is still open (fcntl: %v)", err)
	}
}

func TestDialRefused(t *testing.T) {
	ln := listen(t)
	ep := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close() // nothing listens there now
	_, err := fdconn.Dial(ep, 5*time.Second, nil)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial to a closed port: %v; want ECONNREFUSED", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" || oe.Addr.String() != ep.String() {
		t.Errorf("Dial error %#v; want a *net.OpError for dial naming %s", err, ep)
	}
}

func TestDialTimeout(t *testing.T) {
	// A listener whose backlog is full leaves further SYNs unanswered: the connect hangs
	// without leaving loopback.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	ep := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
	var filled []*fdconn.Conn
	defer func() {
		for _, c := range filled {
			c.Close()
		}
	}()
	for i := 0; i < 8; i++ {
		start := time.Now()
		c, err := fdconn.Dial(ep, 200*time.Millisecond, nil)
		if err == nil {
			filled = append(filled, c) // still room in the backlog
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Dial to a full backlog: %v; want os.ErrDeadlineExceeded", err)
		}
		if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
			t.Errorf("Dial gave up after %s; want about the 200ms timeout", d)
		}
		return
	}
	t.Fatal("the kernel accepted every connect into a backlog of 0: no hanging connect to time out")
}
