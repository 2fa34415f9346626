package relay

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// SNIGATE_TEST_IO_URING=1 runs every test of the package with loops that wait on io_uring
// (scripts/test.sh runs the package both ways).
func TestMain(m *testing.M) {
	if os.Getenv("SNIGATE_TEST_IO_URING") == "1" {
		defaultIOURing = true
		r, err := New(1)
		if err == nil {
			w, why := r.Wait()
			r.Close()
			if w != "io_uring" {
				// A run asked for io_uring must not pass on epoll without saying so.
				os.Stderr.WriteString("SNIGATE_TEST_IO_URING=1, but the loops wait on epoll: " + why.Error() + "\n")
				os.Exit(1)
			}
		}
	}
	os.Exit(m.Run())
}

// A relay asked for io_uring waits on it where the kernel allows (the CI machines do), and
// relays bytes both ways, carries a half-close and ends the pair.
func TestIOURingWait(t *testing.T) {
	r, err := New(1, WithIOURing(true))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, why := r.Wait()
	if w != "io_uring" {
		testutil.Require(t, "io_uring with min_wait (Linux 6.12+, not refused by seccomp)", why)
	}
	if !r.loops[0].wantRing || r.loops[0].ring == nil {
		t.Fatal("Wait says io_uring, the loop has no ring")
	}

	// Side A: a client and the relay's end of it; side B likewise to a backend.
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	client, a := pair()
	backend, b := pair()
	defer client.Close()
	defer backend.Close()
	done := make(chan Result, 1)
	if _, err := r.Start(a.(Conn), b.(Conn), Options{}, func(res Result) { done <- res }); err != nil {
		t.Fatal(err)
	}
	client.SetDeadline(time.Now().Add(10 * time.Second))
	backend.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(backend, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("backend read %q, %v", buf, err)
	}
	if _, err := backend.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("client read %q, %v", buf, err)
	}
	client.(*net.TCPConn).CloseWrite()
	if n, err := backend.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("backend after the client's half-close: %d, %v; want EOF", n, err)
	}
	backend.Close()
	if n, err := client.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("client after the backend's close: %d, %v; want EOF", n, err)
	}
	select {
	case res := <-done:
		if res.Bytes != [2]int64{4, 4} {
			t.Fatalf("bytes %v, want [4 4]", res.Bytes)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pair did not end")
	}
}
