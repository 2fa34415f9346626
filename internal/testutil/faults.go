package testutil

import (
	"os"
	"runtime"

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
