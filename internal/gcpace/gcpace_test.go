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
	waitCollected(t, adjusted)
	if got := readGOGC(); got < 800 {
		t.Fatalf("GOGC after a collection with a small live heap = %d, want ≥ 800 (64 MiB headroom)", got)
	}
	c1 := cycles()
	churn(256 << 20)
	paced := cycles() - c1
	t.Logf("collections over 256 MiB of garbage: %d at GOGC=100, %d paced", unpaced, paced)
	// 64 MiB of headroom: a collection every 64 MiB or more, and one more at most for where
	// the first one falls. Go's default makes 9 or more here.
	if paced > 5 {
		t.Errorf("paced: %d collections over 256 MiB of garbage (GOGC=100: %d); want at most 5", paced, unpaced)
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
	// Turned back on (as the first load's end does), the next collection paces it.
	debug.SetGCPercent(100)
	for deadline := time.Now().Add(10 * time.Second); readGOGC() <= 100; {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d long after the collector came back on; want the paced value", readGOGC())
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}
