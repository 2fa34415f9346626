//go:build linux

package relay

import (
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A pair detached from one relay and resumed on another, back and forth while bulk flows
// both ways and the readers pause (so that bytes wait in the relay's buffers and pipes):
// every byte arrives once and in order, half-closes after the last hop are passed on, and
// the counts of every hop add up.
func TestDetachResume(t *testing.T) {
	relays := [2]*Relay{newRelay(t, 1), newRelay(t, 1)}
	f := start(t, relays[0], listen(t), Options{})
	const size = 8 << 20
	up, down := make([]byte, size), make([]byte, size)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range up {
		up[i], down[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	deadline := time.Now().Add(60 * time.Second)
	f.client.SetDeadline(deadline)
	f.backend.SetDeadline(deadline)
	var paused atomic.Bool
	defer paused.Store(false) // a failed hop must not leave the readers waiting
	var wg sync.WaitGroup
	send := func(c *net.TCPConn, b []byte) {
		defer wg.Done()
		for len(b) > 0 {
			n, err := c.Write(b[:min(len(b), 64<<10)])
			if err != nil {
				t.Error(err)
				return
			}
			b = b[n:]
		}
		c.CloseWrite()
	}
	recv := func(c *net.TCPConn, into *[]byte, errp *error) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			for paused.Load() {
				time.Sleep(time.Millisecond)
			}
			n, err := c.Read(buf)
			*into = append(*into, buf[:n]...)
			if err == io.EOF {
				return
			}
			if err != nil {
				*errp = err
				return
			}
		}
	}
	var gotUp, gotDown []byte
	var errUp, errDown error
	wg.Add(4)
	go send(f.client, up)
	go send(f.backend, down)
	go recv(f.backend, &gotUp, &errUp)
	go recv(f.client, &gotDown, &errDown)

	var moved [2]int64
	pendingSeen := 0
	pair := f.pair
	for hop := range 6 {
		paused.Store(true)
		time.Sleep(30 * time.Millisecond) // the senders fill the relay's buffers meanwhile
		got := make(chan Detached, 1)
		var derr error
		pair.Detach(1<<20, func(d Detached, err error) { derr = err; got <- d })
		det := <-got
		if derr != nil {
			if errors.Is(derr, ErrNotDetached) && hop > 0 {
				t.Logf("hop %d: %v (the streams ended)", hop, derr)
				paused.Store(false)
				break
			}
			t.Fatalf("hop %d: %v", hop, derr)
		}
		pendingSeen += len(det.Pending[0]) + len(det.Pending[1])
		moved[0] += det.Bytes[0]
		moved[1] += det.Bytes[1]
		var err error
		if pair, err = relays[(hop+1)%2].Resume(det, Options{}, func(res Result) { f.res <- res }); err != nil {
			t.Fatalf("hop %d: resume: %v", hop, err)
		}
		paused.Store(false)
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if errUp != nil || errDown != nil {
		select {
		case res := <-f.res:
			t.Errorf("the pair ended with %+v", res)
		default:
		}
		t.Fatal(errUp, errDown)
	}
	if sha256.Sum256(gotUp) != sha256.Sum256(up) || sha256.Sum256(gotDown) != sha256.Sum256(down) {
		t.Fatalf("got %d and %d bytes, not the %d sent each way, or not in order", len(gotUp), len(gotDown), size)
	}
	res := f.wait(t, 5*time.Second)
	if res.Err != nil || moved[0]+res.Bytes[0] != size || moved[1]+res.Bytes[1] != size {
		t.Fatalf("last hop %+v; with the hops before: %d and %d bytes, want %d each", res, moved[0]+res.Bytes[0], moved[1]+res.Bytes[1], size)
	}
	if pendingSeen == 0 {
		t.Errorf("no hop carried bytes in flight: the test did not test them")
	}
	t.Logf("bytes in flight carried over the hops: %d", pendingSeen)
}

// A pair that is not relaying yet (dialed, not attached) is left alone by Detach.
func TestDetachRefusesDialed(t *testing.T) {
	r := newRelay(t, 1)
	ln := listen(t)
	p, _ := dialAccepted(t, r, ln, DialOptions{Timeout: 5 * time.Second})
	defer p.Abandon()
	errc := make(chan error, 1)
	p.Detach(1<<20, func(_ Detached, err error) { errc <- err })
	if err := <-errc; !errors.Is(err, ErrNotDetached) {
		t.Fatalf("Detach of a dialed pair: %v, want ErrNotDetached", err)
	}
}
