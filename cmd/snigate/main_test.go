package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

func TestGCLimits(t *testing.T) {
	for _, c := range []struct {
		memMax, limit, softLimit int64
		headroom                 uint64
	}{
		{0, 512 << 20, 0, 64 << 20},                 // no limit (or no cgroup)
		{256 << 20, 128 << 20, 241591905, 32 << 20}, // 256 MiB container: half of it, nine tenths, an eighth
		{512 << 20, 256 << 20, 483183819, 64 << 20},
		{16 << 30, 512 << 20, 15461882262, 64 << 20}, // 16 GiB: the caps
	} {
		if got := firstLoadHeapLimit(c.memMax); got != c.limit {
			t.Errorf("firstLoadHeapLimit(%d) = %d, want %d", c.memMax, got, c.limit)
		}
		if got := gcHeadroom(c.memMax); got != c.headroom {
			t.Errorf("gcHeadroom(%d) = %d, want %d", c.memMax, got, c.headroom)
		}
		if got := memoryLimit(c.memMax); got != c.softLimit {
			t.Errorf("memoryLimit(%d) = %d, want %d", c.memMax, got, c.softLimit)
		}
	}
}

func TestFirstLoadPrefault(t *testing.T) {
	const limit = 512 << 20
	for _, c := range []struct {
		configBytes, heapLimit, want int64
	}{
		{4 << 20, limit, 48 << 20},    // 12 bytes of heap per byte of files
		{100 << 20, limit, 256 << 20}, // half the first load's heap limit at most
		{4 << 20, 64 << 20, 32 << 20}, // a small container's limit
		{1 << 20, limit, 12 << 20},
		{512 << 10, limit, 0}, // 6 MiB: below 8 MiB, nothing
		{0, limit, 0},         // no files read
	} {
		if got := firstLoadPrefault(c.configBytes, c.heapLimit); got != c.want {
			t.Errorf("firstLoadPrefault(%d, %d) = %d, want %d", c.configBytes, c.heapLimit, got, c.want)
		}
	}
}

// relaxGCChild names the child mode of TestRelaxGC, run in a fresh process of the test
// binary: the collector's settings and the heap's free pages are per process.
const relaxGCChild = "SNIGATE_RELAXGC_CHILD"

// relaxGC turns the collector off, backs the heap the load will allocate (a first load then
// writes it without a page fault per page), and restores the collector after.
func TestRelaxGC(t *testing.T) {
	const configBytes, work = 2 << 20, 16 << 20 // files of 2 MiB: 24 MiB prefaulted
	if v := os.Getenv(relaxGCChild); v != "" {
		n, _ := strconv.ParseInt(v, 10, 64)
		relaxGCAndWrite(n, work)
		return
	}
	faults := func(configBytes int) int {
		out := testutil.RunTestInChild(t, "TestRelaxGC", relaxGCChild+"="+strconv.Itoa(configBytes))
		f := strings.Fields(out)
		if len(f) != 3 || f[0] != "-1" || f[2] != "100" {
			t.Fatalf("child printed %q, want the collector's percent in the load (-1), page faults, and after it (100)", out)
		}
		n, _ := strconv.Atoi(f[1])
		return n
	}
	pages := work / os.Getpagesize()
	// One byte of files is below firstLoadPrefault's floor: nothing is prefaulted.
	plain, pre := faults(1), faults(configBytes)
	t.Logf("page faults while writing %d pages: %d for a tiny load, %d for files of %d bytes", pages, plain, pre, configBytes)
	// As in package prefault's test, a difference: under the race detector the counts also
	// hold the faults of its shadow memory.
	if saved := plain - pre; saved < pages*3/4 {
		t.Errorf("relaxGC saved %d page faults of %d pages written, want at least three in four", saved, pages)
	}
}

// relaxGCAndWrite runs relaxGC for files of configBytes, writes work bytes of new heap,
// restores, and prints the collector's percent during the load, the minor page faults of
// the writes, and the percent after.
func relaxGCAndWrite(configBytes int64, work int) {
	restore := relaxGC(configBytes)
	during := debug.SetGCPercent(-1)
	faults := testutil.HeapWriteFaults(work)
	restore()
	println(during, faults, debug.SetGCPercent(100))
	os.Exit(0)
}

// Flags that cannot work together are refused before anything connects to an API server.
func TestControllerFlagConflicts(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--provision", "--dataplane-image", "x", "--proxy"}, "--provision serves traffic from the provisioned data planes"},
		{[]string{"--provision", "--dataplane-image", "x", "--load-balancer-addresses", "not-a-prefix"}, "--load-balancer-addresses"},
		{[]string{"--local-addresses", "127.0.0.1"}, "--local-addresses"},
	} {
		err := runController(append(c.args, "--kubeconfig", "/nonexistent/kubeconfig"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("snigate controller %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
