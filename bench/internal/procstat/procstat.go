// Package procstat reads a process tree's own accounting from /proc: CPU time from every
// task's schedstat (independent of the load generator's speed), resident memory and open
// file descriptors. Multi-process servers (an nginx master and its worker) are measured as
// the sum over the tree.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Tree returns pid and all its descendants.
func Tree(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after comm, so that field n of stat(5)
// is statFields(pid)[n-3]; nil when pid is gone or its stat holds fewer than want.
func statFields(pid, want int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// comm may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < want {
		return nil
	}
	return f
}

func ppid(pid int) (int, bool) {
	f := statFields(pid, 2) // state, ppid
	if f == nil {
		return 0, false
	}
	p, err := strconv.Atoi(f[1])
	return p, err == nil
}

// CPU returns the CPU time in nanoseconds that every task (thread) of pids has run: the
// first field of /proc/PID/task/TID/schedstat. Tasks that already exited are lost, so
// measure long-lived servers only.
func CPU(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				continue
			}
			v, _ := strconv.ParseInt(f[0], 10, 64)
			sum += v
		}
	}
	return sum
}

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, 100 on every Linux ABI Go
// supports (the kernel exports it as a constant to user space, whatever its own HZ).
const clockTick = 10_000_000 // ns

// Times is the CPU time in nanoseconds a process tree spent in user space and in the kernel.
type Times struct{ User, Sys int64 }

// KernelShare is the part of the CPU time between before and t that the kernel spent, 0
// when no tick fell between them.
func (t Times) KernelShare(before Times) float64 {
	u, k := t.User-before.User, t.Sys-before.Sys
	if u+k <= 0 {
		return 0
	}
	return float64(k) / float64(u+k)
}

// UserSys returns the CPU time that pids spent in user space and in the kernel: utime and
// stime of /proc/PID/stat, which count the process's live and exited threads, in clock
// ticks of 10 ms. Coarser than CPU, so compare the two over seconds of load: they answer
// how much of a proxy's cost is the kernel's, the part no user-space change removes.
func UserSys(pids []int) Times {
	var t Times
	for _, pid := range pids {
		u, k := statPair(pid, 14, 15) // utime, stime
		t.User += u * clockTick
		t.Sys += k * clockTick
	}
	return t
}

// statPair returns fields a and b of pid's /proc/PID/stat (numbered as in stat(5)) as
// integers, 0 when pid is gone.
func statPair(pid, a, b int) (int64, int64) {
	f := statFields(pid, max(a, b)-2)
	if f == nil {
		return 0, 0
	}
	x, _ := strconv.ParseInt(f[a-3], 10, 64)
	y, _ := strconv.ParseInt(f[b-3], 10, 64)
	return x, y
}

// Faults returns the page faults pids took, minor and major (minflt and majflt of
// /proc/PID/stat, which count the process's live and exited threads). On a virtual machine
// whose guest page tables the host shadows, a first write to a page costs microseconds: a
// process whose heap still grows pays them per operation, one that reuses its pages does
// not.
func Faults(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		minor, major := statPair(pid, 10, 12) // minflt, majflt
		sum += minor + major
	}
	return sum
}

// RSS returns the summed VmRSS of pids in bytes.
func RSS(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			sum += kbField(b, "VmRSS:")
		}
	}
	return sum
}

// PSS returns the summed proportional set size of pids in bytes: resident memory with pages
// shared between processes (an nginx master and the worker it forked, holding the same route
// map) counted once in all. Falls back to VmRSS where smaps_rollup is missing.
func PSS(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			sum += RSS([]int{pid})
			continue
		}
		sum += kbField(b, "Pss:")
	}
	return sum
}

// kbField returns, in bytes, the "name  N kB" line of a /proc status-like file.
func kbField(b []byte, name string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// FDs returns the summed number of open file descriptors of pids.
func FDs(pids []int) int {
	n := 0
	for _, pid := range pids {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err == nil {
			n += len(ents)
		}
	}
	return n
}

// Pin sets the CPU affinity of every thread of pids (taskset -a -p).
func Pin(pids []int, cpus string) error {
	for _, pid := range pids {
		out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset %d: %v: %s", pid, err, out)
		}
	}
	return nil
}

// Snapshot is CPU, memory and fds of a tree at one moment.
type Snapshot struct {
	CPUNanos int64
	Mem      int64 // PSS
	FDs      int
}

// Take measures the tree of pid.
func Take(pid int) Snapshot {
	t := Tree(pid)
	return Snapshot{CPUNanos: CPU(t), Mem: PSS(t), FDs: FDs(t)}
}
