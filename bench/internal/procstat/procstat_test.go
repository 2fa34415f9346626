package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"
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
	if RSS([]int{os.Getpid()}) <= 0 {
		t.Fatal("no RSS")
	}
}
