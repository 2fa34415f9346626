// Package load holds the load generator's client operations. Each one is bounded in count
// and in time and returns a result that marshals to JSON; bench/cmd/loadgen runs them as a
// separate process pinned to CPU 0, and the runner uses the cheap ones (Try, Probe) itself.
package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snigate/snigate/bench/internal/wire"
)

// opTimeout bounds every single connection of every operation.
const opTimeout = 10 * time.Second

var dialer = net.Dialer{Timeout: 5 * time.Second, KeepAlive: wire.NoKeepAlive}

func dial(addr string) (*net.TCPConn, error) {
	c, err := dialer.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	tc.SetLinger(0)
	return tc, nil
}

// Shape is what one connection of Conns does after connecting: write the ClientHello, read
// a Flight-byte answer, write Msg bytes and read their echo, then close, by reset or (Fin)
// by a half-close whose FIN the proxy must carry to the backend and back. With FinWithMsg
// the half-close follows the message at once, before its echo is read.
type Shape struct {
	Flight, Msg     int
	Fin, FinWithMsg bool
}

// The shapes the runner measures.
var (
	// ShapeStd: a TLS 1.3 server flight, one small request and response, reset.
	ShapeStd = Shape{Flight: wire.FlightSize, Msg: wire.MsgSize}
	// ShapeTiny: one small record, one byte each way, reset: setup and teardown only.
	ShapeTiny = Shape{Flight: wire.TinyFlightSize, Msg: 1}
	// ShapeFin: as ShapeStd, but the client ends with a FIN and waits for the backend's, as a
	// database client that sends its Terminate message and closes does.
	ShapeFin = Shape{Flight: wire.FlightSize, Msg: wire.MsgSize, Fin: true}
	// ShapeLast: as ShapeFin, but the FIN goes with the last message, as a TLS close_notify
	// or a PostgreSQL Terminate and the close that follows it do. Not in the runner's
	// tables (bench/cmd/ab --test last measures it).
	ShapeLast = Shape{Flight: wire.FlightSize, Msg: wire.MsgSize, Fin: true, FinWithMsg: true}
)

// Shapes names them for the command line.
var Shapes = map[string]Shape{"std": ShapeStd, "tiny": ShapeTiny, "fin": ShapeFin, "last": ShapeLast}

// handshake writes hello and reads an answer of len(flight) bytes into flight.
func handshake(c net.Conn, hello, flight []byte) error {
	if _, err := c.Write(hello); err != nil {
		return fmt.Errorf("write hello: %w", err)
	}
	if _, err := io.ReadFull(c, flight); err != nil {
		return fmt.Errorf("read flight: %w", err)
	}
	return nil
}

// One makes one complete connection of ShapeStd through addr to the echo backend.
func One(addr string, hello, buf []byte) error { return OneShape(addr, hello, buf, ShapeStd) }

// OneShape makes one complete connection of shape s through addr; buf holds at least
// s.Flight+s.Msg bytes.
func OneShape(addr string, hello, buf []byte, s Shape) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(opTimeout))
	if err := handshake(c, hello, buf[:s.Flight]); err != nil {
		return err
	}
	halfClose := func() error {
		if err := c.CloseWrite(); err != nil {
			return fmt.Errorf("half-close: %w", err)
		}
		return nil
	}
	msg := buf[s.Flight : s.Flight+s.Msg]
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if s.FinWithMsg {
		if err := halfClose(); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(c, msg); err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if !s.Fin {
		return nil
	}
	if !s.FinWithMsg {
		if err := halfClose(); err != nil {
			return err
		}
	}
	// The backend closes when it reads the FIN; its FIN comes back through the proxy. The
	// reset that Close then sends (SO_LINGER 0) only spares the client TIME_WAIT.
	if n, err := c.Read(buf[:1]); err != io.EOF {
		return fmt.Errorf("after the half-close: %d bytes, %v (want the backend's FIN)", n, err)
	}
	return nil
}

// ConnsResult is the outcome of Conns.
type ConnsResult struct {
	OK      int      `json:"ok"`
	Failed  int      `json:"failed"`
	Seconds float64  `json:"seconds"`
	PerSec  float64  `json:"perSec"`
	Errors  []string `json:"errors,omitempty"` // the first few
}

// Conns makes n connections of shape s, conc at a time, stopping early after max or when
// stop is closed (nil: never).
func Conns(addr string, hello []byte, s Shape, n, conc int, max time.Duration, stop <-chan struct{}) ConnsResult {
	return concurrently(n, conc, max, stop, func() func() error {
		buf := make([]byte, s.Flight+s.Msg)
		return func() error { return OneShape(addr, hello, buf, s) }
	})
}

// concurrently runs n operations, conc at a time, stopping early after max or when stop is
// closed (nil: never), and counts their outcomes. newOp makes one worker's operation (with
// its own buffers).
func concurrently(n, conc int, max time.Duration, stop <-chan struct{}, newOp func() func() error) ConnsResult {
	var (
		next, ok, failed atomic.Int64
		mu               sync.Mutex
		errs             []string
		wg               sync.WaitGroup
	)
	deadline := time.Now().Add(max)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := newOp()
			for next.Add(1) <= int64(n) && time.Now().Before(deadline) && !stopped(stop) {
				if err := op(); err != nil {
					failed.Add(1)
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	r := ConnsResult{OK: int(ok.Load()), Failed: int(failed.Load()), Seconds: secs, Errors: errs}
	r.PerSec = float64(r.OK) / secs
	return r
}

// BulkResult is the outcome of Bulk.
type BulkResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gbps"` // 10^9 bytes per second
}

// Bulk downloads n bytes over one connection from the bulk backend.
func Bulk(addr string, hello []byte, n int64) (BulkResult, error) {
	c, err := dial(addr)
	if err != nil {
		return BulkResult{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(120 * time.Second))
	if _, err := c.Write(hello); err != nil {
		return BulkResult{}, err
	}
	start := time.Now()
	if _, err := c.Write(wire.BulkRequest(n)); err != nil {
		return BulkResult{}, err
	}
	buf := make([]byte, 256<<10)
	var got int64
	for got < n {
		m, err := c.Read(buf)
		got += int64(m)
		if err != nil {
			return BulkResult{}, fmt.Errorf("after %d of %d bytes: %w", got, n, err)
		}
	}
	secs := time.Since(start).Seconds()
	return BulkResult{Bytes: got, Seconds: secs, GBps: float64(got) / secs / 1e9}, nil
}

// LatencyResult is the outcome of Latency, in microseconds.
type LatencyResult struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// Latency times n round trips of a 64-byte message over one connection to the echo backend,
// after warmup untimed ones.
func Latency(addr string, hello []byte, n, warmup int) (LatencyResult, error) {
	c, err := dial(addr)
	if err != nil {
		return LatencyResult{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(120 * time.Second))
	if err := handshake(c, hello, make([]byte, wire.FlightSize)); err != nil {
		return LatencyResult{}, err
	}
	msg := make([]byte, wire.MsgSize)
	d := make([]time.Duration, 0, n)
	for i := range warmup + n {
		t := time.Now()
		if _, err := c.Write(msg); err != nil {
			return LatencyResult{}, err
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			return LatencyResult{}, err
		}
		if i >= warmup {
			d = append(d, time.Since(t))
		}
	}
	slices.Sort(d)
	us := func(x time.Duration) float64 { return float64(x) / 1e3 }
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	q := func(p float64) float64 { return us(d[min(len(d)-1, int(p*float64(len(d))))]) }
	return LatencyResult{N: n, P50: q(0.50), P90: q(0.90), P99: q(0.99), Mean: us(sum) / float64(n), Min: us(d[0]), Max: us(d[len(d)-1])}, nil
}

// RRResult is the outcome of RR: requests, their rate, and the latency of one request
// while every connection is busy, in microseconds.
type RRResult struct {
	Conns    int     `json:"conns"`
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"perSec"`
	P50      float64 `json:"p50"`
	P99      float64 `json:"p99"`
}

// RR opens conns connections to the echo backend (ClientHello and flight done) and then,
// on all of them at once, sends a 64-byte request and reads its echo, again and again,
// until n requests are answered or max has passed: the shape of a pool of database clients
// sending small queries. Only the request phase is timed.
func RR(addr string, hello []byte, conns int, n int64, max time.Duration) (RRResult, error) {
	open, err := OpenIdle(addr, hello, conns, conns)
	if err != nil {
		return RRResult{}, err
	}
	defer CloseAll(open)
	var (
		next     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
	)
	start := time.Now()
	deadline := start.Add(max)
	for _, c := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(deadline.Add(opTimeout))
			msg := make([]byte, wire.MsgSize)
			var d []time.Duration
			for next.Add(1) <= n && firstErr.Load() == nil {
				t := time.Now()
				if !t.Before(deadline) {
					break
				}
				if _, err := c.Write(msg); err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				if _, err := io.ReadFull(c, msg); err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				d = append(d, time.Since(t))
			}
			mu.Lock()
			all = append(all, d...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err, _ := firstErr.Load().(error); err != nil {
		return RRResult{}, fmt.Errorf("after %d requests: %w", len(all), err)
	}
	if len(all) == 0 {
		return RRResult{}, errors.New("no request answered")
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e3 }
	return RRResult{Conns: conns, Requests: int64(len(all)), Seconds: secs, PerSec: float64(len(all)) / secs,
		P50: q(0.50), P99: q(0.99)}, nil
}

// OpenIdle opens n connections to the echo backend (ClientHello and flight done), conc at a
// time, and returns them open.
func OpenIdle(addr string, hello []byte, n, conc int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, wire.FlightSize)
			for {
				i := int(next.Add(1)) - 1
				if i >= n || firstErr.Load() != nil {
					return
				}
				c, err := dial(addr)
				if err == nil {
					c.SetDeadline(time.Now().Add(opTimeout))
					err = handshake(c, hello, buf[:wire.FlightSize])
					c.SetDeadline(time.Time{})
					if err != nil {
						c.Close()
					}
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("connection %d: %w", i, err))
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		CloseAll(conns)
		return nil, err
	}
	return conns, nil
}

// CloseAll closes every non-nil connection.
func CloseAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// TLSClientConfig is the terminate test's client: TLS 1.3 with X25519 only, so that Go and
// OpenSSL servers do the same key exchange (Go's default would offer X25519MLKEM768, which
// OpenSSL 3.0 does not have and a Go server would pick, at several times the cost).
func TLSClientConfig(sni string) *tls.Config {
	return &tls.Config{
		ServerName:         sni,
		InsecureSkipVerify: true, // the certificate is checked once by Probe, not per handshake
		MinVersion:         tls.VersionTLS13,
		CurvePreferences:   []tls.CurveID{tls.X25519},
	}
}

// Handshakes makes n TLS connections to a terminating proxy, conc at a time: full
// handshake, a 16-byte echo through the proxy to the plain backend, close.
func Handshakes(addr, sni string, n, conc int, max time.Duration) ConnsResult {
	cfg := TLSClientConfig(sni)
	return concurrently(n, conc, max, nil, func() func() error {
		msg := make([]byte, 16)
		return func() error {
			raw, err := dial(addr)
			if err != nil {
				return err
			}
			defer raw.Close()
			raw.SetDeadline(time.Now().Add(opTimeout))
			c := tls.Client(raw, cfg)
			if err := c.Handshake(); err != nil {
				return err
			}
			if _, err := c.Write(msg); err != nil {
				return err
			}
			_, err = io.ReadFull(c, msg)
			return err
		}
	})
}

// Probe makes one real TLS connection to sni through addr, verifies the certificate with
// roots (the backend's own certificate in passthrough, the proxy's in terminate mode) and
// echoes a few bytes.
func Probe(addr, sni string, roots *x509.CertPool) error {
	raw, err := dial(addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(opTimeout))
	c := tls.Client(raw, &tls.Config{ServerName: sni, RootCAs: roots})
	if err := c.Handshake(); err != nil {
		return fmt.Errorf("TLS to %s via %s: %w", sni, addr, err)
	}
	msg := []byte("probe " + sni)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("echo via %s: %w", addr, err)
	}
	if string(got) != string(msg) {
		return errors.New("echo mismatch")
	}
	return nil
}

// WaitServing calls One until it succeeds or ctx ends, every interval, and returns when it
// succeeded.
func WaitServing(ctx context.Context, addr string, hello []byte, interval time.Duration) (time.Time, error) {
	buf := make([]byte, wire.FlightSize+wire.MsgSize)
	var last error
	for {
		if last = One(addr, hello, buf); last == nil {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
