package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MemoryCgroup creates a cgroup with a memory limit of limit bytes, as a container runtime
// does for resources.limits.memory, and returns a Cgroup that starts commands in it. It is
// removed when the test ends (what still runs in it is killed). It uses cgroup v2 when the
// unified hierarchy is mounted at /sys/fs/cgroup and delegates the memory controller there,
// else the v1 memory hierarchy (/sys/fs/cgroup/memory); it needs root: without it (or on a
// machine with neither) the test is skipped, or fails under CI=true (Require).
func MemoryCgroup(t testing.TB, limit int64) *Cgroup {
	t.Helper()
	name := fmt.Sprintf("snigate-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var dir, limitFile string
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(ctl), "memory") {
		dir, limitFile = filepath.Join("/sys/fs/cgroup", name), "memory.max"
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", name), "memory.limit_in_bytes"
	} else {
		Require(t, "a cgroup memory controller (v2 with memory delegated at /sys/fs/cgroup, or v1 at /sys/fs/cgroup/memory)", errors.New("neither found"))
	}
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644)
		if err != nil {
			os.Remove(dir)
		}
	}
	Require(t, "a memory cgroup of its own (root, a writable cgroup file system)", err)
	cg := &Cgroup{Dir: dir}
	t.Cleanup(cg.remove)
	return cg
}

// Cgroup is a cgroup made by MemoryCgroup.
type Cgroup struct{ Dir string }

// Wrap makes cmd start inside the cgroup: a shell moves itself there, then execs the
// command, so that the command's first instruction already runs under the limit (moving a
// process in after it started races with what it reads at start). Call before cmd.Start.
func (c *Cgroup) Wrap(cmd *exec.Cmd) {
	args := append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.Dir, "cgroup.procs"), cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = "/bin/sh", append([]string{"sh"}, args...)
}

// remove kills what is left in the cgroup and removes it.
func (c *Cgroup) remove() {
	for range 50 {
		b, _ := os.ReadFile(filepath.Join(c.Dir, "cgroup.procs"))
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	os.Remove(c.Dir)
}
