// Package gcpace gives Go's garbage collector a headroom over a small live heap that follows
// the allocation rate, so that a server whose live heap is a few MiB neither collects every
// few MiB it allocates nor lets its heap run through tens of MiB of memory it never needed.
// After every collection it sets GOGC so that the next one starts once the heap has grown by
// the larger of the live heap (GOGC=100, Go's default) and the headroom: what the process
// allocates in a second at the rate since the collection before, at least 4 MiB (the
// runtime's own minimum) and at most the limit given to Start, and never less than it was:
//
//	stop := gcpace.Start(64 << 20) // a headroom of up to 64 MiB, while the live heap is below it
//	defer stop()                   // GOGC back to what it was
//
// Why a headroom: terminating TLS allocates tens of KiB per handshake (crypto/tls), and with
// GOGC=100 over a live heap of a few MiB the collector runs dozens of times a second under
// load: a tenth of the CPU per handshake went to it. A fixed GOGC of 400 would cost the same
// over a heap of 100 000 routes as five times that heap; a headroom costs at most itself.
//
// Why one that follows the rate: every byte of headroom the heap grows into for the first
// time is a page fault, and on a virtual machine whose page tables the host shadows that is
// 10 µs per 4 KiB page. A fixed 64 MiB made a relayed connection (about 800 bytes of
// garbage) pay a quarter of a fault, 2–4 % of its CPU, for its first 80 000 connections
// after a start, and grew the heap of a proxy that only relays by 64 MiB it never needed.
//
// Go has no setting for a minimum heap goal (its own is 4 MiB × GOGC/100), and no well-kept
// library does this with today's runtime/metrics, hence this small one.
package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
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

// window is how much of the recent allocation the headroom holds: the collector runs about
// once per window while the rate is below the limit's worth per window.
const window = time.Second

// minElapsed is the shortest time a rate is measured over: a collection right after another
// (Start's caller freeing memory, a forced one) must not turn a few KiB into a high rate.
const minElapsed = 100 * time.Millisecond

// Headroom is the next headroom of a process that allocated allocated bytes in elapsed
// since the last adjustment, which set prev: the allocation of one window at that rate
// (elapsed counted as minElapsed at least), at least prev and at most limit.
//
// It never falls. A headroom that fell after a quiet spell would let the runtime return the
// pages above the lower heap goal to the OS, and the next burst (of handshakes, say) would
// fault them in again, 10 µs a page on a virtual machine: growing into memory costs more
// than keeping it. So a process keeps the headroom of its busiest second, as before it
// kept the limit from the start.
func Headroom(allocated uint64, elapsed time.Duration, prev, limit uint64) uint64 {
	h := max(uint64(minHeap), prev)
	// In float: bytes × nanoseconds overflows 64 bits past a few GiB.
	h = max(h, uint64(float64(allocated)*float64(window)/float64(max(elapsed, minElapsed))))
	return min(h, limit)
}

type pacer struct {
	limit   uint64
	mu      sync.Mutex
	stopped bool
	sample  []metrics.Sample
	// allocs and at are the cumulative bytes allocated, and when, at the last adjustment
	// (or at Start); headroom is the one it set (minHeap at Start).
	allocs   uint64
	at       time.Time
	headroom uint64
}

// sentinel is an object whose finalizer runs once after each collection: the finalizer
// adjusts GOGC and arms a new one. It holds a pointer so that it is not a tiny allocation
// (finalizers of tiny objects may never run).
type sentinel struct{ p *pacer }

// Start paces the collector with a headroom of up to limit bytes (see the package doc)
// until stop is called, which sets GOGC back to its value before Start. It changes nothing
// before the first collection. It does not touch a collector that is off (GOGC=off, for
// example while a large configuration loads): the adjustment skips it.
func Start(limit uint64) (stop func()) {
	p := &pacer{limit: limit, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}, {Name: "/gc/heap/allocs:bytes"},
	}}
	metrics.Read(p.sample)
	before := gogc(p.sample[1])
	p.allocs, p.at, p.headroom = p.sample[2].Value.Uint64(), time.Now(), minHeap
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
	now, allocs := time.Now(), p.sample[2].Value.Uint64()
	p.headroom = Headroom(allocs-p.allocs, now.Sub(p.at), p.headroom, p.limit)
	p.allocs, p.at = allocs, now
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
