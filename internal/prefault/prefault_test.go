package prefault

import (
	"errors"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

// faultsEnv names the child mode of TestHeap: a fresh process, so that its heap has no free
// pages left over from other tests.
const faultsEnv = "PREFAULT_TEST_CHILD"

// The allocations after Heap take (almost) no page faults; the same allocations without it
// take one per page. Each runs in a fresh process of this test binary.
func TestHeap(t *testing.T) {
	const work = 32 << 20 // bytes the child allocates and writes after the call
	if mode := os.Getenv(faultsEnv); mode != "" {
		child(mode, work)
		return
	}
	faults := func(mode string) int {
		s := testutil.RunTestInChild(t, "TestHeap", faultsEnv+"="+mode)
		if e, ok := strings.CutPrefix(s, "madvise: "); ok {
			testutil.Require(t, "Linux 5.14 or later (madvise MADV_POPULATE_WRITE)", errors.New(strings.TrimSpace(e)))
		}
		n, err := strconv.Atoi(strings.Fields(s)[0])
		if err != nil {
			t.Fatalf("child %s printed %q", mode, s)
		}
		return n
	}
	pages := work / os.Getpagesize()
	plain, pre := faults("plain"), faults("prefault")
	t.Logf("page faults while writing %d pages: %d without Heap, %d after it", pages, plain, pre)
	// The measure works: fresh memory faults at least once per page. (Under the race
	// detector the counts also hold the faults of its shadow memory, which Heap does not
	// back: hence a difference, not a bound on pre.)
	if plain < pages*9/10 {
		t.Fatalf("without Heap: %d page faults for %d fresh pages, want one per page or more", plain, pages)
	}
	if saved := plain - pre; saved < pages*3/4 {
		t.Errorf("Heap saved %d page faults of %d pages written, want at least three in four", saved, pages)
	}
}

// child prints the minor page faults of writing work bytes of new heap, with the collector
// off as Heap's callers run it, after Heap(2*work) when mode is "prefault"; or "madvise: "
// and the error.
func child(mode string, work int) {
	debug.SetGCPercent(-1)
	if mode == "prefault" {
		if err := Heap(int64(2 * work)); err != nil {
			println("madvise: " + err.Error())
			os.Exit(0)
		}
	}
	println(testutil.HeapWriteFaults(work))
	os.Exit(0)
}
