package load

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/snigate/snigate/bench/internal/backend"
	"github.com/snigate/snigate/bench/internal/wire"
)

func serve(t *testing.T, h func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go backend.Serve(ln, h)
	return ln.Addr().String()
}

// serveAfterFlight serves a backend that reads the ClientHello record and answers the
// flight, then does then with the connection and a 4 KiB buffer.
func serveAfterFlight(t *testing.T, then func(c net.Conn, buf []byte)) string {
	return serve(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		wire.ReadRecord(c, buf)
		c.Write(wire.Flight())
		then(c, buf)
	})
}

// The client operations against the in-process backends: what the runner's "direct" rows do.
func TestOperationsDirect(t *testing.T) {
	hello, err := wire.ClientHello("echo.bench.test")
	if err != nil {
		t.Fatal(err)
	}
	echo := serve(t, backend.Echo)
	bulk := serve(t, backend.Bulk)

	tiny := serve(t, backend.Tiny)
	for name, s := range Shapes {
		a := echo
		if s.Flight == wire.TinyFlightSize {
			a = tiny
		}
		r := Conns(a, hello, s, 200, 8, 10*time.Second, nil)
		if r.OK != 200 || r.Failed != 0 {
			t.Fatalf("conns %s: %+v", name, r)
		}
	}
	rr, err := RR(echo, hello, 10, 2000, 10*time.Second)
	if err != nil || rr.Requests != 2000 || rr.Conns != 10 || rr.P50 <= 0 || rr.P99 < rr.P50 {
		t.Fatalf("rr: %+v %v", rr, err)
	}
	b, err := Bulk(bulk, hello, 8<<20)
	if err != nil || b.Bytes != 8<<20 {
		t.Fatalf("bulk: %+v %v", b, err)
	}
	l, err := Latency(echo, hello, 200, 10)
	if err != nil || l.N != 200 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
		t.Fatalf("latency: %+v %v", l, err)
	}
	conns, err := OpenIdle(echo, hello, 50, 8)
	if err != nil || len(conns) != 50 {
		t.Fatalf("idle: %d %v", len(conns), err)
	}
	CloseAll(conns)
}

func TestConnsCountsFailures(t *testing.T) {
	// A server that closes at once: every connection fails, none hangs.
	addr := serve(t, func(c net.Conn) {})
	hello, _ := wire.ClientHello("x.test")
	r := Conns(addr, hello, ShapeStd, 20, 4, 10*time.Second, nil)
	if r.OK != 0 || r.Failed != 20 || len(r.Errors) == 0 {
		t.Fatalf("%+v", r)
	}
}

func TestConnsStops(t *testing.T) {
	hello, _ := wire.ClientHello("echo.bench.test")
	echo := serve(t, backend.Echo)
	stop := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { close(stop) })
	start := time.Now()
	r := Conns(echo, hello, ShapeStd, 1<<30, 4, time.Minute, stop)
	if time.Since(start) > 5*time.Second || r.OK == 0 || r.Failed != 0 {
		t.Fatalf("%+v after %v", r, time.Since(start))
	}
}

// A shape that ends with a FIN fails against a server that never closes: the proxy's
// half-close is what the shape measures, so its absence must not pass.
func TestFinShapeNeedsTheBackendsFIN(t *testing.T) {
	hello, _ := wire.ClientHello("echo.bench.test")
	addr := serveAfterFlight(t, func(c net.Conn, buf []byte) {
		n, _ := c.Read(buf)
		c.Write(buf[:n])
		time.Sleep(opTimeout + time.Second) // holds the connection open after the client's FIN
	})
	r := Conns(addr, hello, ShapeFin, 1, 1, 30*time.Second, nil)
	if r.OK != 0 || r.Failed != 1 {
		t.Fatalf("%+v", r)
	}
}

// The last shape's FIN goes with its message: a server that answers only after the
// client's EOF serves it, and fails the fin shape, whose client waits for the answer first.
func TestLastShapeSendsFINWithMessage(t *testing.T) {
	hello, _ := wire.ClientHello("echo.bench.test")
	addr := serveAfterFlight(t, func(c net.Conn, _ []byte) {
		c.SetReadDeadline(time.Now().Add(time.Second))
		msg, err := io.ReadAll(c) // the message, then the EOF
		if err != nil {
			return
		}
		c.Write(msg)
		c.Close()
	})
	if r := Conns(addr, hello, ShapeLast, 4, 2, 30*time.Second, nil); r.OK != 4 || r.Failed != 0 {
		t.Fatalf("last shape: %+v", r)
	}
	if r := Conns(addr, hello, ShapeFin, 1, 1, 30*time.Second, nil); r.OK != 0 || r.Failed != 1 {
		t.Fatalf("fin shape against a server that waits for the EOF: %+v, want a failure", r)
	}
}
