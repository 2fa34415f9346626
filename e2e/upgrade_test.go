package e2e

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// upgradeGateway is a `snigate serve` that live upgrades replace: the process the test
// started, then each one that took over (found through the pid file).
type upgradeGateway struct {
	*gateway
	pidFile string
}

// startUpgradeGateway starts the reload tests' gateway (a passthrough listener, a.test →
// echo-a) with a pid file; every process that takes over is stopped when the test ends.
func startUpgradeGateway(t *testing.T, args ...string) (*upgradeGateway, *testutil.CA, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "snigate.pid")
	g, ca, port := reloadSetup(t, append([]string{"--pid-file", pidFile, "--drain-timeout", "5s"}, args...)...)
	ug := &upgradeGateway{gateway: g, pidFile: pidFile}
	ug.waitPIDFile(t)
	// Registered after startGateway's cleanup, so it runs first: the last process to take
	// over is not the test's child, and g.stop would not stop it.
	ug.stopTakenOver(t)
	return ug, ca, port
}

// stopTakenOver stops, when the test ends, the last process that took over.
func (g *upgradeGateway) stopTakenOver(t *testing.T) {
	t.Cleanup(func() {
		pid, err := g.pid()
		if err != nil || pid == g.cmd.Process.Pid {
			return
		}
		stopPID(t, pid)
	})
}

// stopPID stops a snigate the test did not start (one that took over), SIGTERM then
// SIGKILL.
func stopPID(t *testing.T, pid int) {
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(waitTimeout)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(pollEvery)
	}
	if alive(pid) {
		t.Errorf("snigate %d (taken over) did not exit within %v of SIGTERM", pid, waitTimeout)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// alive reports whether pid runs (a zombie does not: it waits for a parent that is not us).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// waitPIDFile waits for the pid file, which comes last, once the process listens for
// SIGUSR2.
func (g *upgradeGateway) waitPIDFile(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(pollEvery) {
		if _, err := g.pid(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file %s after %v", g.pidFile, waitTimeout)
		}
	}
}

func (g *upgradeGateway) pid() (int, error) {
	b, err := os.ReadFile(g.pidFile)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// upgrade runs `snigate upgrade` with args and returns its output and error.
func upgrade(args ...string) (string, error) {
	out, err := exec.Command(snigateBin, append([]string{"upgrade", "--timeout", "60s"}, args...)...).CombinedOutput()
	return string(out), err
}

// upgradeOK upgrades through the pid file (or the admin address, with viaAdmin) and checks
// that another process took over.
func (g *upgradeGateway) upgradeOK(t *testing.T, viaAdmin bool) int {
	t.Helper()
	before, err := g.pid()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--pid-file", g.pidFile}
	if viaAdmin {
		args = []string{"--admin", g.admin}
	}
	out, err := upgrade(args...)
	if err != nil {
		t.Fatalf("snigate upgrade %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	after, err := g.pid()
	if err != nil {
		t.Fatal(err)
	}
	if after == before || !strings.Contains(out, strconv.Itoa(after)) {
		t.Fatalf("snigate upgrade said %q; pid file %d → %d", out, before, after)
	}
	return after
}

// hammer opens a new connection through port every few milliseconds, each a full TLS
// session with one round trip and a clean end, until stop; it counts them and keeps the
// first errors.
type hammer struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []error
	stop       chan struct{}
	done       chan struct{}
}

func startHammer(port int, cfg *tls.Config) *hammer {
	h := &hammer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for i := 0; ; i++ {
			select {
			case <-h.stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			if err := oneSession(port, cfg, i); err != nil {
				h.failed.Add(1)
				h.mu.Lock()
				if len(h.errs) < 5 {
					h.errs = append(h.errs, fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000"), err))
				}
				h.mu.Unlock()
				continue
			}
			h.ok.Add(1)
		}
	}()
	return h
}

func oneSession(port int, cfg *tls.Config, i int) error {
	s, err := tryTLS(port, cfg)
	if err != nil {
		return err
	}
	defer s.raw.Close()
	msg := fmt.Sprintf("session %d\n", i)
	if _, err := io.WriteString(s.tls, msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s.br, got); err != nil || string(got) != msg {
		return fmt.Errorf("echo %q, %v", got, err)
	}
	s.tls.CloseWrite()
	s.raw.CloseWrite()
	if rest, err := io.ReadAll(s.br); err != nil || len(rest) > 0 {
		return fmt.Errorf("after half-close: %q, %v", rest, err)
	}
	return nil
}

// hammerMin is how many connections a hammer must make for its test to have tested.
const hammerMin = 20

// keepUntil lets the hammer run until it has made hammerMin connections (a bounded wait: on
// a loaded machine a fixed pause made too few, and the test said it did not test).
func (h *hammer) keepUntil(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); h.ok.Load()+h.failed.Load() < hammerMin && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// finish stops the hammer and fails t if a connection failed or too few were made.
func (h *hammer) finish(t *testing.T) {
	t.Helper()
	close(h.stop)
	<-h.done
	t.Logf("new connections during the upgrades: %d ok, %d failed", h.ok.Load(), h.failed.Load())
	if h.failed.Load() > 0 {
		t.Errorf("%d new connections failed: %v", h.failed.Load(), errors.Join(h.errs...))
	}
	if h.ok.Load() < hammerMin {
		t.Errorf("only %d new connections were made: the test did not test", h.ok.Load())
	}
}

// Five upgrades in a row, alternately through the pid file (SIGUSR2) and the admin address,
// while new connections come every few milliseconds: none is refused or fails, every
// upgrade leaves another process serving, and the old ones exit 0. A session open before
// the first upgrade keeps working across all of them.
func TestUpgradeListeners(t *testing.T) {
	needBinary(t)
	g, ca, port := startUpgradeGateway(t)
	cfg := ca.ClientConfig("a.test")
	held := dialTLS(t, port, cfg)
	held.roundTrip("before the upgrades\n")
	h := startHammer(port, cfg)
	pids := map[int]bool{g.cmd.Process.Pid: true}
	for i := range 5 {
		time.Sleep(150 * time.Millisecond)
		pid := g.upgradeOK(t, i%2 == 1)
		if pids[pid] {
			t.Fatalf("upgrade %d: pid %d served before", i+1, pid)
		}
		pids[pid] = true
		held.roundTrip(fmt.Sprintf("after upgrade %d\n", i+1))
	}
	time.Sleep(150 * time.Millisecond)
	h.finish(t)
	held.finish()
	if code := g.waitExit(t, 10*time.Second); code != 0 {
		t.Errorf("the first process exited %d after its upgrade, want 0", code)
	}
	if code, _, err := g.get("/readyz"); err != nil || code != 200 {
		t.Errorf("/readyz on the admin address after the upgrades: %d, %v", code, err)
	}
}

// An upgrade to a binary that does not start, or to a process that rejects the
// configuration, fails with a clear error and a non-zero exit, and the old process goes on
// serving: no new connection fails meanwhile.
func TestUpgradeFailureKeepsServing(t *testing.T) {
	needBinary(t)
	bad := filepath.Join(t.TempDir(), "snigate-broken")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'broken build' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("bad binary", func(t *testing.T) {
		g, ca, port := startUpgradeGateway(t, "--upgrade-binary", bad)
		h := startHammer(port, ca.ClientConfig("a.test"))
		out, err := upgrade("--pid-file", g.pidFile)
		if err == nil || !strings.Contains(out, "exited before taking over") {
			t.Errorf("snigate upgrade to a broken binary: %v\n%s\nwant a non-zero exit saying the new process exited", err, out)
		}
		if pid, _ := g.pid(); pid != g.cmd.Process.Pid {
			t.Errorf("pid file names %d, want the old process %d", pid, g.cmd.Process.Pid)
		}
		h.keepUntil(t)
		h.finish(t)
	})
	t.Run("configuration rejected", func(t *testing.T) {
		g, ca, port := startUpgradeGateway(t)
		h := startHammer(port, ca.ClientConfig("a.test"))
		gen := g.generation(t)
		// The running process rejects it too and keeps its configuration; the new process
		// loads it first, and refuses to take over.
		writeFile(t, g.dir, "routes.yaml", "apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {name: x}\nspec: {unknownField: 1}\n")
		g.waitLog(t, "the reload's rejection", 1, func(rec map[string]any, raw string) bool {
			return strings.Contains(raw, "routes.yaml")
		})
		out, err := upgrade("--admin", g.admin)
		if err == nil || !strings.Contains(out, "new process refused") || !strings.Contains(out, "routes.yaml") {
			t.Errorf("snigate upgrade with a rejected configuration: %v\n%s\nwant a non-zero exit naming the file", err, out)
		}
		if g2 := g.generation(t); g2 != gen {
			t.Errorf("generation %d → %d", gen, g2)
		}
		h.keepUntil(t)
		h.finish(t)
		// Fixed, the upgrade goes through.
		writeFile(t, g.dir, "routes.yaml", routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")))
		g.waitGeneration(t, gen)
		g.upgradeOK(t, false)
		oneSessionOK(t, port, ca.ClientConfig("a.test"))
	})
}

func oneSessionOK(t *testing.T, port int, cfg *tls.Config) {
	t.Helper()
	if err := oneSession(port, cfg, 0); err != nil {
		t.Fatal(err)
	}
}

// Terminated TLS cannot be handed over (its session keys live in the old process): a
// session open across an upgrade goes on in the old process, which exits 0 at the drain
// deadline and closes it then; new sessions meanwhile go to the new process.
func TestUpgradeTerminateDrains(t *testing.T) {
	needBinary(t)
	ca := testutil.NewCA(t)
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(terminate("tls", port, "", "cert-t")),
		secretYAML("cert-t", ca.Issue(t, "t.test")),
		routeYAML("route-t", "tls", []string{"t.test"}, to("svc-plain")),
		serviceYAML("svc-plain", startEcho(t, "plain", nil)),
	))
	const drainTimeout = 2 * time.Second
	pidFile := filepath.Join(t.TempDir(), "snigate.pid")
	g := &upgradeGateway{gateway: startGateway(t, dir, "--pid-file", pidFile, "--drain-timeout", drainTimeout.String()), pidFile: pidFile}
	g.stopTakenOver(t)
	g.waitPIDFile(t)
	held := dialTLS(t, port, ca.ClientConfig("t.test"))
	held.roundTrip("before the upgrade\n")
	upgraded := time.Now()
	g.upgradeOK(t, false)
	held.roundTrip("after the upgrade, in the old process\n")
	fresh := dialTLS(t, port, ca.ClientConfig("t.test"))
	fresh.roundTrip("new session, new process\n")
	fresh.finish()
	if code := g.waitExit(t, drainTimeout+5*time.Second); code != 0 {
		t.Errorf("the old process exited %d, want 0", code)
	}
	if took := time.Since(upgraded); took < drainTimeout*3/4 {
		t.Errorf("the old process exited %v after the upgrade with a session open, want the %v drain deadline", took, drainTimeout)
	}
	if _, closed, err := drain(held.raw, ioTimeout); !closed {
		t.Errorf("the held terminated session is still open after the old process exited: %v", err)
	}
	oneSessionAt(t, port, ca.ClientConfig("t.test"))
}

// oneSessionAt checks that a new terminated session through port works.
func oneSessionAt(t *testing.T, port int, cfg *tls.Config) {
	t.Helper()
	s := dialTLS(t, port, cfg)
	s.roundTrip("still served\n")
	s.finish()
}
