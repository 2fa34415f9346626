//go:build linux

package relay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// tcpPair returns both ends of a loopback TCP connection: the dialed one and the accepted one.
func tcpPair(t testing.TB, ln *net.TCPListener) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ch := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a == nil {
		t.Fatal("accept failed")
	}
	return d, a
}

func listen(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// fixture is a client, a backend, and the relay's two sockets between them, as a proxy has
// them: A was accepted from the client, B dialed to the backend.
type fixture struct {
	client, backend *net.TCPConn
	res             chan Result
	pair            *Pair
}

func newRelay(t testing.TB, n int) *Relay {
	t.Helper()
	r, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func start(t testing.TB, r *Relay, ln *net.TCPListener, o Options) *fixture {
	t.Helper()
	client, a := tcpPair(t, ln)
	b, backend := tcpPair(t, ln)
	f := &fixture{client: client, backend: backend, res: make(chan Result, 1)}
	t.Cleanup(func() { client.Close(); backend.Close() })
	p, err := r.Start(a, b, o, func(res Result) { f.res <- res })
	if err != nil {
		t.Fatal(err)
	}
	f.pair = p
	return f
}

func (f *fixture) wait(t testing.TB, within time.Duration) Result {
	t.Helper()
	select {
	case r := <-f.res:
		return r
	case <-time.After(within):
		t.Fatalf("pair still running after %v", within)
		return Result{}
	}
}

// Small messages cross both ways, half-closes are passed on in order, and the counts add up.
func TestEchoAndHalfClose(t *testing.T) {
	r := newRelay(t, 2)
	f := start(t, r, listen(t), Options{})
	deadline := time.Now().Add(10 * time.Second)
	f.client.SetDeadline(deadline)
	f.backend.SetDeadline(deadline)
	buf := make([]byte, 64)
	for i := range 50 {
		msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i)
		if _, err := f.client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(f.backend, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("backend got %q, %v; want %q", buf[:len(msg)], err, msg)
		}
		if _, err := f.backend.Write(msg[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(f.client, buf[:1]); err != nil || buf[0] != msg[0] {
			t.Fatalf("client got %q, %v", buf[:1], err)
		}
	}
	// The client half-closes: the backend reads EOF and can still answer.
	f.client.CloseWrite()
	if n, err := f.backend.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("backend after the client's half-close: %d bytes, %v; want EOF", n, err)
	}
	f.backend.Write([]byte("last words"))
	f.backend.CloseWrite()
	got, err := io.ReadAll(f.client)
	if err != nil || string(got) != "last words" {
		t.Fatalf("client read %q, %v after the backend's half-close", got, err)
	}
	res := f.wait(t, 5*time.Second)
	var want [2]int64
	for i := range 50 {
		want[0] += int64(1 + i)
		want[1]++
	}
	want[1] += int64(len("last words"))
	if res.Bytes != want || res.Err != nil || res.Outcome != "" {
		t.Fatalf("result %+v, want bytes %v, no error, no outcome", res, want)
	}
}

// A last message and its FIN already in when the relay first reads (a TLS close_notify, a
// PostgreSQL Terminate, then the close): the message and then the end reach the backend,
// whose own last words and FIN come back the same way.
func TestLastMessageWithFIN(t *testing.T) {
	r := newRelay(t, 1)
	ln := listen(t)
	client, a := tcpPair(t, ln)
	b, backend := tcpPair(t, ln)
	t.Cleanup(func() { client.Close(); backend.Close() })
	deadline := time.Now().Add(10 * time.Second)
	client.SetDeadline(deadline)
	backend.SetDeadline(deadline)
	// On loopback the segments are in a's queue when the calls return.
	if _, err := client.Write([]byte("terminate")); err != nil {
		t.Fatal(err)
	}
	client.CloseWrite()
	res := make(chan Result, 1)
	if _, err := r.Start(a, b, Options{}, func(r Result) { res <- r }); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(backend); err != nil || string(got) != "terminate" {
		t.Fatalf("backend read %q, %v; want the message, then EOF", got, err)
	}
	backend.Write([]byte("bye"))
	backend.CloseWrite()
	if got, err := io.ReadAll(client); err != nil || string(got) != "bye" {
		t.Fatalf("client read %q, %v; want the answer, then EOF", got, err)
	}
	select {
	case r := <-res:
		if r.Bytes != [2]int64{9, 3} || r.Err != nil || r.Outcome != "" {
			t.Fatalf("result %+v, want bytes [9 3], no error, no outcome", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pair still running")
	}
}

// Megabytes both ways at once take the splice path, arrive intact, and leave no pipe held.
func TestBulkBothWays(t *testing.T) {
	r := newRelay(t, 1)
	f := start(t, r, listen(t), Options{})
	const size = 16 << 20
	up, down := make([]byte, size), make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range up {
		up[i], down[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	deadline := time.Now().Add(30 * time.Second)
	f.client.SetDeadline(deadline)
	f.backend.SetDeadline(deadline)
	var wg sync.WaitGroup
	send := func(c *net.TCPConn, b []byte) {
		defer wg.Done()
		c.Write(b)
		c.CloseWrite()
	}
	wg.Add(2)
	go send(f.client, up)
	go send(f.backend, down)
	var gotUp, gotDown []byte
	var errUp, errDown error
	wg.Add(1)
	go func() { defer wg.Done(); gotUp, errUp = io.ReadAll(f.backend) }()
	gotDown, errDown = io.ReadAll(f.client)
	wg.Wait()
	if errUp != nil || errDown != nil {
		t.Fatal(errUp, errDown)
	}
	if sha256.Sum256(gotUp) != sha256.Sum256(up) || sha256.Sum256(gotDown) != sha256.Sum256(down) {
		t.Fatalf("got %d and %d bytes, not the %d sent each way", len(gotUp), len(gotDown), size)
	}
	res := f.wait(t, 5*time.Second)
	if res.Bytes != [2]int64{size, size} || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	if n := PooledPipes(); n > 2 {
		// Both directions' pipes went back; more would mean pipes leak into the pool.
		t.Fatalf("%d pipes in the pool after one pair", n)
	}
}

// With ExpectTLS, a backend greeting that is not TLS never reaches the client.
func TestExpectTLS(t *testing.T) {
	r := newRelay(t, 1)
	ln := listen(t)

	f := start(t, r, ln, Options{ExpectTLS: true})
	f.backend.Write([]byte("J\x00\x00\x00\x0a5.5.5-10.11.6-MariaDB"))
	res := f.wait(t, 5*time.Second)
	if res.Outcome != OutcomeNotTLS || res.FirstByte != 'J' || res.Bytes[1] != 0 {
		t.Fatalf("result %+v, want %s with first byte 'J' and nothing forwarded", res, OutcomeNotTLS)
	}
	f.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(f.client); len(b) != 0 || err != nil {
		t.Fatalf("client read %q, %v; want nothing", b, err)
	}

	// A TLS record (here an alert) goes through.
	f = start(t, r, ln, Options{ExpectTLS: true})
	alert := []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28}
	f.backend.Write(alert)
	f.backend.Close()
	f.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(f.client); !bytes.Equal(b, alert) || err != nil {
		t.Fatalf("client read %x, %v; want the alert %x", b, err, alert)
	}
	f.client.Close()
	if res := f.wait(t, 5*time.Second); res.Outcome != "" {
		t.Fatalf("result %+v", res)
	}
}

// Silence ends a pair after the idle timeout; traffic in either direction keeps it open.
func TestIdleTimeout(t *testing.T) {
	r := newRelay(t, 1)
	f := start(t, r, listen(t), Options{IdleTimeout: 200 * time.Millisecond})
	f.backend.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	for range 6 {
		time.Sleep(100 * time.Millisecond)
		f.client.Write([]byte("x"))
		if _, err := io.ReadFull(f.backend, buf); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case res := <-f.res:
		t.Fatalf("an active pair ended: %+v", res)
	default:
	}
	t0 := time.Now()
	res := f.wait(t, 3*time.Second)
	if res.Outcome != OutcomeIdle {
		t.Fatalf("result %+v, want %s", res, OutcomeIdle)
	}
	if d := time.Since(t0); d < 100*time.Millisecond {
		t.Fatalf("ended %v after the last byte, before the timeout", d)
	}
}

// Stop ends a pair at once, with the outcome it was given; a second Stop changes nothing.
func TestStop(t *testing.T) {
	r := newRelay(t, 1)
	f := start(t, r, listen(t), Options{})
	f.pair.Stop("drain")
	f.pair.Stop("other")
	if res := f.wait(t, 2*time.Second); res.Outcome != "drain" {
		t.Fatalf("result %+v", res)
	}
	f.pair.Stop("after") // ended: nothing happens
}

// A reset on one side ends both, with the error, and reaches the other side as a reset.
func TestReset(t *testing.T) {
	r := newRelay(t, 1)
	for _, side := range []string{"backend", "client"} {
		f := start(t, r, listen(t), Options{})
		broken, other := f.backend, f.client
		if side == "client" {
			broken, other = f.client, f.backend
		}
		broken.SetLinger(0)
		broken.Close()
		if res := f.wait(t, 5*time.Second); res.Err == nil || res.Outcome != "" {
			t.Fatalf("%s reset: result %+v, want an error", side, res)
		}
		other.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(other); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%s reset: the other side read %v, want a reset", side, err)
		}
	}

	// After the client's FIN too (it sent its request and waits for the whole answer).
	f := start(t, r, listen(t), Options{})
	f.client.CloseWrite()
	f.backend.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(f.backend); err != nil {
		t.Fatalf("after the client's FIN the backend read %v, want EOF", err)
	}
	f.backend.Write([]byte("part of the answer"))
	f.backend.SetLinger(0)
	f.backend.Close()
	f.wait(t, 5*time.Second)
	f.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(f.client); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a reset after the client's FIN: the client read %q, %v, want a reset", b, err)
	}

	// A clean end is still passed on as one.
	f = start(t, r, listen(t), Options{})
	f.backend.Close()
	f.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(f.client); err != nil {
		t.Fatalf("after the backend's FIN the client read %v, want EOF", err)
	}
	f.client.Close()
	if res := f.wait(t, 5*time.Second); res.Err != nil || res.Outcome != "" {
		t.Fatalf("clean end: result %+v", res)
	}
}

// Idle pairs cost no goroutine, and many pairs on few loops all make progress.
func TestManyPairsNoGoroutines(t *testing.T) {
	r := newRelay(t, 2)
	ln := listen(t)
	before := runtime.NumGoroutine()
	const n = 300
	fs := make([]*fixture, n)
	for i := range fs {
		fs[i] = start(t, r, ln, Options{})
	}
	time.Sleep(50 * time.Millisecond)
	if g := runtime.NumGoroutine() - before; g > 5 {
		t.Fatalf("%d idle pairs run %d goroutines", n, g)
	}
	if got := r.Pairs(); got != n {
		t.Fatalf("Pairs() = %d, want %d", got, n)
	}
	msg := []byte("ping")
	for _, f := range fs {
		f.client.Write(msg)
	}
	buf := make([]byte, 4)
	for _, f := range fs {
		f.backend.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(f.backend, buf); err != nil || !bytes.Equal(buf, msg) {
			t.Fatalf("%q, %v", buf, err)
		}
		f.client.Close()
		f.backend.Close()
	}
	for _, f := range fs {
		f.wait(t, 5*time.Second)
	}
	if got := r.Pairs(); got != 0 {
		t.Fatalf("Pairs() = %d after all ended", got)
	}
}

// BenchmarkRoundTrip is one 64-byte request and its answer through the relay.
func BenchmarkRoundTrip(b *testing.B) {
	r := newRelay(b, 1)
	f := start(b, r, listen(b), Options{})
	msg := make([]byte, 64)
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		f.client.Write(msg)
		io.ReadFull(f.backend, buf)
		f.backend.Write(msg)
		io.ReadFull(f.client, buf)
	}
}

// Dial connects from a loop; Attach relays with the preface written first, and the relay
// closes the socket it made.
func TestDialAttach(t *testing.T) {
	r := newRelay(t, 1)
	ln := listen(t)
	p, backend := dialAccepted(t, r, ln, DialOptions{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second})
	// The dialed socket has what a relayed backend socket needs: no Nagle delay at once,
	// and keepalive with the idle time asked for once it has lived keepAliveAfter.
	fd := p.fd[1]
	testutil.Sockopts(t, "dialed socket", fd,
		testutil.Sockopt{Name: "TCP_NODELAY", Level: syscall.IPPROTO_TCP, Opt: syscall.TCP_NODELAY, Want: 1},
		testutil.Sockopt{Name: "SO_KEEPALIVE", Level: syscall.SOL_SOCKET, Opt: syscall.SO_KEEPALIVE, Want: 0})
	client, a := tcpPair(t, ln)
	defer client.Close()
	res := make(chan Result, 1)
	if err := p.Attach(a, []byte("hello "), Options{}, func(x Result) { res <- x }); err != nil {
		t.Fatal(err)
	}
	waitKeepAlive(t, fd, 30)
	client.Write([]byte("world"))
	client.CloseWrite()
	backend.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(backend)
	if err != nil || string(got) != "hello world" {
		t.Fatalf("backend got %q, %v", got, err)
	}
	backend.Write([]byte("bye"))
	backend.CloseWrite()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(client); err != nil || string(got) != "bye" {
		t.Fatalf("client got %q, %v", got, err)
	}
	x := <-res
	if x.Bytes != [2]int64{11, 3} || x.Err != nil {
		t.Fatalf("result %+v", x)
	}
	if r.Pairs() != 0 {
		t.Fatalf("%d pairs left", r.Pairs())
	}
}

// A refused connect and a connect that never completes are errors; an abandoned dial closes
// its socket.
func TestDialFailures(t *testing.T) {
	r := newRelay(t, 1)
	ln := listen(t)
	dead := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	if _, err := r.Dial(dead, DialOptions{Timeout: 5 * time.Second}); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial of a closed port: %v, want connection refused", err)
	}

	// A listener whose accept queue is full drops SYNs: the connect hangs until the timeout.
	full := fullListener(t)
	t0 := time.Now()
	_, err := r.Dial(full, DialOptions{Timeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrDialTimeout) {
		t.Fatalf("dial to a full accept queue: %v after %v, want a timeout", err, time.Since(t0))
	}
	if d := time.Since(t0); d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %v, want about 200ms", d)
	}

	ln = listen(t)
	p, backend := dialAccepted(t, r, ln, DialOptions{Timeout: 5 * time.Second})
	p.Abandon()
	backend.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := backend.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("abandoned dial: backend read %d, %v; want EOF", n, err)
	}
	waitPairs(t, r, 0)
}

// dialAccepted dials ln's address from the relay and returns the pair and the backend's
// side of the connection (closed when the test ends).
func dialAccepted(t *testing.T, r *Relay, ln *net.TCPListener, o DialOptions) (*Pair, *net.TCPConn) {
	t.Helper()
	accepted := make(chan *net.TCPConn, 1)
	go func() { c, _ := ln.AcceptTCP(); accepted <- c }()
	p, err := r.Dial(ln.Addr().(*net.TCPAddr).AddrPort(), o)
	if err != nil {
		t.Fatal(err)
	}
	backend := <-accepted
	if backend == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { backend.Close() })
	return p, backend
}

// Dial speaks IPv6 too.
func TestDialIPv6(t *testing.T) {
	ln, err := net.ListenTCP("tcp6", &net.TCPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatalf("IPv6 loopback unavailable: %v", err)
	}
	defer ln.Close()
	r := newRelay(t, 1)
	p, backend := dialAccepted(t, r, ln, DialOptions{Timeout: 5 * time.Second})
	if got := backend.RemoteAddr().(*net.TCPAddr).IP; !got.Equal(net.IPv6loopback) {
		t.Fatalf("backend sees the dial from %v", got)
	}
	p.Abandon()
}

// Many pairs at once, each sending random-sized chunks both ways with random pauses and
// half-closing at a random point: every byte arrives, in order, on every pair, through
// buffered copies and splice bursts alike.
func TestRandomTraffic(t *testing.T) {
	r := newRelay(t, 2)
	ln := listen(t)
	const pairs = 40
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4*pairs)
	for i := range pairs {
		f := start(t, r, ln, Options{})
		f.client.SetDeadline(deadline)
		f.backend.SetDeadline(deadline)
		send := func(c *net.TCPConn, seed uint64) [32]byte {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			h := sha256.New()
			for range 1 + rng.IntN(30) {
				chunk := make([]byte, 1+rng.IntN(100<<10))
				for j := range chunk {
					chunk[j] = byte(rng.Uint32())
				}
				h.Write(chunk)
				if _, err := c.Write(chunk); err != nil {
					errs <- err
					break
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				}
			}
			c.CloseWrite()
			var sum [32]byte
			copy(sum[:], h.Sum(nil))
			return sum
		}
		recv := func(c *net.TCPConn) [32]byte {
			h := sha256.New()
			if _, err := io.Copy(h, c); err != nil {
				errs <- err
			}
			var sum [32]byte
			copy(sum[:], h.Sum(nil))
			return sum
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var up, down, gotUp, gotDown [32]byte
			var inner sync.WaitGroup
			inner.Add(3)
			go func() { defer inner.Done(); up = send(f.client, 1) }()
			go func() { defer inner.Done(); down = send(f.backend, 2) }()
			go func() { defer inner.Done(); gotUp = recv(f.backend) }()
			gotDown = recv(f.client)
			inner.Wait()
			if up != gotUp || down != gotDown {
				errs <- fmt.Errorf("pair %d: bytes differ (up %v, down %v)", i, up == gotUp, down == gotDown)
			}
			select {
			case res := <-f.res:
				if res.Err != nil || res.Outcome != "" {
					errs <- fmt.Errorf("pair %d: result %+v", i, res)
				}
			case <-time.After(10 * time.Second):
				errs <- fmt.Errorf("pair %d still running after both sides closed", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := r.Pairs(); n != 0 {
		t.Fatalf("%d pairs left", n)
	}
}

// waitKeepAlive waits until the relay has set keepalive with idle time idle (seconds) on
// its socket fd: within keepAliveAfter and a sweep, with room for a slow machine.
func waitKeepAlive(t *testing.T, fd, idle int) {
	t.Helper()
	start := time.Now()
	for {
		on, err1 := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		got, err2 := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		if err1 != nil || err2 != nil {
			t.Fatalf("getsockopt: %v, %v", err1, err2)
		}
		if on == 1 && got == idle {
			if d := time.Since(start); d < keepAliveAfter/2 {
				t.Fatalf("keepalive set after %v, before the connection lived keepAliveAfter", d)
			}
			return
		}
		if time.Since(start) > keepAliveAfter+5*time.Second {
			t.Fatalf("keepalive %d, idle %d s after %v: want on, %d s", on, got, time.Since(start), idle)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// socketFrom finds this process's socket whose local address is local (the relay's side of
// a connection a test's backend accepted).
func socketFrom(t *testing.T, local netip.AddrPort) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		if in4, ok := sa.(*syscall.SockaddrInet4); ok && err == nil &&
			netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)) == local {
			return fd
		}
	}
	t.Fatalf("no socket of this process is bound to %v", local)
	return -1
}
