package procstat

import (
	"os"
	"os/exec"
	"slices"
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
