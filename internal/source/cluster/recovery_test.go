package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// The watchdog reads directly from the first successful probe after an outage that broke a
// watch until the window has passed, keeps reading directly while the API server is down
// again, and asks for a translation at once on recovery and every poll interval meanwhile.
func TestRecoveryWindow(t *testing.T) {
	var down atomic.Bool
	r := startRecovery(t, func() error {
		if down.Load() {
			return errors.New("down")
		}
		return nil
	})

	kicked := func(within time.Duration) bool {
		select {
		case <-r.kick:
			return true
		case <-time.After(within):
			return false
		}
	}
	time.Sleep(30 * time.Millisecond)
	if r.direct() || kicked(30*time.Millisecond) {
		t.Fatal("direct reads or a translation without an outage")
	}
	down.Store(true)
	time.Sleep(15 * time.Millisecond)
	r.watchBroke()
	time.Sleep(15 * time.Millisecond)
	if r.direct() || kicked(30*time.Millisecond) {
		t.Fatal("direct reads or a translation while down (the cache is the last view)")
	}
	down.Store(false)
	start := time.Now()
	if !kicked(150 * time.Millisecond) {
		t.Fatal("no translation on recovery")
	}
	if !r.direct() {
		t.Fatal("not reading directly after recovery")
	}
	if !kicked(150 * time.Millisecond) {
		t.Fatal("no periodic translation during the window")
	}
	// Down again inside the window: reads stay direct (a stale cache must not be read).
	down.Store(true)
	time.Sleep(700 * time.Millisecond)
	if !r.direct() {
		t.Fatal("window closed while the API server is down again")
	}
	drain(r)
	down.Store(false)
	if !kicked(150 * time.Millisecond) {
		t.Fatal("no translation on the second recovery")
	}
	time.Sleep(700 * time.Millisecond)
	if r.direct() {
		t.Fatalf("still reading directly %s after recovery", time.Since(start))
	}
	drain(r)
	if kicked(60 * time.Millisecond) {
		t.Fatal("translation requested after the window")
	}
}

// startRecovery starts a watchdog whose probe is probe, with intervals short enough for a
// test, stopped when the test ends.
func startRecovery(t *testing.T, probe func() error) *recovery {
	r := newRecovery(func(context.Context) error { return probe() }, slog.New(slog.DiscardHandler))
	r.interval, r.poll, r.window = 5*time.Millisecond, 20*time.Millisecond, 500*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Start(ctx)
	return r
}

// waitDirect waits up to two seconds for r to read directly, and fails with msg if it does
// not.
func waitDirect(t *testing.T, r *recovery, msg string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !r.direct() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noWindow fails if what happened (cause) opened a window of direct reads or asked for a
// translation.
func noWindow(t *testing.T, r *recovery, cause string) {
	t.Helper()
	if r.direct() {
		t.Fatal(cause + " opened a window of direct reads")
	}
	select {
	case <-r.kick:
		t.Fatal(cause + " asked for a translation")
	default:
	}
}

func drain(r *recovery) {
	for {
		select {
		case <-r.kick:
		default:
			return
		}
	}
}

// One failed probe is a blip, not an outage: it opens no window of direct reads.
func TestRecoveryIgnoresOneFailedProbe(t *testing.T) {
	var blips atomic.Int32
	blips.Store(1)
	r := startRecovery(t, func() error {
		if blips.Add(-1) >= 0 {
			return errors.New("slow answer")
		}
		return nil
	})
	time.Sleep(60 * time.Millisecond)
	noWindow(t, r, "a single failed probe")
	// Two in a row with a broken watch are an outage: the answer after them opens the
	// window.
	r.watchBroke()
	blips.Store(2)
	waitDirect(t, r, "two failed probes in a row and an answer opened no window")
}

// An API server that answers the probe too slowly while every watch holds is busy, not gone:
// the cache is current, and a window of direct lists would only load it more (at 10 000
// exposures they could not finish in time, and a data plane applied nothing for minutes).
// Once a watch breaks, the same failed probes are an outage.
func TestRecoverySlowIsNoOutage(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	r := startRecovery(t, func() error {
		if slow.Load() {
			return context.DeadlineExceeded
		}
		return nil
	})
	time.Sleep(60 * time.Millisecond) // a dozen slow answers
	slow.Store(false)
	time.Sleep(60 * time.Millisecond)
	noWindow(t, r, "slow answers without a broken watch")
	// A watch broken long before the probes failed is no part of this outage either.
	r.watchBroke()
	time.Sleep(2*r.interval + probeTimeout + 100*time.Millisecond)
	slow.Store(true)
	time.Sleep(60 * time.Millisecond)
	slow.Store(false)
	time.Sleep(60 * time.Millisecond)
	if r.direct() {
		t.Fatal("a watch that broke before this outage opened a window")
	}
	// The same failed probes with a watch broken meanwhile: an outage.
	slow.Store(true)
	time.Sleep(30 * time.Millisecond)
	r.watchBroke()
	time.Sleep(30 * time.Millisecond)
	slow.Store(false)
	waitDirect(t, r, "failed probes with a broken watch opened no window")
}

// A refused probe finds the API server gone, not slow: client-go's reflectors retry a refused
// watch with backoff without reporting it, so the return opens the window without a
// reported broken watch.
func TestRecoveryRefusedIsOutage(t *testing.T) {
	var down atomic.Bool
	r := startRecovery(t, func() error {
		if down.Load() {
			return errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return nil
	})
	down.Store(true)
	time.Sleep(60 * time.Millisecond)
	down.Store(false)
	waitDirect(t, r, "refused probes opened no window")
}
