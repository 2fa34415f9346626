package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/proxy"
)

// runFlags are the flags of every command that runs the data plane (serve, controller,
// dataplane), registered in one place so that their names, defaults and help stay the same.
type runFlags struct {
	admin, bind                                              *string
	helloTimeout, dialTimeout, idleTimeout, keepAlive, drain *time.Duration
	helloMax                                                 *int
	accessLog                                                *bool
	logFormat, logLevel                                      *string
}

func addRunFlags(fs *flag.FlagSet) *runFlags {
	return &runFlags{
		admin:        fs.String("admin", "127.0.0.1:9901", "admin listener for /metrics, /healthz, /readyz, /status, /debug/pprof (empty disables)"),
		bind:         fs.String("bind", "0.0.0.0", "bind address for Gateways without an IPAddress in spec.addresses"),
		helloTimeout: fs.Duration("hello-timeout", 10*time.Second, "deadline for a complete ClientHello"),
		helloMax:     fs.Int("hello-max-bytes", 64<<10, "size cap for the ClientHello"),
		dialTimeout:  fs.Duration("dial-timeout", 5*time.Second, "backend connect timeout"),
		idleTimeout:  fs.Duration("idle-timeout", 0, "close connections idle this long (0: never)"),
		keepAlive:    fs.Duration("keepalive", 30*time.Second, "TCP keepalive idle time on both sides (negative: off)"),
		drain:        fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long open connections may finish"),
		accessLog:    fs.Bool("access-log", true, "log one line per connection"),
		logFormat:    fs.String("log-format", "text", "log format: json or text"),
		logLevel:     fs.String("log-level", "info", "log level: debug, info, warn, error"),
	}
}

func (f *runFlags) logger() (*slog.Logger, error) { return newLogger(*f.logFormat, *f.logLevel) }

func (f *runFlags) proxyOptions(m *metrics.Metrics, log *slog.Logger) proxy.Options {
	return proxy.Options{
		HelloTimeout: *f.helloTimeout, HelloMaxBytes: *f.helloMax, DialTimeout: *f.dialTimeout,
		IdleTimeout: *f.idleTimeout, KeepAlive: *f.keepAlive, AccessLog: *f.accessLog,
		Metrics: m, Logger: log,
	}
}

// startAdmin serves the admin endpoints on addr (nothing when addr is empty) and returns the
// function that stops them.
func startAdmin(addr string, m *metrics.Metrics, state func() admin.State, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	srv := admin.New(m, state)
	go srv.Serve(ln)
	log.Info("admin listening", "address", ln.Addr().String())
	return func() { srv.Close() }, nil
}
