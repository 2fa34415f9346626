// Package testutil starts real database servers and makes the certificates they serve, for
// snigate's end-to-end tests.
//
// Every server runs as a private instance: its own data folder under the system temp dir, a
// free port on 127.0.0.1, TLS on with a certificate the test issued from its own CA, and a
// value that only this instance holds (its name), so a test can assert which server a
// connection reached. It is stopped in t.Cleanup.
//
//	ca := testutil.NewCA(t)
//	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "alpha.db.test"})
//	// psql "$(pg.ConnString("127.0.0.1", pg.Port))" -c 'select name from instance'
//
// The servers come from Debian's packages (scripts/install-test-deps.sh installs them). A
// missing binary skips the test on a developer's machine and fails it under CI=true: an
// end-to-end test that silently skips in CI proves nothing (see Require).
//
// It also starts the PROXY protocol peers (proxyproto.go), real servers that do not serve a
// database but read or write the PROXY v1/v2 header in front of one:
//
//   - StartHAProxyBackend: HAProxy with "bind ... accept-proxy", logging the client address,
//     destination and PROXY v2 authority TLV it read from each header (HAProxyBackend.Lines);
//   - StartNginxBackend: nginx's stream module with "listen ... proxy_protocol", logging
//     $proxy_protocol_addr:$proxy_protocol_port and $remote_addr (NginxBackend.Lines);
//   - StartHAProxyFront: HAProxy in front of an upstream that it sends a PROXY v2 (or v1)
//     header carrying the client's real address.
//
// Neither Debian 12 server can log the PROXY v2 ALPN TLV: HAProxy has fc_pp_tlv from 2.9 on
// (2.6 here; HAProxyBackend.LogsALPN says whether it has it), nginx $proxy_protocol_tlv_alpn
// from 1.23.2 on (1.22 here).
//
// When the tests run as root (CI does), PostgreSQL runs as the "postgres" system user, since it
// refuses to run as root, and MariaDB is started with --user=root.
//
// The certificates, the PostgreSQL configuration and the free ports come from
// internal/testutil/fixture, which needs no testing.TB (the benchmark uses it too); this
// package wraps what can fail there with t.Fatal.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil/fixture"
)

// StartTimeout bounds how long a server may take to become ready.
const StartTimeout = 60 * time.Second

// stopTimeout bounds a graceful stop before the process is killed.
const stopTimeout = 15 * time.Second

// InCI reports whether the tests run in CI (CI=true), where missing parts are failures.
func InCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// Require stops the test when a part it needs from outside (a binary, a package, a system
// user) is missing: err says what went wrong. Under CI=true it fails the test loudly, since
// CI installs every dependency (scripts/install-test-deps.sh) and a skipped end-to-end test
// there would hide a broken setup. Elsewhere it skips with the reason. A nil err does
// nothing.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if InCI() {
		t.Fatalf("MISSING TEST DEPENDENCY %s: %v (CI=true: this fails instead of skipping; run scripts/install-test-deps.sh)", what, err)
		return
	}
	t.Skipf("skipping: needs %s: %v (run scripts/install-test-deps.sh as root)", what, err)
}

// SkipShort skips a test that needs real servers or tools in -short mode. Under CI=true a
// -short run fails instead: CI must run every test, and a short run there would skip the
// end-to-end ones without a word.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if InCI() {
		t.Fatalf("-short under CI=true would skip %s: CI runs the whole suite (scripts/test.sh)", why)
	}
	t.Skipf("-short: %s", why)
}

// Binary finds an executable by name: first in dirs, then on PATH. It calls Require when it
// is nowhere.
func Binary(t testing.TB, name string, dirs ...string) string {
	t.Helper()
	p, err := lookBinary(name, dirs...)
	Require(t, name, err)
	return p
}

func lookBinary(name string, dirs ...string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found in %v or on PATH", name, dirs)
	}
	return p, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago (fixture.FreePort).
// Another process may take it before the caller binds it; the Start functions retry with a
// new port when that happens.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := fixture.FreePort()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return port
}

// FreePorts returns n distinct free loopback ports (fixture.FreePorts).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := fixture.FreePorts(n)
	if err != nil {
		t.Fatalf("free ports: %v", err)
	}
	return ports
}

// Listen binds a loopback listener on a port FreePort will not hand out (fixture.Listen),
// closed when the test ends. Tests start their own backends with it.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := fixture.Listen()
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// errPortInUse marks a start attempt that lost its port to another process.
var errPortInUse = errors.New("port already in use")

// withPortRetry runs start with fresh ports until it does not fail with errPortInUse.
func withPortRetry(t testing.TB, start func(port int) error) int {
	t.Helper()
	var err error
	for range 3 {
		port := FreePort(t)
		if err = start(port); err == nil {
			return port
		}
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	t.Fatal(err)
	return 0
}

// runAs is the unprivileged identity a server runs as when the tests run as root.
type runAs struct {
	uid, gid uint32
	name     string
}

// serverUser returns who a server must run as: nil means the current user. As root it
// looks up the system user the Debian package created (postgres, mysql).
func serverUser(name string) (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root and no %q system user: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &runAs{uid: uint32(uid), gid: uint32(gid), name: name}, nil
}

// serverDir makes a private folder for one server instance and removes it in t.Cleanup.
// It is not t.TempDir(): that one sits in a 0700 folder the server's own user cannot enter
// when the tests run as root, and its long path can exceed the 107-byte limit of a unix
// socket path.
func serverDir(t testing.TB, prefix string, owner *runAs) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "snigate-"+prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if owner != nil {
		if err := os.Chown(dir, int(owner.uid), int(owner.gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the test (client) must read the socket folder
		t.Fatal(err)
	}
	return dir
}

// writeFile writes a file that owner (when not nil) owns.
func writeFile(path string, data []byte, mode os.FileMode, owner *runAs) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	if owner != nil {
		return os.Chown(path, int(owner.uid), int(owner.gid))
	}
	return nil
}

// command builds a command that runs as owner (when not nil), in dir, with an environment
// free of the outer PG*/MYSQL*/REDIS* settings that could change what clients do.
func command(owner *runAs, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = CleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	DieWithParent(cmd.SysProcAttr)
	if owner != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: owner.uid, Gid: owner.gid}
		cmd.Env = append(cmd.Env, "HOME="+dir, "USER="+owner.name, "LOGNAME="+owner.name)
	}
	return cmd
}

// CleanEnv returns the environment without variables that change how the programs a test
// starts behave behind its back: database clients' settings (PGSSLMODE, PGHOST, MYSQL_HOST,
// REDISCLI_AUTH, ...) and the Go runtime's collector settings (GOGC, GOMEMLIMIT), which
// snigate leaves alone when set, so a test's outcome would depend on how the suite was run.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "MYSQL") || strings.HasPrefix(k, "MARIADB") || strings.HasPrefix(k, "REDISCLI") {
			continue
		}
		if k == "GOGC" || k == "GOMEMLIMIT" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runQuiet runs cmd and returns its combined output in the error when it fails.
func runQuiet(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.Bytes())
	}
	return nil
}

// process is a running server whose output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process exited
	err     error         // Wait's result, valid after done
	stopSig syscall.Signal
	once    sync.Once
}

func startProcess(cmd *exec.Cmd, name, logPath string, stopSig syscall.Signal) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{}), stopSig: stopSig}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process is gone.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to stop, waits a bounded time, then kills it.
func (p *process) stop() {
	p.once.Do(func() {
		if p.exited() {
			return
		}
		_ = p.cmd.Process.Signal(p.stopSig)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// logTail returns the end of the process's log, for failure messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// waitReady polls ready until it returns nil, the process exits, or StartTimeout passes.
// portInUse says whether a log line means the port was taken (the caller then retries).
func (p *process) waitReady(ready func() error, portInUse func(log string) bool) error {
	return p.waitReadyWithin(StartTimeout, ready, portInUse)
}

// waitReadyWithin is waitReady bounded by timeout instead of StartTimeout, for servers that
// start slower (an Erlang node) on a loaded two-core machine.
func (p *process) waitReadyWithin(timeout time.Duration, ready func() error, portInUse func(log string) bool) error {
	deadline := time.Now().Add(timeout)
	delay := 20 * time.Millisecond
	var last error
	for {
		if p.exited() {
			log := p.logTail()
			if portInUse != nil && portInUse(log) {
				return fmt.Errorf("%s: %w", p.name, errPortInUse)
			}
			return fmt.Errorf("%s exited before it was ready (%v); log %s:\n%s", p.name, p.err, p.logPath, log)
		}
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return fmt.Errorf("%s not ready after %v: %v; log %s:\n%s", p.name, timeout, last, p.logPath, p.logTail())
		}
		time.Sleep(delay)
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// interruptSignal is what a user's Ctrl-C sends.
var interruptSignal = syscall.SIGINT

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers: a process's or a
// logger's output that a test reads while it is being written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Sockopt is an integer socket option and the value a test wants it to have.
type Sockopt struct {
	Name       string
	Level, Opt int
	Want       int
}

// Sockopts reports, as test errors, the options of socket fd (what names it) that do not
// have their wanted values.
func Sockopts(t testing.TB, what string, fd int, opts ...Sockopt) {
	t.Helper()
	for _, o := range opts {
		if v, err := syscall.GetsockoptInt(fd, o.Level, o.Opt); err != nil || v != o.Want {
			t.Errorf("%s %s = %d, %v; want %d", what, o.Name, v, err, o.Want)
		}
	}
}

// StartProcess starts cmd (its output to a log in the test's temp folder), waits until ready
// returns nil (bounded by StartTimeout; an early exit fails at once with the log), and stops
// it in t.Cleanup with SIGTERM, then SIGKILL. The log is printed when the test failed, and
// an exit before the test's end fails the test. For the helper servers of the certificate
// tests (Pebble, cert-manager); the database servers have their own Start functions.
func StartProcess(t testing.TB, cmd *exec.Cmd, name string, ready func() error) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	DieWithParent(cmd.SysProcAttr)
	logPath := filepath.Join(t.TempDir(), strings.ReplaceAll(name, " ", "-")+".log")
	p, err := startProcess(cmd, name, logPath, syscall.SIGTERM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		early := p.exited()
		p.stop()
		if early && !t.Failed() {
			t.Errorf("%s exited before the test ended (%v); log %s:\n%s", name, p.err, logPath, p.logTail())
			return
		}
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", name, logPath, p.logTail())
		}
	})
	if ready != nil {
		if err := p.waitReady(ready, nil); err != nil {
			t.Fatal(err)
		}
	}
}
