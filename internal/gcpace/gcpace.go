// Package gcpace gives Go's garbage collector a fixed amount of headroom over a small live
// heap, so that a server whose live heap is a few MiB does not collect every few MiB it
// allocates. After every collection it sets GOGC so that the next one starts once the heap
// has grown by the larger of the live heap (GOGC=100, Go's default) and the headroom:
//
//	stop := gcpace.Start(64 << 20) // collect every 64 MiB at least, while the live heap is below it
//	defer stop()                   // GOGC back to what it was
//
// Why: terminating TLS allocates tens of KiB per handshake (crypto/tls), and with GOGC=100
// over a live heap of a few MiB the collector runs dozens of times a second under load: a
// tenth of the CPU per handshake went to it. A fixed GOGC of 400 would cost the same over
// a heap of 100 000 routes as five times that heap; a headroom costs at most itself. Go has
// no setting for a minimum heap goal (its own is 4 MiB × GOGC/100), and no well-kept library
// does this with today's runtime/metrics, hence this small one.
//
// It also moves collections out of a burst of work into the quiet after it (idle.go), for
// a process that works in bursts over a large live heap, a controller's changes:
//
//	stop := gcpace.CollectWhenIdle(gcpace.IdleConfig{})
//	defer stop()
package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// minHeap is the runtime's own minimum heap goal at GOGC=100 (defaultHeapMinimum): it
// scales with GOGC, so Percent caps GOGC where that minimum would pass the headroom.
const minHeap = 4 << 20

// Percent is the GOGC that makes the next collection start after live+headroom bytes (or
// 2×live when that is more): at least 100, and never so high that the runtime's minimum
// heap goal (4 MiB × GOGC/100) would exceed the headroom.
func Percent(live, headroom uint64) int {
	if headroom <= live {
		return 100
	}
	pct := headroom * 100 / max(live, minHeap)
	return int(max(pct, 100))
}

type pacer struct {
	headroom uint64
	mu       sync.Mutex
	stopped  bool
	sample   []metrics.Sample
}

// sentinel is an object whose finalizer runs once after each collection: the finalizer
// adjusts GOGC and arms a new one. It holds a pointer so that it is not a tiny allocation
// (finalizers of tiny objects may never run).
type sentinel struct{ p *pacer }

// Start paces the collector with headroom bytes (see the package doc) until stop is
// called, which sets GOGC back to its value before Start. It changes nothing before the
// first collection. It does not touch a collector that is off (GOGC=off, for example while
// a large configuration loads): the adjustment skips it.
func Start(headroom uint64) (stop func()) {
	p := &pacer{headroom: headroom, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"},
	}}
	metrics.Read(p.sample[1:])
	before := gogc(p.sample[1])
	p.arm()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.stopped {
			p.stopped = true
			debug.SetGCPercent(before)
		}
	}
}

func (p *pacer) arm() {
	runtime.SetFinalizer(&sentinel{p: p}, func(s *sentinel) { s.p.collected() })
}

// collected runs on the finalizer goroutine after a collection.
func (p *pacer) collected() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	metrics.Read(p.sample)
	if cur := gogc(p.sample[1]); cur >= 0 { // a collector that is off stays off
		if pct := Percent(p.sample[0].Value.Uint64(), p.headroom); pct != cur {
			debug.SetGCPercent(pct)
		}
	}
	p.arm()
	if testHook != nil {
		testHook()
	}
}

// testHook, when set (by tests only), runs after each adjustment.
var testHook func()

// gogc is GOGC from its runtime/metrics sample: -1 when the collector is off.
func gogc(s metrics.Sample) int { return int(int64(s.Value.Uint64())) }
