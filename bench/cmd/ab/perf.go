package main

// Kernel profiles and counters of a measurement (perf record, perf stat).

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/kprofile"
)

// addProfile adds a recording's time by kind of work to s, one metric per class
// ("PREFIX CLASS UNIT"): its samples over profileHz are seconds, times perSecond.
func addProfile(s sample, prefix, unit string, c kprofile.Counts, perSecond float64) {
	for _, class := range kprofile.Classes {
		s[prefix+class+" "+unit] = float64(c.ByClass[class]) / profileHz * perSecond
	}
}

// profileHz is --profile's sampling rate: not a multiple of the kernel's tick rates, so
// that the samples do not fall in step with timer work.
const profileHz = 3999

// perfRecord starts recording what target names (perf's "-p PIDS" or "-a -C CPU") with call
// graphs into file; the function it returns stops the recording and sorts its samples
// (kprofile), leaving out those of the commands in skip.
func perfRecord(target []string, file string, skip ...string) (func() (kprofile.Counts, error), error) {
	args := append([]string{"record", "-q", "-g", "-F", strconv.Itoa(profileHz)}, target...)
	cmd := exec.Command("perf", append(args, "-o", file)...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	time.Sleep(200 * time.Millisecond) // perf attaches
	return func() (kprofile.Counts, error) {
		cmd.Process.Signal(os.Interrupt)
		// perf record writes its file out on SIGINT and then dies of it.
		if err := cmd.Wait(); err != nil && !diedOf(err, syscall.SIGINT) {
			return kprofile.Counts{}, fmt.Errorf("perf record: %v: %s", err, errOut.String())
		}
		script := exec.Command("perf", "script", "-F", "comm,ip,sym,dso", "-i", file)
		var scriptErr strings.Builder
		script.Stderr = &scriptErr
		out, err := script.StdoutPipe()
		if err != nil {
			return kprofile.Counts{}, err
		}
		if err := script.Start(); err != nil {
			return kprofile.Counts{}, fmt.Errorf("perf script: %w", err)
		}
		c, rerr := kprofile.ReadExcept(out, skip...)
		io.Copy(io.Discard, out)
		if err := script.Wait(); err != nil {
			return c, fmt.Errorf("perf script: %v: %s", err, scriptErr.String())
		}
		if rerr != nil {
			return c, fmt.Errorf("perf script: %w", rerr)
		}
		os.Remove(file)
		return c, nil
	}, nil
}

// perfEvents are what --syscalls counts: every system call, the epoll waits among them, and
// the context switches as the kernel's scheduler counts them.
var perfEvents = map[string]string{
	"raw_syscalls:sys_enter":          "syscalls",
	"syscalls:sys_enter_epoll_wait":   "epoll waits",
	"syscalls:sys_enter_epoll_pwait":  "epoll waits",
	"syscalls:sys_enter_epoll_pwait2": "epoll waits",
}

// pidList is pids as perf's -p takes them.
func pidList(pids []int) string {
	list := make([]string, len(pids))
	for i, p := range pids {
		list[i] = strconv.Itoa(p)
	}
	return strings.Join(list, ",")
}

// cpu0Events are what --cpu0 counts on CPU 0 for the tests whose rate CPU 0 bounds: its
// context switches (most of them the clients and the backend woken by what a proxy sent) and
// the IPIs it sends (most of them waking a proxy that slept).
var cpu0Events = map[string]string{"context-switches": "cpu0 cs", "ipi:ipi_send_cpu": "cpu0 IPIs", "ipi:ipi_send_cpumask": "cpu0 IPIs"}

// perfStat starts counting events (perf's name → the name reported) in scope (perf's "-p
// PIDS" or "-a -C CPUS"); the function it returns stops and reads the counts.
func perfStat(events map[string]string, scope ...string) (func() map[string]float64, error) {
	args := append([]string{"stat", "-x", ","}, scope...)
	for e := range events {
		args = append(args, "-e", e)
	}
	cmd := exec.Command("perf", args...)
	var out strings.Builder
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	time.Sleep(200 * time.Millisecond) // perf attaches
	return func() map[string]float64 {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		got := map[string]float64{}
		for _, line := range strings.Split(out.String(), "\n") {
			f := strings.Split(line, ",")
			if len(f) < 3 {
				continue
			}
			if name, ok := events[f[2]]; ok {
				v, _ := strconv.ParseFloat(f[0], 64)
				got[name] += v
			}
		}
		return got
	}, nil
}
