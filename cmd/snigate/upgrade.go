package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/handover"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/snapshot"
)

// A live upgrade of `snigate serve` (docs/operations.md): SIGUSR2, `snigate upgrade` or POST
// /upgrade on --admin start the new binary with the same arguments and the hand-over socket
// as fd 3. The new process loads and validates its configuration, takes the listening
// sockets, serves, then takes the relayed connections; this process then stops accepting,
// drains what it could not hand over and exits. Until the new process says it serves, any
// failure (it does not start, rejects the configuration, cannot use a socket, does not answer
// within --upgrade-timeout) leaves this process serving everything.

// adminListenerPrefix names the admin listeners among the hand-over's listeners.
const adminListenerPrefix = "admin:"

// upgrader is the old process's side.
type upgrader struct {
	exe     string   // the binary this process was started from (or --upgrade-binary)
	args    []string // this process's arguments, which the new one gets
	timeout time.Duration
	p       *proxy.Proxy
	admin   *adminServers
	log     *slog.Logger
	pidFile string

	mu         sync.Mutex // one upgrade at a time
	done       atomic.Bool
	finishOnce sync.Once
	// upgraded is closed once an upgrade succeeded: serve drains and exits.
	upgraded chan struct{}
}

// run starts exe (the upgrader's own when empty) and hands everything over to it. It
// returns the new process's pid, or why this process goes on serving.
func (u *upgrader) run(exe string) (int, error) {
	if !u.mu.TryLock() {
		return 0, errors.New("an upgrade is already under way")
	}
	defer u.mu.Unlock()
	if u.done.Load() {
		return 0, errors.New("this process has been upgraded already and is draining")
	}
	if exe == "" {
		exe = u.exe
	}
	hc, theirs, err := handover.Socketpair()
	if err != nil {
		return 0, err
	}
	defer hc.Close()
	cmd := exec.Command(exe, u.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Env = append(os.Environ(), handover.EnvFD+"=3")
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return 0, fmt.Errorf("starting the new binary: %w", err)
	}
	exited := &childExit{done: make(chan struct{})}
	go func() { exited.err = cmd.Wait(); close(exited.done) }()
	u.log.Info("upgrade: new process started", "binary", exe, "pid", cmd.Process.Pid)
	// Until it serves, the new process is killed on any failure: it must not go on with
	// sockets this process keeps serving.
	abort := func(err error) (int, error) {
		cmd.Process.Kill()
		<-exited.done
		if !strings.Contains(err.Error(), "exited") && exited.err != nil {
			err = fmt.Errorf("%w (new process: %v)", err, exited.err)
		}
		return 0, err
	}
	hc.SetDeadline(time.Now().Add(u.timeout))
	if _, err := expect[*handover.Hello](hc, exited); err != nil {
		return abort(err)
	}
	names, fds, err := u.listenerFDs()
	if err != nil {
		return abort(err)
	}
	err = hc.Send(&handover.Listeners{Names: names}, fds...)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return abort(err)
	}
	if _, err := expect[*handover.Serving](hc, exited); err != nil {
		return abort(err)
	}
	// The new process accepts on every socket: from here on there is no way back, and this
	// process only gives away what it can.
	u.done.Store(true)
	u.p.StopAccepting()
	u.admin.stopAccepting()
	u.log.Info("upgrade: the new process serves; this one stopped accepting", "pid", cmd.Process.Pid)
	// The connections get a deadline of their own: many pairs take a while to send.
	hc.SetDeadline(time.Now().Add(u.timeout))
	sent, err := u.handPairs(hc)
	if err == nil {
		err = hc.Send(&handover.End{Pairs: sent})
	}
	var taken int
	if err == nil {
		var t *handover.Taken
		if t, err = expect[*handover.Taken](hc, exited); err == nil {
			taken = t.Pairs
		}
	}
	if err != nil {
		// The pairs handed over are the new process's whatever it says now; the others were
		// never taken off this process.
		u.log.Warn("upgrade: handing over the connections ended early", "error", err)
	}
	u.log.Info("upgrade: done", "pid", cmd.Process.Pid, "pairs_sent", sent, "pairs_taken", taken)
	// The new process outlives this one (the goroutine in cmd.Wait reaps it only should it
	// exit first). serve drains once the caller has told whoever asked (finished).
	return cmd.Process.Pid, nil
}

// childExit is the new process's exit: done is closed once err is set.
type childExit struct {
	done chan struct{}
	err  error
}

// expect reads the next message, which must be a T; a Failed message, a read error or the
// new process's exit is the error, in the new process's words where it gave them.
func expect[T handover.Message](hc *handover.Conn, exited *childExit) (T, error) {
	var zero T
	m, fds, err := hc.Recv()
	for _, fd := range fds {
		unix.Close(fd) // no message the old process expects carries fds
	}
	if err != nil {
		select {
		case <-exited.done:
			return zero, fmt.Errorf("the new process exited before taking over (%v)", exited.err)
		case <-time.After(100 * time.Millisecond):
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return zero, fmt.Errorf("the new process did not take over within --upgrade-timeout: %w", err)
		}
		return zero, fmt.Errorf("the new process: %w", err)
	}
	switch m := m.(type) {
	case T:
		return m, nil
	case *handover.Failed:
		return zero, fmt.Errorf("the new process refused: %s", m.Reason)
	}
	return zero, fmt.Errorf("the new process sent %T, want %T", m, zero)
}

// listenerFDs returns duplicates of every listening socket: the proxy's ports and the admin
// listeners.
func (u *upgrader) listenerFDs() ([]string, []int, error) {
	names, fds, err := u.p.ListenerFDs()
	if err != nil {
		return nil, nil, err
	}
	for flag, ln := range u.admin.lns {
		fd, err := dupListener(ln)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, nil, err
		}
		names, fds = append(names, adminListenerPrefix+flag), append(fds, fd)
	}
	return names, fds, nil
}

func dupListener(ln net.Listener) (int, error) {
	sc, ok := ln.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return -1, fmt.Errorf("admin listener %T has no socket", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return fd, nil
}

// handPairs hands the relayed connections over, each in a Pair message with its sockets.
func (u *upgrader) handPairs(hc *handover.Conn) (int, error) {
	return u.p.DetachPairs(func(st *handover.Pair, client, backend int) error {
		return hc.Send(st, client, backend)
	})
}

// upgradeHandler serves POST /upgrade on --admin: the upgrade's outcome is the response,
// 200 with the new pid, or 500 with the error.
func (u *upgrader) upgradeHandler(w http.ResponseWriter, r *http.Request) {
	pid, err := u.run("")
	if err != nil {
		u.log.Error("upgrade failed; this process goes on serving", "error", err)
		http.Error(w, "upgrade failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "upgraded: new process %d\n", pid)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	u.finished()
}

// finished lets serve drain and exit, after a successful upgrade's outcome was told.
func (u *upgrader) finished() { u.finishOnce.Do(func() { close(u.upgraded) }) }

// signalled runs an upgrade asked for with SIGUSR2 and leaves its outcome next to the pid
// file, where `snigate upgrade --pid-file` reads it.
func (u *upgrader) signalled() {
	pid, err := u.run("")
	line := fmt.Sprintf("ok %d\n", pid)
	if err != nil {
		u.log.Error("upgrade failed; this process goes on serving", "error", err)
		line = "error " + err.Error() + "\n"
	}
	if u.pidFile != "" {
		if werr := writeFileAtomic(upgradeStatusFile(u.pidFile), line); werr != nil {
			u.log.Warn("cannot write the upgrade's outcome", "error", werr)
		}
	}
	if err == nil {
		u.finished()
	}
}

func upgradeStatusFile(pidFile string) string { return pidFile + ".upgrade" }

// writeFileAtomic replaces path with content: a reader sees the old file or the new, never
// half of one.
func writeFileAtomic(path, content string) error {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// takeover is the new process's side, from the start of serve until it serves. A nil
// takeover (no EnvFD) does nothing.
type takeover struct {
	hc      *handover.Conn
	timeout time.Duration
	pidFile string
	p       *proxy.Proxy
	log     *slog.Logger
	got     bool
	admin   map[string]net.Listener
}

// apply is the standalone runner's Apply: the first valid configuration fetches the
// listening sockets first (Hello, Listeners), so that Apply serves them rather than binding.
func (t *takeover) apply(s *snapshot.Snapshot) error {
	if t != nil && !t.got {
		t.got = true
		if err := t.listeners(); err != nil {
			return err
		}
	}
	return t.p.Apply(s)
}

func (t *takeover) listeners() error {
	if err := t.hc.Send(&handover.Hello{PID: os.Getpid()}); err != nil {
		return err
	}
	m, fds, err := t.hc.Recv()
	if err != nil {
		return fmt.Errorf("upgrade: receiving the listeners: %w", err)
	}
	ls, ok := m.(*handover.Listeners)
	if !ok {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("upgrade: the old process sent %T, want the listeners", m)
	}
	ports := map[string]int{}
	t.admin = map[string]net.Listener{}
	for i, name := range ls.Names {
		flag, isAdmin := strings.CutPrefix(name, adminListenerPrefix)
		if !isAdmin {
			ports[name] = fds[i]
			continue
		}
		f := os.NewFile(uintptr(fds[i]), name)
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("upgrade: admin listener %s: %w", flag, err)
		}
		t.admin[flag] = ln
	}
	t.p.Inherit(ports)
	t.log.Info("upgrade: listening sockets taken over", "ports", len(ports), "admin", len(t.admin))
	return nil
}

// fail tells the old process why this one gives up (it goes on serving).
func (t *takeover) fail(err error) {
	if t == nil {
		return
	}
	t.hc.Send(&handover.Failed{Reason: err.Error()})
	t.hc.Close()
}

// serving tells the old process this one accepts, then takes the relayed connections.
func (t *takeover) serving() error {
	if t == nil {
		return nil
	}
	defer t.hc.Close()
	if !t.got {
		// No Apply ran (cannot happen after a successful first load); say so rather than
		// hang the old process.
		err := errors.New("upgrade: no configuration was applied")
		t.fail(err)
		return err
	}
	if err := t.hc.Send(&handover.Serving{}); err != nil {
		return err
	}
	t.hc.SetDeadline(time.Now().Add(t.timeout))
	taken := 0
	for {
		m, fds, err := t.hc.Recv()
		if err != nil {
			return fmt.Errorf("upgrade: receiving connections: %w", err)
		}
		switch m := m.(type) {
		case *handover.End:
			t.log.Info("upgrade: took over", "pairs", taken, "sent", m.Pairs)
			// Before the last message: once the old process reports success, the pid file
			// names this process.
			if err := writePIDFile(t.pidFile); err != nil {
				t.log.Warn("cannot write the pid file", "path", t.pidFile, "error", err)
			}
			return t.hc.Send(&handover.Taken{Pairs: taken})
		case *handover.Pair:
			if err := t.p.Resume(m, fds[0], fds[1]); err != nil {
				// Its bytes cannot go on whole anywhere: the old process let go of it.
				t.log.Warn("upgrade: a connection handed over could not be served", "client", m.Client.String(), "route", m.Route, "error", err)
				unix.Close(fds[0])
				unix.Close(fds[1])
				continue
			}
			taken++
		default:
			for _, fd := range fds {
				unix.Close(fd)
			}
			return fmt.Errorf("upgrade: the old process sent %T", m)
		}
	}
}

// upgradeCmd is `snigate upgrade`: it asks a running serve to upgrade, through its admin
// address or a SIGUSR2 to the pid in its pid file, and waits for the outcome.
func upgradeCmd(args []string) error {
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	pidFile := fs.String("pid-file", "", "the --pid-file of the running snigate serve: signal it (SIGUSR2) and read the outcome next to it")
	adminAddr := fs.String("admin", "", "the --admin address of the running snigate serve: POST /upgrade there")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the outcome")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *adminAddr != "":
		c := &http.Client{Timeout: *timeout}
		resp, err := c.Post("http://"+*adminAddr+"/upgrade", "text/plain", nil)
		if err != nil {
			return fmt.Errorf("upgrade: %w", err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		io.Copy(&b, io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", strings.TrimSpace(b.String()))
		}
		fmt.Print(b.String())
		return nil
	case *pidFile != "":
		pid, err := readPID(*pidFile)
		if err != nil {
			return err
		}
		status := upgradeStatusFile(*pidFile)
		os.Remove(status)
		if err := unix.Kill(pid, unix.SIGUSR2); err != nil {
			return fmt.Errorf("upgrade: signalling pid %d: %w", pid, err)
		}
		deadline := time.Now().Add(*timeout)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(status); err == nil {
				line := strings.TrimSpace(string(b))
				if rest, ok := strings.CutPrefix(line, "ok "); ok {
					fmt.Printf("upgraded: new process %s\n", rest)
					return nil
				}
				return errors.New(strings.TrimPrefix(line, "error "))
			}
			if unix.Kill(pid, 0) != nil {
				return fmt.Errorf("upgrade: pid %d exited without an outcome", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return fmt.Errorf("upgrade: no outcome within %s", *timeout)
	}
	return errors.New("upgrade: --admin ADDRESS or --pid-file PATH is required")
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("upgrade: %w", err)
	}
	var pid int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid); err != nil || pid <= 0 {
		return 0, fmt.Errorf("upgrade: %s holds no pid", path)
	}
	return pid, nil
}

// writePIDFile writes this process's pid to path (nothing when empty).
func writePIDFile(path string) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeFileAtomic(path, fmt.Sprintf("%d\n", os.Getpid()))
}
