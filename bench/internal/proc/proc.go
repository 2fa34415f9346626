// Package proc starts and stops the benchmark's servers: each in its own process group,
// pinned to CPUs with taskset, output to a log file, killed with the runner if it dies.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is a running server.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	// StopSignal asks for a clean stop (default SIGTERM); after StopWait the group is killed.
	StopSignal syscall.Signal
	StopWait   time.Duration
	done       chan struct{}
	err        error
}

// Options configure Start.
type Options struct {
	CPUs string   // taskset -c list; empty: inherit
	Dir  string   // working directory
	Log  string   // stdout and stderr go here
	Env  []string // extra environment
	// Cred runs the process as another user.
	Cred *syscall.Credential
}

// Start starts argv.
func Start(name string, argv []string, o Options) (*Proc, error) {
	if o.CPUs != "" {
		argv = append([]string{"taskset", "-c", o.CPUs}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: o.Cred}
	dieWithParent(cmd.SysProcAttr)
	if o.Log != "" {
		f, err := os.OpenFile(o.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: o.Log, StopSignal: syscall.SIGTERM, StopWait: time.Second, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the server's process id (taskset execs it, keeping its pid).
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Done is closed when the process ends.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop asks the process to stop, then kills its whole process group.
func (p *Proc) Stop() {
	if p == nil {
		return
	}
	pgid := p.Pid()
	syscall.Kill(p.Pid(), p.StopSignal)
	select {
	case <-p.done:
	case <-time.After(p.StopWait):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// Tail returns the last bytes of the log, for error messages.
func (p *Proc) Tail() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// WaitFor calls ready until it returns nil, the process exits or timeout passes.
func (p *Proc) WaitFor(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if ok, err := p.Exited(); ok {
			return fmt.Errorf("%s exited (%v): %s", p.Name, err, p.Tail())
		}
		if last = ready(); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.Join(fmt.Errorf("%s not ready after %s: %w", p.Name, timeout, last), errors.New(p.Tail()))
}
