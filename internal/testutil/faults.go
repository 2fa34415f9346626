package testutil

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// HeapWriteFaults allocates work bytes of heap in 8 KiB slices, writes a byte on every page
// of them, and returns the minor page faults the process took meanwhile: about one per page
// of fresh heap, none for heap already backed (package prefault). The slices stay live until
// it returns, so no write lands on memory another one freed. Under the race detector the
// count also holds the faults of the detector's shadow memory.
func HeapWriteFaults(work int) int64 {
	const size = 8 << 10
	page := os.Getpagesize()
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	keep := make([][]byte, 0, work/size)
	for range work / size {
		b := make([]byte, size)
		for i := 0; i < size; i += page {
			b[i] = 1 // the allocator does not zero fresh spans: the write is the first touch
		}
		keep = append(keep, b)
	}
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	runtime.KeepAlive(keep)
	return after.Minflt - before.Minflt
}

// RunTestInChild runs test (a test function's name) of the current test binary again in a
// fresh process, with env (KEY=value) added to CleanEnv's environment, and returns what it
// printed. A test measuring what is per process (page faults, the collector's settings)
// runs its measurement there, selected by a variable of env, so that no earlier test's heap
// counts. A child that fails fails t.
func RunTestInChild(t testing.TB, test string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(CleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a child process: %v\n%s", test, err, out)
	}
	return string(out)
}
