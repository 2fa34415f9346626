// Package prefault backs heap memory a process is about to fill with physical pages in one
// system call, instead of one page fault per page as the memory is first written.
//
//	debug.SetGCPercent(-1)      // the runtime keeps the pages while the collector is off
//	prefault.Heap(64 << 20)     // about what the work below will allocate
//	buildEverything()           // its allocations reuse the block's pages: no faults
//	debug.SetGCPercent(100)
//	debug.FreeOSMemory()        // what it did not use goes back to the OS
//
// A process that builds a large structure from nothing (snigate's first load of 100 000
// routes allocates about 32 MB) writes every page of that heap for the first time, and each
// first write is a page fault: an exception, a page allocated and zeroed. Where an exception
// is costly, as on virtual machines whose guest kernel runs paravirtualised, the exceptions
// alone were a fifth of the start's CPU time. madvise(MADV_POPULATE_WRITE), since Linux 5.14,
// backs a whole range in one call, without the exceptions; the JVM's AlwaysPreTouch does
// the same for its heap. The Go runtime has no option for it and hides where its heap will
// grow, so Heap allocates a block, populates it and frees it at once with a collection: the
// allocator hands the freed pages, still backed, to the allocations that follow.
//
// What it saves is the guest's exception. On the benchmark machine (a PVM guest, whose
// page tables the host shadows lazily) a first write cost about 11 µs per 4 KiB page;
// populating cost 0.5 to 0.8 µs per page, and the first write after it still about 5.5 µs,
// the host filling in its own mapping. Huge pages would remove that too (a 2 MiB page
// populated and written in 0.05 to 0.2 µs per 4 KiB), but the release of the unused part
// after the load splits them, and every later reload then took 40 ms instead of 22: Heap
// asks for none (docs/performance.md, notes).
//
// The pages stay the process's until the runtime's scavenger returns them. It does not while
// the collector is off with a memory limit well above n (debug.SetGCPercent(-1)); with the
// collector on, the scavenger may return some of them before they are used.
package prefault

import "runtime"

// Heap backs the next n bytes the heap hands out with physical pages. It forces a
// collection, which costs a mark of the live heap: call it while that heap is small. It
// returns the error of madvise when the kernel cannot populate (before Linux 5.14:
// EINVAL); the heap is then as it would have been, and only the collection was spent.
func Heap(n int64) error {
	if n <= 0 {
		return nil
	}
	err := populate(n)
	runtime.GC()
	return err
}
