package gcpace

import (
	"runtime"
	"runtime/metrics"
	"time"
)

// Collecting in the quiet after a burst of work. A controller works in bursts: a change is
// a few runs of the pipeline, the tenant applier's pass and the status writes, and between
// changes the process is idle. Over a large live heap the collector's concurrent mark takes
// a core for hundreds of milliseconds, and when a burst's allocations cross the collector's
// trigger that mark runs inside the burst: at 10 000 exposures on two cores
// (bench/cpscale, one tenant, gctrace), the trials whose serving run met a collection were
// served 300–680 ms after the apply, the others 170–260 ms. The runtime has no notion of
// idle time (debug.SetGCPercent and the memory limit only move the trigger), and no
// well-kept library collects at idle, hence this.
//
// CollectWhenIdle watches the process's allocation (runtime/metrics, every Tick): a tick
// that allocates Busy bytes or more is busy, and Quiet ticks in a row that are not end the
// burst. At that end it collects when the next burst, as large as the largest of the last
// few, would cross the trigger, so that the next change finds a fresh heap; it does not when
// the burst left the heap far from the trigger, nor when less than a quarter of the runway
// from the live heap to the goal is used (collecting at idle then more often than the
// collector would anyway), nor when a memory limit sets the goal (reading.limited). A
// collection it makes is one the bursts would have made soon after, in the middle of a
// change.

// IdleConfig tunes CollectWhenIdle; zero fields take the defaults.
type IdleConfig struct {
	// Tick is how often allocation is read (default 50 ms).
	Tick time.Duration
	// Busy is the allocation in one tick that makes it busy (default 1 MiB: a change at
	// scale allocates tens of MiB in a tick; a certificate probe's handshakes, ~50 KiB).
	Busy uint64
	// Quiet is how many ticks without work end a burst (default 6: the API server's round
	// trips inside one change leave gaps of a tick or two).
	Quiet int
	// Bursts is how many of the last bursts the expected next one is the largest of
	// (default 8).
	Bursts int
}

func (c IdleConfig) withDefaults() IdleConfig {
	if c.Tick <= 0 {
		c.Tick = 50 * time.Millisecond
	}
	if c.Busy == 0 {
		c.Busy = 1 << 20
	}
	if c.Quiet <= 0 {
		c.Quiet = 6
	}
	if c.Bursts <= 0 {
		c.Bursts = 8
	}
	return c
}

// CollectWhenIdle collects in the quiet after a burst of allocation, as the comment above
// says, until stop is called (which waits for a collection in progress to finish).
func CollectWhenIdle(cfg IdleConfig) (stop func()) {
	cfg = cfg.withDefaults()
	w := newWatch(cfg)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(cfg.Tick)
		defer t.Stop()
		sample := []metrics.Sample{
			{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}, {Name: "/gc/gogc:percent"},
		}
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			metrics.Read(sample)
			r := reading{allocs: sample[0].Value.Uint64(), heap: sample[1].Value.Uint64(),
				live: sample[2].Value.Uint64(), goal: sample[3].Value.Uint64(), gogc: gogc(sample[4]), off: gogc(sample[4]) < 0}
			if tickHook != nil {
				tickHook(r, w)
			}
			if w.step(r) {
				runtime.GC()
				if idleHook != nil {
					idleHook()
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// Set by tests only: idleHook runs after each collection CollectWhenIdle makes, tickHook
// before each decision (a failing test shows the readings).
var (
	idleHook func()
	tickHook func(reading, *watch)
)

// reading is one tick's view of the heap.
type reading struct {
	allocs uint64 // bytes allocated since the process started
	heap   uint64 // bytes of heap objects, live or not yet swept
	live   uint64 // the heap the last collection found live
	goal   uint64 // the heap goal of the current cycle
	gogc   int    // GOGC in force
	off    bool   // the collector is off (GOGC=off, a first load)
}

// limited says the memory limit, not GOGC, sets the goal (the live heap is past half a
// container's limit): the collector then collects as often as the limit makes it, every
// burst crosses the trigger whatever is collected before it, and a collection at idle is
// one more, late after a long burst, in the way of the next change. In bench/cpscale's
// 512 MiB container at 1 000 tenants (live heap ~310 MiB, runway ~130) collecting at idle
// as elsewhere took delete → refused from p50 337 ms to 618. Stacks and globals, which
// GOGC's goal also counts, are left out: a goal under this one is the limit's.
func (r reading) limited() bool {
	return r.gogc > 0 && r.goal < r.live+r.live/100*uint64(r.gogc)
}

// watch decides, tick by tick, when to collect: the pure part of CollectWhenIdle.
type watch struct {
	cfg    IdleConfig
	seen   bool   // a reading came before: allocs is a base
	allocs uint64 // at the last reading
	burst  uint64 // bytes the current burst allocated (0: none)
	quiet  int    // ticks since the burst's last busy one
	recent []uint64
	next   int // where recent takes the next burst
}

func newWatch(cfg IdleConfig) *watch {
	cfg = cfg.withDefaults()
	return &watch{cfg: cfg, recent: make([]uint64, 0, cfg.Bursts)}
}

// The collector starts a cycle somewhere between 0.7 and 0.95 of the runway from the live
// heap to the goal (the runtime's pacer, mgcpacer.go: minTriggerRatio, maxTriggerRatio);
// the earliest is what a burst must stay under.
const triggerNum, triggerDen = 7, 10

// step takes a reading and says whether to collect now.
func (w *watch) step(r reading) bool {
	d := uint64(0)
	if w.seen && r.allocs > w.allocs {
		d = r.allocs - w.allocs
	}
	w.seen, w.allocs = true, r.allocs
	if d >= w.cfg.Busy {
		w.burst += d
		w.quiet = 0
		return false
	}
	if w.burst == 0 {
		return false
	}
	w.burst += d
	if w.quiet++; w.quiet < w.cfg.Quiet {
		return false
	}
	w.remember(w.burst)
	w.burst, w.quiet = 0, 0
	if r.off || r.goal <= r.live || r.heap <= r.live || r.limited() {
		return false
	}
	runway := r.goal - r.live
	trigger := r.live + runway/triggerDen*triggerNum
	used := r.heap - r.live
	return used >= runway/4 && r.heap+w.expected() > trigger
}

// remember keeps a burst's size among the last cfg.Bursts.
func (w *watch) remember(n uint64) {
	if len(w.recent) < w.cfg.Bursts {
		w.recent = append(w.recent, n)
		return
	}
	w.recent[w.next] = n
	w.next = (w.next + 1) % w.cfg.Bursts
}

// expected is the next burst's size: the largest of the last ones.
func (w *watch) expected() uint64 {
	var m uint64
	for _, n := range w.recent {
		m = max(m, n)
	}
	return m
}
