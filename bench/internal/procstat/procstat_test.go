package procstat

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestOwnProcess(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	tree := Tree(os.Getpid())
	if tree[0] != os.Getpid() || !slices.Contains(tree, cmd.Process.Pid) {
		t.Fatalf("tree %v lacks the child %d", tree, cmd.Process.Pid)
	}
	s := Take(os.Getpid())
	if s.CPUNanos <= 0 || s.Mem <= 0 || s.FDs < 3 {
		t.Fatalf("%+v", s)
	}
	// Spin in user space and in the kernel until both clocks have ticked: a field read off
	// by one would miss a tick or take another field (state, a pid) for a time.
	t0 := UserSys([]int{os.Getpid()})
	x := 0
	for deadline := time.Now().Add(10 * time.Second); ; {
		t1 := UserSys([]int{os.Getpid()})
		if t1.User > t0.User && t1.Sys > t0.Sys {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("user %d → %d ns, kernel %d → %d ns after 10 s of busy work", t0.User, t1.User, t0.Sys, t1.Sys)
		}
		for i := range 100_000 {
			x += i % 7 // user time between the reads, which are kernel time
		}
	}
	_ = x
	if RSS([]int{os.Getpid()}) <= 0 {
		t.Fatal("no RSS")
	}
}

// Faults counts the first writes to fresh pages: 256 of them, one per page of a new
// anonymous mapping, and a field read off by one (cminflt, a time) would not follow them.
func TestFaults(t *testing.T) {
	const pages = 256
	b, err := syscall.Mmap(-1, 0, pages*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(b)
	pid := []int{os.Getpid()}
	before := Faults(pid)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if got := Faults(pid) - before; got < pages || got > pages+200 {
		t.Fatalf("%d page faults for %d fresh pages written", got, pages)
	}
}
