package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/load"
	"github.com/snigate/snigate/bench/internal/procstat"
	"github.com/snigate/snigate/bench/internal/report"
)

// syscalls counts each proxy's system calls per new connection with strace -c, once per
// run (strace slows the proxy down: these runs are not timed).
func (e *env) syscalls() {
	if _, err := exec.LookPath("strace"); err != nil {
		log.Printf("syscalls: strace not installed, skipped")
		return
	}
	n := e.p.ConnsN / 6
	for _, kind := range []string{"snigate", "haproxy", "nginx", "sniproxy"} {
		inst := e.proxies[kind]
		if inst == nil || inst.proc == nil {
			continue
		}
		// strace attaches to every thread of the tree as listed a moment before: one that
		// has just ended makes it give up without a word in its output file. Try again.
		var counts map[string]float64
		var err error
		for try := 0; try < 3; try++ {
			if counts, err = e.straceConns(inst, n); !errors.Is(err, errNotAttached) {
				break
			}
		}
		if err != nil {
			e.res.Error(fmt.Errorf("syscalls %s: %w", kind, err))
			continue
		}
		total := 0.0
		for name, c := range counts {
			e.res.Add(report.TSyscalls, name, kind, "calls/conn", c/float64(n))
			total += c
		}
		e.res.Add(report.TSyscalls, report.MTotal, kind, "calls/conn", total/float64(n))
	}
}

// errNotAttached: strace wrote no counts (it could not attach to the whole tree).
var errNotAttached = errors.New("strace did not attach")

// straceConns attaches strace to every process of inst's tree, makes n connections and
// returns the calls per syscall ("name" and "name!" for the failed ones).
func (e *env) straceConns(inst *instance, n int) (map[string]float64, error) {
	out := e.path("strace-" + inst.kind + ".txt")
	args := []string{"-c", "-f", "-o", out}
	for _, pid := range procstat.Tree(inst.proc.Pid()) {
		args = append(args, "-p", strconv.Itoa(pid))
	}
	cmd := exec.Command("strace", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond) // attach
	var r load.ConnsResult
	lerr := e.loadgen(120*time.Second, &r, "conns", "--addr", inst.spec.Pass, "--sni", sniEcho,
		"-n", strconv.Itoa(n), "-c", strconv.Itoa(e.p.Conc), "--max", "60s")
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if lerr != nil {
		return nil, lerr
	}
	b, err := os.ReadFile(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", errNotAttached, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return nil, err
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[len(f)-1] == "total" || f[len(f)-1] == "syscall" {
			continue
		}
		calls, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			continue
		}
		name := f[len(f)-1]
		// Background noise of any runtime, not per connection.
		if name == "nanosleep" || name == "futex" || name == "restart_syscall" || name == "clock_nanosleep" {
			continue
		}
		counts[name] += calls
	}
	return counts, nil
}
