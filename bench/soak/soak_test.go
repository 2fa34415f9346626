package soak

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/echo"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// plan is how long the soak runs and how often each event comes.
type plan struct {
	Total, Reload, Kill, Upgrade, Sample time.Duration
	// Settle is when the bound starts: samples after it must not grow past the one at it.
	Settle time.Duration
}

var plans = map[string]plan{
	"full":  {Total: 30 * time.Minute, Reload: 10 * time.Second, Kill: time.Minute, Upgrade: 5 * time.Minute, Sample: time.Minute, Settle: 5 * time.Minute},
	"smoke": {Total: 2 * time.Minute, Reload: 10 * time.Second, Kill: 30 * time.Second, Upgrade: 40 * time.Second, Sample: 10 * time.Second, Settle: 40 * time.Second},
}

const (
	streams      = 8                     // held checksummed streams
	streamChunk  = 16 << 10              // bytes a stream writes each round
	streamPause  = 50 * time.Millisecond // between a stream's rounds
	shortPause   = 20 * time.Millisecond // between a short client's connections
	downFor      = 2 * time.Second       // how long the killed backend stays down
	drainTimeout = 5 * time.Second
)

// TestSoak runs the soak when SNIGATE_SOAK names a plan ("full": 30 minutes; "smoke": 2).
// SNIGATE_SOAK_OUT names the JSON results. It fails on errors (a lost byte, a failed
// connection to the backend that is never killed, an upgrade that failed), and reports the
// bounds (file descriptors, goroutines, RSS) without failing on them.
func TestSoak(t *testing.T) {
	mode := os.Getenv("SNIGATE_SOAK")
	if mode == "" {
		t.Skip("a benchmark: bench/soak.sh runs it (SNIGATE_SOAK=smoke or full)")
	}
	p, ok := plans[mode]
	if !ok {
		t.Fatalf("SNIGATE_SOAK=%q: want full or smoke", mode)
	}
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "snigate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/snigate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	ca := testutil.NewCA(t)
	stable := startEcho(t, ca, "stable", "127.0.0.1:0")
	flaky := &backend{t: t, ca: ca, name: "flaky", addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePorts(t, 1)[0])}
	flaky.start()
	t.Cleanup(flaky.stop)

	ports := testutil.FreePorts(t, 2)
	gwAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	_, stablePort, _ := net.SplitHostPort(stable.addr)
	_, flakyPort, _ := net.SplitHostPort(flaky.addr)
	sp, _ := strconv.Atoi(stablePort)
	fp, _ := strconv.Atoi(flakyPort)
	write(t, cfg, "gateway.yaml", fixture.GatewayYAML("default", "gw", fixture.Passthrough("tls", ports[0], "")))
	write(t, cfg, "services.yaml", fixture.Docs(
		fixture.ServiceYAML("default", "stable", 443, sp, "127.0.0.1"),
		fixture.ServiceYAML("default", "flaky", 443, fp, "127.0.0.1")))
	routes := func(extra bool) string {
		docs := []string{
			fixture.TLSRouteYAML(fixture.TLSRoute{Namespace: "default", Name: "stable", Gateway: "gw", Hostnames: []string{"stable.soak.test"}, Backends: []fixture.BackendRef{fixture.To("stable", 443)}}),
			fixture.TLSRouteYAML(fixture.TLSRoute{Namespace: "default", Name: "flaky", Gateway: "gw", Hostnames: []string{"flaky.soak.test"}, Backends: []fixture.BackendRef{fixture.To("flaky", 443)}}),
		}
		if extra {
			docs = append(docs, fixture.TLSRouteYAML(fixture.TLSRoute{Namespace: "default", Name: "extra", Gateway: "gw", Hostnames: []string{"extra.soak.test"}, Backends: []fixture.BackendRef{fixture.To("stable", 443)}}))
		}
		return fixture.Docs(docs...)
	}
	write(t, cfg, "routes.yaml", routes(false))

	pidFile := filepath.Join(dir, "snigate.pid")
	logFile, err := os.Create(filepath.Join(dir, "snigate.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-f", cfg, "--pid-file", pidFile, "--admin", admin,
		"--drain-timeout", drainTimeout.String(), "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pid, err := readPID(pidFile); err == nil {
			interrupt(pid)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	waitReady(t, admin)

	res := &Result{Mode: mode, Plan: p, Start: time.Now().UTC()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	errorf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(res.Errors) < 20 {
			res.Errors = append(res.Errors, fmt.Sprintf(format, args...))
		}
	}
	// Held streams: each writes random chunks and reads them back through snigate for the
	// whole run; at the end both directions' SHA-256 must agree, byte for byte.
	var streamBytes atomic.Int64
	for i := range streams {
		wg.Go(func() {
			if err := runStream(gwAddr, ca, stop, &streamBytes); err != nil {
				errorf("stream %d: %v", i, err)
				res.StreamErrors.Add(1)
			}
		})
	}
	// Short connections: to the backend that stays (none may fail) and to the one killed
	// every Kill (failures allowed while it is down).
	for range 2 {
		wg.Go(func() { shortLoop("stable.soak.test", gwAddr, ca, stop, &res.StableOK, &res.StableFailed, errorf) })
	}
	wg.Go(func() { shortLoop("flaky.soak.test", gwAddr, ca, stop, &res.FlakyOK, &res.FlakyFailed, nil) })

	sample := func() {
		s := takeSample(pidFile, admin)
		s.At = time.Since(res.Start).Round(time.Second).Seconds()
		res.Samples = append(res.Samples, s)
		t.Logf("%4.0f s: pid %d, %d fds, %d goroutines, RSS %.1f MiB; streams %.1f MB; short ok %d (failed %d), flaky ok %d (failed %d); reloads %d, kills %d, upgrades %d",
			s.At, s.PID, s.FDs, s.Goroutines, s.RSSMiB, float64(streamBytes.Load())/1e6, res.StableOK.Load(), res.StableFailed.Load(),
			res.FlakyOK.Load(), res.FlakyFailed.Load(), res.Reloads, res.Kills, res.Upgrades)
	}
	sample()
	end := time.After(p.Total)
	reload, kill, upgrade, tick := time.NewTicker(p.Reload), time.NewTicker(p.Kill), time.NewTicker(p.Upgrade), time.NewTicker(p.Sample)
	defer reload.Stop()
	defer kill.Stop()
	defer upgrade.Stop()
	defer tick.Stop()
	extra := false
loop:
	for {
		select {
		case <-end:
			break loop
		case <-reload.C:
			extra = !extra
			write(t, cfg, "routes.yaml", routes(extra))
			res.Reloads++
		case <-kill.C:
			flaky.stop()
			time.Sleep(downFor)
			flaky.start()
			res.Kills++
		case <-upgrade.C:
			out, err := exec.Command(bin, "upgrade", "--pid-file", pidFile, "--timeout", "60s").CombinedOutput()
			if err != nil {
				errorf("upgrade %d: %v: %s", res.Upgrades+1, err, out)
				res.UpgradesFailed++
			}
			res.Upgrades++
		case <-tick.C:
			sample()
		}
	}
	sample()
	close(stop)
	wg.Wait()
	res.StreamBytes = streamBytes.Load()
	res.judge()
	t.Logf("bounds, most in the first %v → most after: fds %d → %d, goroutines %d → %d, RSS %.1f → %.1f MiB: %s",
		p.Settle, res.SettleFDs, res.MaxFDs, res.SettleGoroutines, res.MaxGoroutines, res.SettleRSS, res.MaxRSS, res.Verdict)
	if out := os.Getenv("SNIGATE_SOAK_OUT"); out != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, e := range res.Errors {
		t.Error(e)
	}
	if n := res.StableFailed.Load(); n > 0 {
		t.Errorf("%d short connections to the backend that is never killed failed", n)
	}
	if res.FlakyOK.Load() == 0 {
		t.Error("no connection to the killed-and-restarted backend ever succeeded")
	}
}

// Result is one soak's record.
type Result struct {
	Mode  string
	Plan  plan
	Start time.Time
	// Events.
	Reloads, Kills, Upgrades, UpgradesFailed int
	// Traffic.
	StreamBytes                                  int64
	StreamErrors                                 atomic.Int64 `json:"-"`
	StableOK, StableFailed, FlakyOK, FlakyFailed atomic.Int64 `json:"-"`
	Counts                                       map[string]int64
	Samples                                      []Sample
	Errors                                       []string
	// The bounds: the most up to Settle, and the most after it.
	SettleFDs, MaxFDs, SettleGoroutines, MaxGoroutines int
	SettleRSS, MaxRSS                                  float64
	Verdict                                            string
}

// Sample is the serving process's state at one moment (the process changes at upgrades).
type Sample struct {
	At         float64 // seconds since the start
	PID        int
	FDs        int
	Goroutines int
	RSSMiB     float64
}

// judge fills the bounds and the verdict: bounded when nothing after Settle passes the most
// the first Settle reached by more than a little (fds +16, goroutines +64, RSS +10 % and
// 8 MiB: traffic comes and goes). The most, not the sample at Settle: each upgrade starts a
// fresh process whose RSS climbs to its plateau in a few minutes, and an upgrade falls at
// Settle in the full plan.
func (r *Result) judge() {
	r.Counts = map[string]int64{"stream errors": r.StreamErrors.Load(), "stable ok": r.StableOK.Load(),
		"stable failed": r.StableFailed.Load(), "flaky ok": r.FlakyOK.Load(), "flaky failed": r.FlakyFailed.Load()}
	after := false
	for _, s := range r.Samples {
		if s.At <= r.Plan.Settle.Seconds() {
			r.SettleFDs, r.SettleGoroutines, r.SettleRSS = max(r.SettleFDs, s.FDs), max(r.SettleGoroutines, s.Goroutines), max(r.SettleRSS, s.RSSMiB)
			continue
		}
		after = true
		r.MaxFDs, r.MaxGoroutines, r.MaxRSS = max(r.MaxFDs, s.FDs), max(r.MaxGoroutines, s.Goroutines), max(r.MaxRSS, s.RSSMiB)
	}
	switch {
	case !after:
		r.Verdict = "too short to judge"
	case r.MaxFDs > r.SettleFDs+16 || r.MaxGoroutines > r.SettleGoroutines+64 || r.MaxRSS > r.SettleRSS*1.1+8:
		r.Verdict = "GREW after settling"
	default:
		r.Verdict = "bounded"
	}
}

// backend is the echo backend the soak kills and restarts on the same address.
type backend struct {
	t    *testing.T
	ca   *testutil.CA
	name string
	addr string
	mu   sync.Mutex
	srv  *echo.Server
}

func (b *backend) start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment after the kill
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		b.t.Errorf("restart %s on %s: %v", b.name, b.addr, err)
		return
	}
	cert := b.ca.Issue(b.t, b.name+".soak.test")
	b.srv = &echo.Server{Name: b.name, TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}}
	go b.srv.Serve(ln)
}

// stop kills the backend: its listener and every connection it has.
func (b *backend) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Close()
		b.srv = nil
	}
}

func startEcho(t *testing.T, ca *testutil.CA, name, addr string) *backend {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{t: t, ca: ca, name: name, addr: ln.Addr().String()}
	ln.Close()
	b.start()
	t.Cleanup(b.stop)
	return b
}

// dial makes a TLS connection through the gateway to sni's backend and reads its greeting.
func dial(gw, sni string, ca *testutil.CA) (*tls.Conn, *bufio.Reader, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", gw, ca.ClientConfig(sni))
	if err != nil {
		return nil, nil, err
	}
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("greeting: %w", err)
	}
	return c, r, nil
}

// runStream holds one connection for the whole run, echoing random chunks; it checks every
// chunk as it comes back and both directions' digests at the end.
func runStream(gw string, ca *testutil.CA, stop <-chan struct{}, total *atomic.Int64) error {
	c, r, err := dial(gw, "stable.soak.test", ca)
	if err != nil {
		return err
	}
	defer c.Close()
	sent, got := sha256.New(), sha256.New()
	chunk, back := make([]byte, streamChunk), make([]byte, streamChunk)
	for {
		select {
		case <-stop:
			if err := c.CloseWrite(); err != nil {
				return err
			}
			rest, err := io.ReadAll(r)
			if err != nil || len(rest) > 0 {
				return fmt.Errorf("after the half-close: %d bytes, %v", len(rest), err)
			}
			if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
				return fmt.Errorf("digests differ")
			}
			return nil
		case <-time.After(streamPause):
		}
		for i := range chunk {
			chunk[i] = byte(rand.Uint32())
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(chunk); err != nil {
			return fmt.Errorf("write after %d bytes: %w", total.Load(), err)
		}
		if _, err := io.ReadFull(r, back); err != nil {
			return fmt.Errorf("read after %d bytes: %w", total.Load(), err)
		}
		if !bytes.Equal(chunk, back) {
			return fmt.Errorf("a chunk came back changed")
		}
		sent.Write(chunk)
		got.Write(back)
		total.Add(2 * streamChunk)
	}
}

// shortLoop opens a connection to sni, one round trip, and closes it, every shortPause.
func shortLoop(sni, gw string, ca *testutil.CA, stop <-chan struct{}, ok, failed *atomic.Int64, errorf func(string, ...any)) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(shortPause):
		}
		err := func() error {
			c, r, err := dial(gw, sni, ca)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := io.WriteString(c, "ping\n"); err != nil {
				return err
			}
			if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
				return fmt.Errorf("echo %q, %v", line, err)
			}
			return nil
		}()
		if err != nil {
			failed.Add(1)
			if errorf != nil {
				errorf("%s: %v", sni, err)
			}
			continue
		}
		ok.Add(1)
	}
}

func takeSample(pidFile, admin string) Sample {
	var s Sample
	pid, err := readPID(pidFile)
	if err != nil {
		return s
	}
	s.PID = pid
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.FDs = len(fds)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				s.RSSMiB = kb / 1024
			}
		}
	}
	if resp, err := http.Get("http://" + admin + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				s.Goroutines, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		resp.Body.Close()
	}
	return s
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// interrupt stops a process the test did not start (one that took over).
func interrupt(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Signal(os.Interrupt)
	}
}

func waitReady(t *testing.T, admin string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatal("snigate not ready within 30 s")
}

// write writes a config file atomically (a watcher never sees half of it).
func write(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
