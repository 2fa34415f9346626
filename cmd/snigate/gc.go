package main

// The Go collector's settings of the long-running commands (serve, controller, dataplane):
// a soft memory limit under the container's (limitMemory), the collector off during a first
// load of files (relaxGC), a headroom over a small live heap while serving (paceGC), and,
// in the controller, collections moved into the quiet between changes (collectWhenIdle).
// GOGC or GOMEMLIMIT in the environment leave all four alone.

import (
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/snigate/snigate/internal/gcpace"
	"github.com/snigate/snigate/internal/prefault"
)

// relaxGC turns the garbage collector off for the first load, up to a heap of 512 MiB (or
// half the cgroup's memory limit when that is lower), backs the heap the load is expected to
// allocate with memory in one system call (package prefault), and returns the function that
// turns the collector back on. configBytes is the size of the files the load reads.
//
// The first load builds everything from nothing: with 100 000 routes, collecting while the
// heap grows from a few MiB took a third of the time to serving on one CPU. With the
// collector off, every page of that heap is fresh, and its first write a page fault: 11 700
// of them in a start of 100 000 routes, a fifth of its CPU on a virtual machine where faults
// are costly. Prefaulting takes them off (below). The cap keeps a container with a
// small memory limit from being killed before the collector wakes up. GOGC or GOMEMLIMIT in
// the environment leave the collector and the heap as the user set them.
func relaxGC(configBytes int64) (restore func()) {
	if userSetGC() {
		return func() {}
	}
	heapLimit := firstLoadHeapLimit(cgroupMemoryMax())
	limit := debug.SetMemoryLimit(heapLimit)
	percent := debug.SetGCPercent(-1)
	// A kernel that cannot populate (before Linux 5.14) leaves the heap as it was: the load
	// then takes its page faults as it writes.
	_ = prefault.Heap(firstLoadPrefault(configBytes, heapLimit))
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
		// What the load left behind, and what it did not use of the prefaulted heap, goes
		// back to the OS at once, in the background while connections are already served,
		// rather than when the heap next doubles.
		go debug.FreeOSMemory()
	}
}

// firstLoadBytesPerConfigByte is how much heap a first load allocates per byte of its
// files, measured on the shapes a large configuration has: 8.2 for 6 313 TLSRoutes of 16
// hostnames each (bench/run.sh's route-scale folder, 4 MB), 11.2 for 20 000 TLSRoutes of
// one hostname and two labels each (7.4 MB). Too low leaves the rest to page faults; too
// high backs memory for nothing, returned to the OS after the load.
const firstLoadBytesPerConfigByte = 12

// firstLoadPrefault is how much heap relaxGC prefaults for files of configBytes under a
// first-load heap limit of heapLimit: the expected allocation of the load, up to half the
// limit. Below 8 MiB it is 0: a small configuration loads in milliseconds either way, and
// is spared the collection prefaulting makes.
func firstLoadPrefault(configBytes, heapLimit int64) int64 {
	n := min(configBytes*firstLoadBytesPerConfigByte, heapLimit/2)
	if n < 8<<20 {
		return 0
	}
	return n
}

// paceGC gives the collector of a serving process a headroom over the live heap (package
// gcpace): 64 MiB, or an eighth of the cgroup's memory limit when that is lower. Terminated
// TLS allocates tens of KiB per handshake, and over a live heap of a few MiB Go's default
// collected dozens of times a second under load, a tenth of the CPU per handshake. GOGC or
// GOMEMLIMIT in the environment leave the collector as the user set it. It returns the
// function that stops the pacing.
func paceGC() (stop func()) {
	if userSetGC() {
		return func() {}
	}
	return gcpace.Start(gcHeadroom(cgroupMemoryMax()))
}

// collectWhenIdle makes the controller collect in the quiet after a change rather than in
// the middle of the next one (package gcpace, idle.go): at 10 000 exposures its live heap
// is 200–300 MiB, a collection's mark takes a core for 200–550 ms of two, and a change
// whose first run met one was served up to three times later. It returns the function
// that stops it.
func collectWhenIdle() (stop func()) {
	if userSetGC() {
		return func() {}
	}
	return gcpace.CollectWhenIdle(gcpace.IdleConfig{})
}

func userSetGC() bool { return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" }

// limitMemory gives the collector a soft memory limit of nine tenths of the process's
// cgroup memory limit (a container's resources.limits.memory), when it has one and neither
// GOGC nor GOMEMLIMIT is set. Go does not read that limit itself: without it, the collector
// lets the heap grow to twice the live heap whatever the container allows, and a controller
// whose live heap is past half its limit (10 000 exposures over 1 000 tenants hold about
// 310 MiB) is killed by the kernel where it could have collected sooner. Near the limit the
// collector works harder (at most half the CPU, Go's own cap) instead. The long-running
// commands call it first; go_gc_gomemlimit_bytes shows the limit in force.
func limitMemory() {
	if userSetGC() {
		return
	}
	if l := memoryLimit(cgroupMemoryMax()); l > 0 {
		debug.SetMemoryLimit(l)
	}
}

// memoryLimit is limitMemory's soft limit for a cgroup memory limit of memMax bytes (0:
// none): nine tenths of it, the rest left to what the Go runtime does not count (the
// binary's mapped pages, C allocations of the kernel's io_uring rings) and to the page cache.
func memoryLimit(memMax int64) int64 {
	if memMax <= 0 {
		return 0
	}
	return memMax / 10 * 9
}

// cgroupMemoryMax is the memory limit in bytes of the process's cgroup (v1 or v2, the
// lowest on its path to the root), 0 when it has none. Finding it means matching
// /proc/self/cgroup against the mounts of both cgroup versions and walking up the
// hierarchy, which package memlimit (KimMachineGun/automemlimit) does and keeps up with;
// only its reader is used, the limit is set here.
func cgroupMemoryMax() int64 {
	n, err := memlimit.FromCgroup()
	if err != nil || n == 0 || n > math.MaxInt64 {
		return 0
	}
	return int64(n)
}

// firstLoadHeapLimit is the heap relaxGC lets the first load grow to: 512 MiB, or half of
// the memory limit memMax (0: none) when that is lower.
func firstLoadHeapLimit(memMax int64) int64 {
	limit := int64(512 << 20)
	if memMax > 0 {
		limit = min(limit, memMax/2)
	}
	return limit
}

// gcHeadroom is paceGC's headroom: 64 MiB, or an eighth of the memory limit memMax (0:
// none) when that is lower.
func gcHeadroom(memMax int64) uint64 {
	h := int64(64 << 20)
	if memMax > 0 {
		h = min(h, memMax/8)
	}
	return uint64(h)
}
