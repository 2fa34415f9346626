package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, 1600},        // the runtime's 4 MiB minimum goal × 16 = the headroom
		{2 * mib, 64 * mib, 1600},  // below 4 MiB, the same
		{8 * mib, 64 * mib, 800},   // next collection after 8 + 64 MiB
		{32 * mib, 64 * mib, 200},  // 32 + 64
		{64 * mib, 64 * mib, 100},  // the live heap is the headroom: Go's default
		{500 * mib, 64 * mib, 100}, // a large heap: Go's default, never less
		{63 * mib, 64 * mib, 101},  // just under: barely above the default
		{1 * mib, 0, 100},          // no headroom: Go's default
		{100 * mib, 1 << 30, 1024}, // 100 MiB + 1 GiB
		{3 * mib, 2 * mib, 100},    // headroom below the runtime's own minimum
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

func TestHeadroom(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name              string
		allocated         uint64
		elapsed           time.Duration
		prev, limit, want uint64
	}{
		{"a second's allocation", 10 * mib, time.Second, 4 * mib, 64 * mib, 10 * mib},
		{"the rate, not the amount", 5 * mib, 500 * time.Millisecond, 4 * mib, 64 * mib, 10 * mib},
		{"a fast cycle", 4 * mib, 50 * time.Millisecond, 4 * mib, 64 * mib, 40 * mib}, // measured over 100 ms
		{"a collection right after another", 256 << 10, time.Millisecond, 4 * mib, 64 * mib, 4 * mib},
		{"capped by the limit", 200 * mib, time.Second, 4 * mib, 64 * mib, 64 * mib},
		{"never below the runtime's minimum", 1 * mib, 2 * time.Second, 0, 64 * mib, 4 * mib},
		{"never falls", 0, 2 * time.Minute, 48 * mib, 64 * mib, 48 * mib},
		{"grows with the rate", 20 * mib, time.Second, 10 * mib, 64 * mib, 20 * mib},
		{"a limit below the minimum", 100 * mib, time.Second, 4 * mib, 2 * mib, 2 * mib},
		{"no overflow on a large heap", 64 << 30, 2 * time.Hour, 4 * mib, 1 << 40, 9544371},
	} {
		if got := Headroom(c.allocated, c.elapsed, c.prev, c.limit); got != c.want {
			t.Errorf("%s: Headroom(%d MiB, %v, %d MiB, %d MiB) = %d, want %d", c.name, c.allocated/mib, c.elapsed, c.prev/mib, c.limit/mib, got, c.want)
		}
	}
}

// waitCollected forces a collection and waits until the pacer has adjusted after it.
func waitCollected(t *testing.T, adjusted chan struct{}) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		select {
		case <-adjusted:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("the pacer did not run after a collection")
}

func readGOGC() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return gogc(s[0])
}

func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of garbage in 32 KiB pieces, as a busy TLS server would.
func churn(n int) {
	for i := 0; i < n; i += 32 << 10 {
		sink = make([]byte, 32<<10)
	}
	sink = nil
}

func hook(t *testing.T) chan struct{} {
	adjusted := make(chan struct{}, 64)
	testHook = func() {
		select {
		case adjusted <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { testHook = nil })
	return adjusted
}

func TestStartPacesAndStopRestores(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	adjusted := hook(t)

	// Go's default first: a small live heap collects every few MiB of garbage.
	runtime.GC()
	c0 := cycles()
	churn(256 << 20)
	unpaced := cycles() - c0

	stop := Start(64 << 20)
	// Allocating slowly (1 MiB per 100 ms or more), the headroom is the rate's second: 4 to
	// 16 MiB (GOGC 100 to 400 over a live heap below 4 MiB), where a fixed one was 64 MiB.
	for range 4 {
		churn(1 << 20)
		time.Sleep(100 * time.Millisecond)
		waitCollected(t, adjusted)
	}
	if got := readGOGC(); got > 400 || got < 100 {
		t.Errorf("GOGC after allocating 1 MiB per 100 ms = %d, want 100 to 400 (a headroom of 4 to 16 MiB)", got)
	}
	c1 := cycles()
	churn(256 << 20)
	paced := cycles() - c1
	t.Logf("collections over 256 MiB of garbage allocated at once: %d at GOGC=100, %d paced", unpaced, paced)
	// At this rate the headroom is the limit: a collection every 64 MiB or more after the
	// first (due after the slow phase's headroom, the rate being unknown before it), one more at
	// most for where they fall. Go's default makes 9 or more here.
	if paced > 6 {
		t.Errorf("paced: %d collections over 256 MiB of garbage (GOGC=100: %d); want at most 6", paced, unpaced)
	}
	if got := readGOGC(); got < 800 {
		t.Fatalf("GOGC after fast allocation with a small live heap = %d, want ≥ 800 (64 MiB headroom)", got)
	}

	// Fast allocation raised the headroom; it stays (see Headroom) while the process
	// allocates slowly.
	for range 3 {
		churn(1 << 20)
		time.Sleep(100 * time.Millisecond)
		waitCollected(t, adjusted)
		if got := readGOGC(); got < 800 {
			t.Fatalf("GOGC after slow allocation that followed fast = %d, want it kept ≥ 800", got)
		}
	}

	stop()
	if got := readGOGC(); got != 100 {
		t.Errorf("GOGC after stop = %d, want 100 as before Start", got)
	}
	// Stopped, the pacer no longer changes GOGC.
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if got := readGOGC(); got != 100 {
		t.Errorf("GOGC after stop and a collection = %d, want 100", got)
	}
}

func TestCollectorOffStaysOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	adjusted := hook(t)
	stop := Start(64 << 20)
	defer stop()
	waitCollected(t, adjusted) // runtime.GC collects even with the collector off
	if got := readGOGC(); got != -1 {
		t.Fatalf("GOGC = %d after a collection while the collector was off; want it left off (-1)", got)
	}
	// Turned back on (as the first load's end does), the next collection paces it: over
	// garbage allocated fast, with more than the minimum headroom.
	debug.SetGCPercent(100)
	for deadline := time.Now().Add(10 * time.Second); readGOGC() <= 100; {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d long after the collector came back on; want the paced value", readGOGC())
		}
		churn(32 << 20)
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}
