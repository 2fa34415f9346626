//go:build linux

package relay

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testRouter is a Router whose verdicts come from a function; it records what the relay
// told it.
type testRouter struct {
	route func(pre []byte) Verdict
	// next is what Dialed returns after a failure, one entry per failure.
	next []netip.AddrPort

	mu       sync.Mutex
	pair     chan *Pair // the pair, at the first Route call
	routed   []string   // pre, per Route call
	dials    []error    // per Dialed call
	released chan released
	done     chan Result
}

type released struct {
	fd  int
	pre []byte
	err error
	tag any
}

func newTestRouter(route func(pre []byte) Verdict) *testRouter {
	return &testRouter{route: route, released: make(chan released, 1), done: make(chan Result, 1), pair: make(chan *Pair, 1)}
}

func (r *testRouter) Route(p *Pair, _ any, pre []byte) Verdict {
	r.mu.Lock()
	r.routed = append(r.routed, string(pre))
	if len(r.routed) == 1 {
		r.pair <- p
	}
	r.mu.Unlock()
	return r.route(pre)
}

func (r *testRouter) Dialed(_ any, _ netip.AddrPort, _ time.Duration, err error) netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dials = append(r.dials, err)
	if err == nil || len(r.next) == 0 {
		return netip.AddrPort{}
	}
	n := r.next[0]
	r.next = r.next[1:]
	return n
}

func (r *testRouter) Release(tag any, fd int, pre []byte, err error) {
	r.released <- released{fd: fd, pre: append([]byte(nil), pre...), err: err, tag: tag}
}

func (r *testRouter) Done(_ any, res Result) { r.done <- res }

func (r *testRouter) waitDone(t *testing.T) Result {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case rel := <-r.released:
		t.Fatalf("released (%v) instead of done", rel.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no Done after 10s")
	}
	return Result{}
}

func (r *testRouter) waitReleased(t *testing.T) released {
	t.Helper()
	select {
	case rel := <-r.released:
		return rel
	case res := <-r.done:
		t.Fatalf("done (%+v) instead of released", res)
	case <-time.After(10 * time.Second):
		t.Fatal("no Release after 10s")
	}
	return released{}
}

// relayListener is a listening socket whose connections the relay's loops accept
// (Listen): each one is adopted with the router, tag and deadline of the adopted call that
// dialed it.
type relayListener struct {
	addr *net.TCPAddr
	next chan adoption
}

type adoption struct {
	rt       Router
	tag      any
	deadline time.Time
}

func (a *relayListener) Accepted(fd int, _ netip.AddrPort) (Router, any, time.Time, bool) {
	select {
	case n := <-a.next:
		return n.rt, n.tag, n.deadline, true
	default:
		rawClose(fd) // nobody asked for it
		return nil, nil, time.Time{}, false
	}
}

func (a *relayListener) Failed(error) {}

// listenRelay makes r's loops accept on a new loopback listener.
func listenRelay(t *testing.T, r *Relay) *relayListener {
	t.Helper()
	ln := listen(t)
	fd, err := listenerFD(ln)
	if err != nil {
		t.Fatal(err)
	}
	a := &relayListener{addr: ln.Addr().(*net.TCPAddr), next: make(chan adoption, 1)}
	rl, err := r.Listen(fd, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	return a
}

// listenerFD duplicates a listener's socket (non-blocking, as Go made it).
func listenerFD(ln *net.TCPListener) (int, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = rawDup(int(s)) }); err != nil {
		return -1, err
	}
	return fd, derr
}

// adopted connects a client, whose socket a loop accepts and adopts with rt, tag and
// deadline.
func (a *relayListener) adopted(t *testing.T, rt Router, tag any, deadline time.Time) *net.TCPConn {
	t.Helper()
	a.next <- adoption{rt, tag, deadline}
	c, err := net.DialTCP("tcp", nil, a.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// untilLine routes once pre holds a whole line, to to.
func untilLine(to netip.AddrPort) func([]byte) Verdict {
	return func(pre []byte) Verdict {
		if !bytes.Contains(pre, []byte("\n")) {
			return Verdict{Action: Wait}
		}
		return Verdict{Action: Connect, To: to, Dial: DialOptions{Timeout: 5 * time.Second, KeepAlive: -1}}
	}
}

// The loop reads the client's preface in pieces, routes it when the router says so, writes
// it to the backend first and relays both ways; Done reports the bytes.
func TestAdoptRoutesAndRelays(t *testing.T) {
	r := newRelay(t, 2)
	rl, bln := listenRelay(t, r), listen(t)
	rt := newTestRouter(untilLine(bln.Addr().(*net.TCPAddr).AddrPort()))
	client := rl.adopted(t, rt, "tag", time.Now().Add(5*time.Second))
	client.Write([]byte("HEL"))
	time.Sleep(20 * time.Millisecond) // a second read, a second Route
	client.Write([]byte("LO\nand more"))
	backend := acceptBackend(t, bln)
	readExpect(t, "backend", backend, "HELLO\nand more")
	backend.Write([]byte("answer"))
	client.SetDeadline(time.Now().Add(5 * time.Second))
	readExpect(t, "client", client, "answer")
	client.Close()
	backend.Close()
	res := rt.waitDone(t)
	if res.Bytes != [2]int64{14, 6} {
		t.Fatalf("result %+v, want 14 and 6 bytes", res)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.routed) < 3 || rt.routed[0] != "" || rt.routed[len(rt.routed)-1] != "HELLO\n" && rt.routed[len(rt.routed)-1] != "HELLO\nand more" {
		t.Fatalf("Route saw %q: want nothing first (as the loop adopts it), then the preface growing", rt.routed)
	}
	if len(rt.dials) != 1 || rt.dials[0] != nil {
		t.Fatalf("Dialed calls %v, want one success", rt.dials)
	}
	waitPairs(t, r, 0)
}

// A router that connects at once (a TCP listener) gets the backend dialed inside Adopt.
func TestAdoptConnectAtOnce(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	to := bln.Addr().(*net.TCPAddr).AddrPort()
	rt := newTestRouter(func([]byte) Verdict {
		return Verdict{Action: Connect, To: to, Dial: DialOptions{Timeout: 5 * time.Second}}
	})
	client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	backend := acceptBackend(t, bln)
	backend.Write([]byte("greeting")) // a server that speaks first
	client.SetDeadline(time.Now().Add(5 * time.Second))
	readExpect(t, "client", client, "greeting")
	backend.Close()
	client.Close()
	if res := rt.waitDone(t); res.Bytes != [2]int64{0, 8} {
		t.Fatalf("result %+v", res)
	}
}

// An adopted client's backend socket gets keepalive once it has lived keepAliveAfter, not
// at its connect: a short connection makes two system calls fewer.
func TestAdoptKeepAliveLater(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	to := bln.Addr().(*net.TCPAddr).AddrPort()
	rt := newTestRouter(func([]byte) Verdict {
		return Verdict{Action: Connect, To: to, Dial: DialOptions{Timeout: 5 * time.Second, KeepAlive: 45 * time.Second}}
	})
	client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	backend := acceptBackend(t, bln)
	fd := socketFrom(t, backend.RemoteAddr().(*net.TCPAddr).AddrPort())
	if on, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); err != nil || on != 0 {
		t.Fatalf("SO_KEEPALIVE %d, %v at the connect: want 0", on, err)
	}
	waitKeepAlive(t, fd, 45)
	backend.Write([]byte("still relaying"))
	client.SetDeadline(time.Now().Add(5 * time.Second))
	readExpect(t, "client", client, "still relaying")
	backend.Close()
	client.Close()
	rt.waitDone(t)
}

// Release hands the socket back with what was read, and the socket still works; a client that
// sends nothing is released at the deadline, one that closes with io.EOF, and one whose
// preface outgrows the buffer with ErrPrefaceFull.
func TestAdoptRelease(t *testing.T) {
	r := newRelay(t, 1)
	rl := listenRelay(t, r)

	rt := newTestRouter(func(pre []byte) Verdict {
		if len(pre) < 4 {
			return Verdict{Action: Wait}
		}
		return Verdict{Action: Release}
	})
	client := rl.adopted(t, rt, 42, time.Now().Add(5*time.Second))
	client.Write([]byte("GET / HTTP/1.1\r\n"))
	rel := rt.waitReleased(t)
	if rel.err != nil || rel.tag != 42 || !bytes.HasPrefix([]byte("GET / HTTP/1.1\r\n"), rel.pre) || len(rel.pre) < 4 {
		t.Fatalf("released %q, %v, tag %v", rel.pre, rel.err, rel.tag)
	}
	f := os.NewFile(uintptr(rel.fd), "")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte("ok"))
	nc.Close()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	if got, _ := io.ReadAll(client); string(got) != "ok" {
		t.Fatalf("client read %q from the released socket", got)
	}

	wait := newTestRouter(func([]byte) Verdict { return Verdict{Action: Wait} })
	t0 := time.Now()
	rl.adopted(t, wait, nil, t0.Add(100*time.Millisecond))
	rel = wait.waitReleased(t)
	if !errors.Is(rel.err, ErrDeadline) || len(rel.pre) != 0 {
		t.Fatalf("silent client released with %q, %v; want ErrDeadline", rel.pre, rel.err)
	}
	if d := time.Since(t0); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("released after %v, want 100-125ms", d)
	}
	os.NewFile(uintptr(rel.fd), "").Close()

	client = rl.adopted(t, wait, nil, time.Now().Add(5*time.Second))
	client.Write([]byte("bye"))
	client.Close()
	rel = wait.waitReleased(t)
	if rel.err != io.EOF || string(rel.pre) != "bye" {
		t.Fatalf("closed client released with %q, %v; want io.EOF", rel.pre, rel.err)
	}
	os.NewFile(uintptr(rel.fd), "").Close()

	client = rl.adopted(t, wait, nil, time.Now().Add(5*time.Second))
	go client.Write(make([]byte, bufSize+100))
	rel = wait.waitReleased(t)
	if !errors.Is(rel.err, ErrPrefaceFull) || len(rel.pre) != bufSize {
		t.Fatalf("big preface released with %d bytes, %v; want %d and ErrPrefaceFull", len(rel.pre), rel.err, bufSize)
	}
	os.NewFile(uintptr(rel.fd), "").Close()
	waitPairs(t, r, 0)
}

// A Close verdict closes the client on the loop without a byte, and Done says so; nothing
// is released. At once (before any byte) and after some.
func TestAdoptClose(t *testing.T) {
	r := newRelay(t, 1)
	rl := listenRelay(t, r)
	for _, at := range []int{0, 4} {
		rt := newTestRouter(func(pre []byte) Verdict {
			if len(pre) < at {
				return Verdict{Action: Wait}
			}
			return Verdict{Action: Close}
		})
		client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
		client.Write([]byte("refused\r\n"))
		res := rt.waitDone(t)
		if res.Outcome != OutcomeClosed || res.Err != nil || res.Bytes != [2]int64{} {
			t.Fatalf("closed after %d bytes: done with %+v", at, res)
		}
		client.SetDeadline(time.Now().Add(5 * time.Second))
		if got, err := io.ReadAll(client); len(got) != 0 {
			t.Fatalf("closed client read %q, %v; want nothing", got, err)
		}
		select {
		case rel := <-rt.released:
			t.Fatalf("released (%v) after a Close", rel.err)
		default:
		}
	}
	waitPairs(t, r, 0)
}

// After a failed connect the router's next endpoint is dialed; when it has none left, the
// pair ends with OutcomeDialFailed and the client is closed.
func TestAdoptDialFailures(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	dead := listen(t)
	deadAddr := dead.Addr().(*net.TCPAddr).AddrPort()
	dead.Close()

	rt := newTestRouter(untilLine(deadAddr))
	rt.next = []netip.AddrPort{deadAddr, bln.Addr().(*net.TCPAddr).AddrPort()}
	client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	client.Write([]byte("hi\n"))
	acceptExpect(t, bln, "hi\n").Close()
	client.Close()
	rt.waitDone(t)
	rt.mu.Lock()
	dials := rt.dials
	rt.mu.Unlock()
	if len(dials) != 3 || dials[0] == nil || dials[1] == nil || dials[2] != nil {
		t.Fatalf("Dialed calls %v, want two failures and a success", dials)
	}

	gone := newTestRouter(untilLine(deadAddr))
	client = rl.adopted(t, gone, nil, time.Now().Add(5*time.Second))
	client.Write([]byte("hi\n"))
	res := gone.waitDone(t)
	if res.Outcome != OutcomeDialFailed || res.Err == nil {
		t.Fatalf("result %+v, want %s with the error", res, OutcomeDialFailed)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("client of a failed dial read %d, %v; want it closed", n, err)
	}
	waitPairs(t, r, 0)
}

// Stop ends an adopted client before any verdict, and Done says so.
func TestAdoptStop(t *testing.T) {
	r := newRelay(t, 1)
	rl := listenRelay(t, r)
	rt := newTestRouter(func([]byte) Verdict { return Verdict{Action: Wait} })
	client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	(<-rt.pair).Stop(OutcomeShutdown)
	if res := rt.waitDone(t); res.Outcome != OutcomeShutdown {
		t.Fatalf("result %+v, want %s", res, OutcomeShutdown)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("stopped client read %d, %v; want it closed", n, err)
	}
	waitPairs(t, r, 0)
}

func waitPairs(t *testing.T, r *Relay, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.Pairs() != n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.Pairs(); got != n {
		t.Fatalf("%d pairs running, want %d", got, n)
	}
}

// A connect still in progress when the preface is written (a backend whose accept queue is
// full drops the SYN) waits for writability; when it times out, the router's next endpoint
// is dialed from the loop.
func TestAdoptSlowConnect(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	full := fullListener(t)
	rt := newTestRouter(func(pre []byte) Verdict {
		if !bytes.Contains(pre, []byte("\n")) {
			return Verdict{Action: Wait}
		}
		return Verdict{Action: Connect, To: full, Dial: DialOptions{Timeout: 150 * time.Millisecond}}
	})
	rt.next = []netip.AddrPort{bln.Addr().(*net.TCPAddr).AddrPort()}
	client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	client.Write([]byte("hi\n"))
	acceptExpect(t, bln, "hi\n").Close()
	client.Close()
	rt.waitDone(t)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.dials) != 2 || !errors.Is(rt.dials[0], ErrDialTimeout) || rt.dials[1] != nil {
		t.Fatalf("Dialed calls %v, want a timeout, then a success", rt.dials)
	}
}

// Adopted sockets are registered without EPOLLOUT: when a side stops reading, writes to it
// fill its buffer, and the relay must ask for EPOLLOUT then or stall. Both directions carry
// 8 MiB to a reader that starts late, intact.
func TestAdoptFullBuffersBothWays(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	rt := newTestRouter(untilLine(bln.Addr().(*net.TCPAddr).AddrPort()))
	client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
	client.Write([]byte("go\n"))
	backend := acceptBackend(t, bln)
	const size = 8 << 20
	up, down := bytes.Repeat([]byte("u"), size), bytes.Repeat([]byte("d"), size)
	deadline := time.Now().Add(20 * time.Second)
	client.SetDeadline(deadline)
	backend.SetDeadline(deadline)
	errs := make(chan error, 2)
	go func() { _, err := client.Write(up); client.CloseWrite(); errs <- err }()
	go func() { _, err := backend.Write(down); backend.CloseWrite(); errs <- err }()
	time.Sleep(200 * time.Millisecond) // both readers late: every buffer on the way fills
	var gotUp, gotDown []byte
	var wg sync.WaitGroup
	wg.Go(func() { gotUp, _ = io.ReadAll(backend) })
	wg.Go(func() { gotDown, _ = io.ReadAll(client) })
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gotUp, append([]byte("go\n"), up...)) || !bytes.Equal(gotDown, down) {
		t.Fatalf("backend got %d bytes, client %d; want %d and %d intact", len(gotUp), len(gotDown), size+3, size)
	}
	if res := rt.waitDone(t); res.Bytes != [2]int64{size + 3, size} {
		t.Fatalf("result %+v", res)
	}
}

// acceptBackend accepts the relay's connection to a backend, with a 5 s deadline; it is
// closed when the test ends.
func acceptBackend(t *testing.T, bln *net.TCPListener) *net.TCPConn {
	t.Helper()
	backend, err := bln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	backend.SetDeadline(time.Now().Add(5 * time.Second))
	return backend
}

// acceptExpect accepts the relay's connection to a backend and reads want from it.
func acceptExpect(t *testing.T, bln *net.TCPListener, want string) *net.TCPConn {
	t.Helper()
	backend := acceptBackend(t, bln)
	readExpect(t, "backend", backend, want)
	return backend
}

// readExpect reads len(want) bytes from c (named what in the failure) and fails unless they
// are want.
func readExpect(t *testing.T, what string, c net.Conn, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("%s got %q, %v; want %q", what, got, err, want)
	}
}

// fullListener returns the address of a listener whose accept queue is full (it drops SYNs):
// connects to it hang until their timeout.
func fullListener(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	for range 3 {
		if c, err := net.DialTimeout("tcp", ap.String(), 200*time.Millisecond); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return ap
}

// Every buffer an adopted pair takes goes back to the pool: a 16 KiB buffer dropped per
// connection once made the proxy collect garbage every 150 connections. (The budget
// leaves room for the test's own sockets.)
func TestAdoptReturnsBuffers(t *testing.T) {
	r := newRelay(t, 1)
	rl, bln := listenRelay(t, r), listen(t)
	rt := newTestRouter(untilLine(bln.Addr().(*net.TCPAddr).AddrPort()))
	rt.done = make(chan Result, 1000)
	one := func() {
		client := rl.adopted(t, rt, nil, time.Now().Add(5*time.Second))
		client.Write([]byte("x\n"))
		backend := acceptBackend(t, bln)
		b := make([]byte, 2)
		io.ReadFull(backend, b)
		client.Write([]byte("zz")) // a read after the preface, as a request after a hello
		io.ReadFull(backend, b)
		backend.Write([]byte("y"))
		client.SetDeadline(time.Now().Add(5 * time.Second))
		io.ReadFull(client, b[:1])
		client.Close()
		backend.Close()
		rt.waitDone(t)
	}
	for range 20 {
		one() // warm the pools
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 200
	for range n {
		one()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes per connection", per)
	if per > 12<<10 && !raceEnabled {
		t.Fatalf("%d bytes allocated per connection: a relay buffer is not going back to its pool", per)
	}
}
