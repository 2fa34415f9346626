package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/report"
)

func machine() report.Machine {
	m := report.Machine{Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				m.NProc++
			case "model name":
				m.CPU = strings.TrimSpace(v)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			m.MemGiB = int((kb + 1<<19) >> 20)
		}
	}
	return m
}

func firstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func versions(snigate, repo string) map[string]string {
	v := map[string]string{}
	if rev := firstLine("git", "-C", repo, "rev-parse", "--short", "HEAD"); rev != "" {
		v["snigate"] = "commit " + rev
		if firstLine("git", "-C", repo, "status", "--porcelain", "--untracked-files=no", "--", "cmd", "internal") != "" {
			v["snigate"] += " + local changes"
		}
	}
	pick := func(name string, argv []string, field int) {
		l := firstLine(argv...)
		f := strings.Fields(l)
		if field < len(f) {
			v[name] = strings.TrimPrefix(f[field], "nginx/")
		}
	}
	pick("haproxy", []string{"haproxy", "-v"}, 2)
	pick("nginx", []string{"nginx", "-v"}, 2)
	pick("sniproxy", []string{"sniproxy", "-V"}, 1)
	pick("postgresql", []string{"psql", "--version"}, 2)
	return v
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// loadgen runs the load generator on CPU 0 and decodes its JSON answer into out. A
// non-zero exit is an error, but out is still decoded when the answer came.
func (e *env) loadgen(timeout time.Duration, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append([]string{"-c", "0", e.bin.loadgen}, args...)
	cmd := exec.CommandContext(ctx, "taskset", argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	line := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if line != "" && out != nil {
		if jerr := json.Unmarshal([]byte(line), out); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		var msg struct{ Error string }
		json.Unmarshal([]byte(line), &msg)
		return fmt.Errorf("loadgen %s: %v: %s%s", strings.Join(args, " "), err, msg.Error, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// idleHold runs "loadgen idle" and returns once its connections are open; release closes
// them and waits for it to exit.
func (e *env) idleHold(target string, n int) (release func() error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	cmd := exec.CommandContext(ctx, "taskset", "-c", "0", e.bin.loadgen, "idle", "--addr", target,
		"--sni", sniEcho, "-n", strconv.Itoa(n), "--hold", "90s")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"ready":true`) {
		stdin.Close()
		cmd.Wait()
		cancel()
		return nil, fmt.Errorf("loadgen idle: %s %s", sc.Text(), stderr.String())
	}
	return func() error {
		defer cancel()
		stdin.Close()
		for sc.Scan() {
		}
		return cmd.Wait()
	}, nil
}

// microLine parses "BenchmarkX-2 N v ns/op [v MB/s] v B/op v allocs/op".
func microLine(f []string) report.Micro {
	name := f[0]
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i]
		}
	}
	m := report.Micro{Name: name}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			continue
		}
		switch f[i+1] {
		case "ns/op":
			m.NsPerOp = v
		case "B/op":
			m.BytesPerOp = v
		case "allocs/op":
			m.AllocsPerOp = v
		}
	}
	return m
}

// loadgenBackground starts the load generator on CPU 0; stop sends it SIGINT, waits and
// decodes its answer into out.
func (e *env) loadgenBackground(out any, args ...string) (stop func() error, err error) {
	cmd := exec.Command("taskset", append([]string{"-c", "0", e.bin.loadgen}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() error {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var werr error
		select {
		case werr = <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			werr = <-done
		}
		line := strings.TrimSpace(stdout.String())
		if line != "" {
			if jerr := json.Unmarshal([]byte(line), out); jerr != nil {
				return jerr
			}
		}
		if werr != nil {
			return fmt.Errorf("loadgen %s: %v: %s", strings.Join(args, " "), werr, strings.TrimSpace(stderr.String()))
		}
		return nil
	}, nil
}
