package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

const (
	readyTimeout = 10 * time.Second // from start to /readyz == 200
	pollEvery    = 25 * time.Millisecond
	waitTimeout  = 10 * time.Second // any other bounded wait on the gateway
)

// gateway is one running `snigate serve` process.
type gateway struct {
	t     *testing.T
	dir   string // the YAML folder given to -f
	admin string // host:port of the admin listener
	log   string // path of the file holding its stdout and stderr
	cmd   *exec.Cmd

	exited  chan struct{} // closed when the process has exited
	exitErr error         // cmd.Wait's result, valid after exited is closed
}

// startGateway runs `snigate serve -f dir` with an admin listener on a free loopback port and
// JSON logs, plus args, and waits until /readyz answers 200. The process is stopped (SIGTERM,
// then SIGKILL) when the test ends, and its log is printed if the test failed.
func startGateway(t *testing.T, dir string, args ...string) *gateway {
	t.Helper()
	return startSnigate(t, dir, serveArgv(dir, args...)...)
}

// serveArgv is the command line of `snigate serve -f dir` plus args.
func serveArgv(dir string, args ...string) []string {
	return append([]string{"serve", "-f", dir}, args...)
}

// startSnigate runs the binary with argv (a command and its flags) plus an admin listener on
// a free loopback port and JSON logs, and waits until /readyz answers 200, like
// startGateway. dir is recorded for tests that edit their files (may be "").
func startSnigate(t *testing.T, dir string, argv ...string) *gateway {
	t.Helper()
	return startSnigateEnv(t, dir, nil, argv...)
}

// startSnigateEnv is startSnigate with env (KEY=value) added to the process's environment,
// which is otherwise testutil.CleanEnv's: without GOGC and GOMEMLIMIT, which change how the
// serving process paces its collector, so what a test sees does not depend on how the suite
// was started.
func startSnigateEnv(t *testing.T, dir string, env []string, argv ...string) *gateway {
	t.Helper()
	return startSnigateIn(t, nil, dir, env, argv...)
}

// startSnigateIn is startSnigateEnv with the process started in the cgroup cg (nil: the
// test's own).
func startSnigateIn(t *testing.T, cg *testutil.Cgroup, dir string, env []string, argv ...string) *gateway {
	t.Helper()
	needBinary(t)
	g := &gateway{
		t:      t,
		dir:    dir,
		admin:  net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t))),
		log:    filepath.Join(t.TempDir(), "snigate.log"),
		exited: make(chan struct{}),
	}
	logf, err := os.Create(g.log)
	if err != nil {
		t.Fatal(err)
	}
	argv = append(argv, "--admin", g.admin, "--log-format", "json")
	g.cmd = exec.Command(snigateBin, argv...)
	g.cmd.Env = append(testutil.CleanEnv(), env...)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	if cg != nil {
		cg.Wrap(g.cmd)
	}
	if err := g.cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	go func() {
		g.exitErr = g.cmd.Wait()
		logf.Close()
		close(g.exited)
	}()
	t.Cleanup(g.stop)
	t.Logf("started snigate %s (pid %d)", strings.Join(argv, " "), g.cmd.Process.Pid)

	deadline := time.Now().Add(readyTimeout)
	for {
		code, _, err := g.get("/readyz")
		if err == nil && code == http.StatusOK {
			return g
		}
		select {
		case <-g.exited:
			t.Fatalf("snigate exited before it was ready: %v\n%s", g.exitErr, g.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("snigate not ready after %v (last /readyz: %d, %v)\n%s", readyTimeout, code, err, g.logText())
		}
		time.Sleep(pollEvery)
	}
}

// stop ends the process if it still runs, checks that it stopped cleanly (exit 0, no data
// race reported by a -race binary) and prints its log when the test failed.
func (g *gateway) stop() {
	select {
	case <-g.exited:
	default:
		g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
			if g.exitErr != nil {
				g.t.Errorf("snigate exited with %v after SIGTERM, want exit 0", g.exitErr)
			}
		case <-time.After(waitTimeout):
			g.t.Errorf("snigate did not exit within %v of SIGTERM; killing it", waitTimeout)
			g.cmd.Process.Kill()
			<-g.exited
		}
	}
	if b, _ := os.ReadFile(g.log); bytes.Contains(b, []byte("WARNING: DATA RACE")) {
		g.t.Errorf("the race detector reported a data race in snigate")
	}
	if g.t.Failed() {
		g.t.Logf("snigate log (%s):\n%s", g.log, g.logText())
	}
}

// logText returns the process log, its last 300 lines at most.
func (g *gateway) logText() string {
	b, err := os.ReadFile(g.log)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > 300 {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines)\n", len(lines)-300)}, lines[len(lines)-300:]...)
	}
	return strings.Join(lines, "")
}

// logLines returns the JSON log records, skipping lines that are not JSON objects.
func (g *gateway) logLines() []map[string]any {
	b, _ := os.ReadFile(g.log)
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			recs = append(recs, m)
		}
	}
	return recs
}

// countLog counts the log records that satisfy match (raw is the record as JSON).
func (g *gateway) countLog(match func(rec map[string]any, raw string) bool) int {
	n := 0
	for _, rec := range g.logLines() {
		raw, _ := json.Marshal(rec)
		if match(rec, string(raw)) {
			n++
		}
	}
	return n
}

// waitLog waits until at least atLeast log records satisfy match and returns the last of them.
func (g *gateway) waitLog(t *testing.T, what string, atLeast int, match func(rec map[string]any, raw string) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var found []map[string]any
		for _, rec := range g.logLines() {
			raw, _ := json.Marshal(rec)
			if match(rec, string(raw)) {
				found = append(found, rec)
			}
		}
		if len(found) >= atLeast {
			return found[len(found)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d log records %s within %v, want %d\n%s", len(found), what, waitTimeout, atLeast, g.logText())
		}
		time.Sleep(pollEvery)
	}
}

func (g *gateway) get(path string) (int, []byte, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + g.admin + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, body, err
}

// generation returns the "generation" field of GET /status.
func (g *gateway) generation(t *testing.T) int64 {
	t.Helper()
	code, body, err := g.get("/status")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /status: %d, %v\n%s", code, err, body)
	}
	var st struct {
		Generation *int64 `json:"generation"`
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Generation == nil {
		t.Fatalf("GET /status: no numeric \"generation\" field (%v) in %s", err, body)
	}
	return *st.Generation
}

// waitGeneration waits until the generation is above after and returns it.
func (g *gateway) waitGeneration(t *testing.T, after int64) int64 {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if gen := g.generation(t); gen > after {
			return gen
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation still %d after %v, want > %d\n%s", g.generation(t), waitTimeout, after, g.logText())
		}
		time.Sleep(pollEvery)
	}
}

// rejected returns the sum of snigate_rejected_connections_total over every series whose
// reason label is reason (other labels, such as the listener, are summed over).
func (g *gateway) rejected(t *testing.T, reason string) float64 {
	t.Helper()
	code, body, err := g.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", code, err)
	}
	v, err := sumMetric(string(body), "snigate_rejected_connections_total", "reason", reason)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitRejected waits until the rejection counter for reason reaches want.
func (g *gateway) waitRejected(t *testing.T, reason string, want float64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := g.rejected(t, reason)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			_, body, _ := g.get("/metrics")
			t.Fatalf("snigate_rejected_connections_total{reason=%q} = %v after %v, want >= %v\n%s",
				reason, got, waitTimeout, want, grepLines(string(body), "snigate_rejected"))
			return
		}
		time.Sleep(pollEvery)
	}
}

// signal sends sig to the process.
func (g *gateway) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitExit waits up to timeout for the process to exit and returns its exit code.
func (g *gateway) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-g.exited:
	case <-time.After(timeout):
		t.Fatalf("snigate still running %v later\n%s", timeout, g.logText())
	}
	var ee *exec.ExitError
	switch {
	case g.exitErr == nil:
		return 0
	case errors.As(g.exitErr, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", g.exitErr)
	return -1
}

// sumMetric adds up the samples of a metric family in Prometheus text format whose label
// key equals value.
func sumMetric(text, name, key, value string) (float64, error) {
	return dbSumMetric(text, name, key+"="+value)
}

// hasLabel reports whether the label list `a="x",b="y"` contains pair. Label values in the
// tests never contain commas or quotes.
func hasLabel(labels, pair string) bool {
	for _, l := range strings.Split(labels, ",") {
		if l == pair {
			return true
		}
	}
	return false
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// signalIgnored reports whether process pid ignores sig (its SigIgn mask in /proc).
func signalIgnored(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				t.Fatalf("SigIgn of process %d: %v", pid, err)
			}
			return m&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("process %d: no SigIgn line in /proc/%d/status", pid, pid)
	return false
}
