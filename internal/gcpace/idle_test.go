package gcpace

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

// TestWatch drives the decision tick by tick: a live heap of 200 MiB and a goal of 400
// (runway 200 MiB, earliest trigger 340 MiB).
func TestWatch(t *testing.T) {
	at := func(allocs, heap uint64) reading {
		return reading{allocs: allocs * mib, heap: heap * mib, live: 200 * mib, goal: 400 * mib, gogc: 100}
	}
	type tick struct {
		r       reading
		collect bool
	}
	quiet := func(allocs, heap uint64, n int, last bool) []tick {
		ts := make([]tick, n)
		for i := range ts {
			ts[i] = tick{r: at(allocs, heap)}
		}
		ts[n-1].collect = last
		return ts
	}
	cat := func(parts ...[]tick) []tick {
		var all []tick
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	for _, c := range []struct {
		name  string
		ticks []tick
	}{
		{"idle: nothing to collect", quiet(1000, 300, 20, false)},
		{"a burst whose like would cross the trigger: collected after six quiet ticks", cat(
			[]tick{{r: at(1000, 200)}, {r: at(1040, 240)}, {r: at(1090, 290)}},
			quiet(1090, 290, 6, true), // 290 + 90 > 340
			quiet(1090, 200, 10, false))},
		{"a busy tick in the quiet starts it over", cat(
			[]tick{{r: at(0, 200)}, {r: at(90, 290)}},
			quiet(90, 290, 5, false),
			[]tick{{r: at(95, 295)}},
			quiet(95, 295, 6, true))},
		{"a small burst far from the trigger: left alone", cat(
			[]tick{{r: at(0, 200)}, {r: at(20, 220)}},
			quiet(20, 220, 10, false))},
		{"under a quarter of the runway used: left alone even after a large burst", cat(
			[]tick{{r: at(0, 200)}, {r: at(150, 240)}}, // most of it freed meanwhile
			quiet(150, 240, 10, false))},
		{"the next burst is expected as large as the largest of the last", cat(
			[]tick{{r: at(0, 200)}, {r: at(130, 330)}},
			quiet(130, 330, 6, true),
			[]tick{{r: at(130, 200)}, {r: at(190, 260)}}, // 260 + 130 > 340, though 60 alone fits
			quiet(190, 260, 6, true))},
		{"allocation under Busy a tick is no burst", func() []tick {
			var ts []tick
			for i := range uint64(40) {
				ts = append(ts, tick{r: at(i/2, 330)}) // half a MiB a tick: the probes
			}
			return ts
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(IdleConfig{})
			for i, tk := range c.ticks {
				if got := w.step(tk.r); got != tk.collect {
					t.Fatalf("tick %d (%+v): collect %v, want %v", i, tk.r, got, tk.collect)
				}
			}
		})
	}
	t.Run("collector off", func(t *testing.T) {
		w := newWatch(IdleConfig{})
		for i, r := range []reading{at(0, 200), at(150, 350)} {
			if w.step(r) {
				t.Fatalf("tick %d: collected", i)
			}
		}
		for i := range 10 {
			r := at(150, 350)
			r.off = true
			if w.step(r) {
				t.Fatalf("quiet tick %d: collected with the collector off", i)
			}
		}
	})
	t.Run("a memory limit sets the goal", func(t *testing.T) {
		// Live 200 MiB under a limit that puts the goal at 300 (GOGC's would be 400): the
		// burst crosses the trigger (270) however the heap is collected before it.
		w := newWatch(IdleConfig{})
		limited := func(allocs, heap uint64) reading {
			r := at(allocs, heap)
			r.goal = 300 * mib
			return r
		}
		for i, r := range []reading{limited(0, 200), limited(90, 290)} {
			if w.step(r) {
				t.Fatalf("tick %d: collected", i)
			}
		}
		for i := range 10 {
			if w.step(limited(90, 290)) {
				t.Fatalf("quiet tick %d: collected under the limit's goal", i)
			}
		}
		// The same burst with GOGC's goal collects (the case above, unlimited).
		if r := at(0, 290); r.limited() {
			t.Fatal("GOGC's own goal taken for a limit's")
		}
		// A raised GOGC (gcpace.Start over a small heap) is GOGC's goal, not a limit's.
		if r := (reading{live: 10 * mib, goal: 74 * mib, gogc: 640}); r.limited() {
			t.Fatal("a goal of GOGC=640 taken for a limit's")
		}
	})
	t.Run("the last Bursts bursts only", func(t *testing.T) {
		w := newWatch(IdleConfig{Bursts: 2})
		for _, n := range []uint64{100, 10, 20} {
			w.remember(n * mib)
		}
		if got := w.expected(); got != 20*mib {
			t.Fatalf("expected %d MiB, want 20 (100 is three bursts ago)", got/mib)
		}
	})
}

// TestCollectWhenIdle runs it on the real runtime: a live heap, a burst of garbage that
// uses most of the runway, then quiet. One collection follows, forced; none while idle on.
func TestCollectWhenIdle(t *testing.T) {
	collected := make(chan struct{}, 10)
	idleHook = func() { collected <- struct{}{} }
	defer func() { idleHook = nil }()
	// 64 MiB live and GOGC=400: the goal is 320 MiB, the earliest trigger ~243, so that
	// the burst below (to ~164) meets no collection of the runtime's own.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	live := make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, mib)
	}
	runtime.GC()
	var log []string
	tickHook = func(r reading, w *watch) {
		log = append(log, fmt.Sprintf("allocs %d heap %d live %d goal %d burst %d quiet %d", r.allocs>>20, r.heap>>20, r.live>>20, r.goal>>20, w.burst>>20, w.quiet))
	}
	defer func() {
		tickHook = nil
		if t.Failed() {
			for _, l := range log {
				t.Log(l)
			}
		}
	}()
	stop := CollectWhenIdle(IdleConfig{Tick: 20 * time.Millisecond})
	defer stop()
	forced0 := forcedCycles()
	// A burst: 120 MiB over ~240 ms (a quarter of the runway and more; 184 + 120, less the
	// first tick or two the watch may miss, crosses the trigger).
	var burst [][]byte
	for range 12 {
		for range 10 {
			burst = append(burst, make([]byte, mib))
		}
		time.Sleep(20 * time.Millisecond)
	}
	burst = nil
	select {
	case <-collected:
	case <-time.After(5 * time.Second):
		t.Fatal("no collection after the burst")
	}
	if forcedCycles() == forced0 {
		t.Fatal("the hook ran but no forced cycle was counted")
	}
	select {
	case <-collected:
		t.Fatal("a second collection while idle")
	case <-time.After(500 * time.Millisecond):
	}
	runtime.KeepAlive(live)
	runtime.KeepAlive(burst)
}

func forcedCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
