// Command snigate is an SNI-routing TLS gateway driven by Kubernetes Gateway API manifests.
//
//	snigate serve -f examples/quickstart      # serve the manifests in a folder (or file)
//	snigate check -f examples/quickstart      # validate, print status and the routing table
//	snigate echo --listen 127.0.0.1:9001 --name a --cert a.pem --key a-key.pem
//
// Run `snigate <command> -h` for the flags of each command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snigate/snigate/internal/accesslog"
	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/echo"
	"github.com/snigate/snigate/internal/handover"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/standalone"
	"github.com/snigate/snigate/internal/translate"
)

const usage = `snigate: one IP, many TLS services, routed by SNI.

Usage:
  snigate serve -f PATH [flags]   serve Gateway API manifests from files
  snigate upgrade --pid-file PATH  live-upgrade a running serve (or --admin ADDRESS; docs/operations.md)
  snigate check -f PATH           validate manifests, print status and routing table
  snigate render -f PATH          print what the TenantGateways in PATH render to, as YAML
  snigate echo --listen ADDR      run a TLS, TCP or HTTP (--http) echo backend for demos and tests
  snigate controller [flags]      run against a Kubernetes API server (see config/README.md)
  snigate dataplane --gateway NS/NAME  serve one Gateway from the API server (provisioned by the controller)
  snigate version

Run "snigate COMMAND -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve", "controller", "dataplane":
		limitMemory()
	}
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "check":
		var code int
		code, err = check(os.Args[2:], os.Stdout)
		if err == nil && code != 0 {
			os.Exit(code)
		}
	case "render":
		var code int
		code, err = renderCmd(os.Args[2:], os.Stdout, os.Stderr)
		if err == nil && code != 0 {
			os.Exit(code)
		}
	case "upgrade":
		err = upgradeCmd(os.Args[2:])
	case "echo":
		err = runEcho(os.Args[2:])
	case "controller":
		err = runController(os.Args[2:])
	case "dataplane":
		err = runDataplane(os.Args[2:])
	case "version":
		fmt.Println("snigate", version)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "snigate: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "snigate:", err)
		os.Exit(1)
	}
}

// pathsFlag collects repeated -f flags.
type pathsFlag []string

func (p *pathsFlag) String() string     { return strings.Join(*p, ",") }
func (p *pathsFlag) Set(v string) error { *p = append(*p, v); return nil }

// logs is a command's log output: every line goes to standard error, the access log's
// batched (package accesslog), the others at once and in order with them.
type logs struct {
	log    *slog.Logger
	access *accesslog.Logger // nil: --access-log=false, or a level above info
	sink   *accesslog.Sink
}

func newLogs(format, level string, access bool) (*logs, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var af accesslog.Format
	switch format {
	case "json":
		af = accesslog.JSON
	case "text":
		af = accesslog.Text
	default:
		return nil, fmt.Errorf("--log-format must be json or text, not %q", format)
	}
	l := &logs{sink: accesslog.NewSink(os.Stderr, accesslog.SinkOptions{Format: af})}
	opts := &slog.HandlerOptions{Level: lv}
	if af == accesslog.JSON {
		l.log = slog.New(slog.NewJSONHandler(l.sink.Direct(), opts))
	} else {
		l.log = slog.New(slog.NewTextHandler(l.sink.Direct(), opts))
	}
	if access && lv <= slog.LevelInfo {
		l.access = accesslog.New(l.sink, af)
	}
	return l, nil
}

// metrics exports the count of access lines dropped because standard error was too slow.
func (l *logs) metrics(m *metrics.Metrics) {
	m.AccessLogDropped(func() float64 { return float64(l.sink.Dropped()) })
}

// close writes the access lines still waiting.
func (l *logs) close() { l.sink.Close() }

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var paths pathsFlag
	fs.Var(&paths, "f", "manifest file or folder (repeatable)")
	rf := addRunFlags(fs)
	bindPorts := bindPortsFlag{}
	fs.Var(bindPorts, "bind-port", "LISTENER=HOST: listen on host port HOST for the Gateways' listener port LISTENER, e.g. 443=8443 to run unprivileged (repeatable)")
	pidFile := fs.String("pid-file", "", "write the process's pid here (a live upgrade's new process writes its own); `snigate upgrade --pid-file` finds the process through it")
	upgradeBinary := fs.String("upgrade-binary", "", "the binary a live upgrade (SIGUSR2, snigate upgrade) starts (default: the path this one was started from)")
	upgradeTimeout := fs.Duration("upgrade-timeout", 30*time.Second, "how long a live upgrade's new process may take to load its configuration and take the sockets over before the upgrade is abandoned")
	grace := shutdownGraceFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("serve: -f PATH is required")
	}
	// The binary is resolved now: replaced on disk by a package manager, the path names the
	// new binary, which is what an upgrade wants to start.
	exe := *upgradeBinary
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			exe = os.Args[0]
		}
	}
	hc, err := handover.FromEnv()
	if err != nil {
		return err
	}
	// SIGUSR2 is listened for from the start: the pid file that tells where to send it may be
	// written before serve's loop runs (a new process writes it as it takes over), and a
	// SIGUSR2 nobody asked for is dropped.
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	lg, err := rf.logs()
	if err != nil {
		return err
	}
	defer lg.close()
	log := lg.log
	slog.SetDefault(log)
	m := metrics.New()
	lg.metrics(m)
	p := rf.newProxy(m, lg)
	var to *takeover
	apply := p.Apply
	if hc != nil {
		// Started by a live upgrade: the configuration is validated before the sockets are
		// asked for (takeover.apply), and any failure up to serving is told to the old
		// process, which goes on serving.
		hc.SetDeadline(time.Now().Add(*upgradeTimeout))
		to = &takeover{hc: hc, timeout: *upgradeTimeout, p: p, log: log, pidFile: *pidFile}
		apply = to.apply
	}
	r := standalone.New(standalone.Config{
		Paths: paths, Proxy: p, Apply: apply, Metrics: m, Logger: log,
		Translate: translate.Options{DefaultBindAddress: *rf.bind, BindPorts: bindPorts},
	})
	restoreGC := relaxGC(file.Size(paths...))
	err = r.Load()
	restoreGC()
	if err != nil {
		to.fail(err)
		return err
	}
	p.DropInherited()
	defer paceGC()()
	up := &upgrader{exe: exe, args: os.Args[1:], timeout: *upgradeTimeout, p: p, log: log, pidFile: *pidFile, upgraded: make(chan struct{})}
	var inheritedAdmin map[string]net.Listener
	if to != nil {
		inheritedAdmin = to.admin
	}
	sd := &shutdown{grace: *grace, log: log}
	admins, err := startAdminServers(rf, m, sd.state(r.State), log, nil, inheritedAdmin, func(flag string, s *admin.Server) {
		if flag == "--admin" {
			s.HandleFunc("POST /upgrade", up.upgradeHandler)
		}
	})
	if err != nil {
		to.fail(err)
		return err
	}
	defer admins.close()
	up.admin = admins
	if err := to.serving(); err != nil {
		// The listeners are this process's already (the old one stopped accepting once it
		// read Serving): go on serving whatever came.
		log.Warn("upgrade: taking the connections over ended early", "error", err)
		if err := writePIDFile(*pidFile); err != nil {
			log.Warn("cannot write the pid file", "path", *pidFile, "error", err)
		}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	if to == nil {
		// (A new process wrote it as it took over.)
		if err := writePIDFile(*pidFile); err != nil {
			log.Warn("cannot write the pid file", "path", *pidFile, "error", err)
		}
	}
	sdNotify(fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reload := make(chan struct{}, 1)
	watchErr := make(chan error, 1)
	go func() { watchErr <- r.Watch(ctx, reload) }()
	drain := func(why string) error {
		log.Info("shutting down: draining connections", "reason", why, "timeout", *rf.drain)
		cancel()
		dctx, dcancel := context.WithTimeout(context.Background(), *rf.drain)
		err := p.Shutdown(dctx)
		dcancel()
		if err != nil {
			log.Warn("drain timeout reached; closed remaining connections")
		}
		log.Info("stopped")
		return nil
	}
	var graceEnd <-chan time.Time // the grace after a SIGTERM or SIGINT: readiness fails
	var stopping os.Signal
	for {
		select {
		case err := <-watchErr:
			if err != nil {
				return err
			}
		case <-graceEnd:
			if *pidFile != "" && !up.done.Load() {
				os.Remove(*pidFile)
			}
			return drain(stopping.String())
		case <-up.upgraded:
			// The new process serves the sockets and took the relayed connections; what is
			// left here (terminated TLS, HTTPS, connections still being routed) drains. The
			// pid file is the new process's now.
			return drain("upgraded")
		case <-usr2:
			go up.signalled()
		case s := <-sigs:
			if s == syscall.SIGHUP {
				select {
				case reload <- struct{}{}:
				default:
				}
				continue
			}
			if stopping == nil && *grace > 0 {
				// As a data plane behind a load balancer stops (shutdown): readiness fails
				// while connections are still accepted, until the grace ends or a second
				// signal comes.
				stopping = s
				sd.draining.Store(true)
				log.Info("stopping: readiness fails, connections still accepted", "signal", s.String(), "grace", *grace)
				graceEnd = time.After(*grace)
				continue
			}
			if stopping != nil {
				log.Info("second signal: grace cut short", "signal", s.String())
			}
			if *pidFile != "" && !up.done.Load() {
				os.Remove(*pidFile)
			}
			return drain(s.String())
		}
	}
}

func runEcho(args []string) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9001", "address to listen on")
	name := fs.String("name", "echo", "name to answer with")
	cert := fs.String("cert", "", "PEM certificate file (TLS when set)")
	key := fs.String("key", "", "PEM key file")
	httpMode := fs.Bool("http", false, "serve plain HTTP instead: answer each request with JSON (name, method, host, path, headers) and echo WebSocket messages")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *httpMode {
		if *cert != "" || *key != "" {
			return errors.New("echo: --http serves plain HTTP; --cert and --key do not apply")
		}
		return echo.RunHTTP(ctx, *listen, *name)
	}
	return echo.Run(ctx, *listen, *name, *cert, *key)
}

// bindPortsFlag is --bind-port LISTENER=HOST, repeatable.
type bindPortsFlag map[int32]int32

func (b bindPortsFlag) String() string {
	var parts []string
	for k, v := range b {
		parts = append(parts, fmt.Sprintf("%d=%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (b bindPortsFlag) Set(s string) error {
	from, to, ok := strings.Cut(s, "=")
	f, err1 := strconv.ParseUint(from, 10, 16)
	t, err2 := strconv.ParseUint(to, 10, 16)
	if !ok || err1 != nil || err2 != nil || f == 0 || t == 0 {
		return fmt.Errorf("want LISTENER=HOST, two ports 1-65535 (443=8443), not %q", s)
	}
	for k, v := range b {
		if v == int32(t) && k != int32(f) {
			return fmt.Errorf("host port %d is already the one of listener port %d", t, k)
		}
	}
	b[int32(f)] = int32(t)
	return nil
}
