package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/proxy"
)

// runFlags are the flags of every command that runs the data plane (serve, controller,
// dataplane), registered in one place so that their names, defaults and help stay the same.
type runFlags struct {
	admin, metrics, bind                                     *string
	helloTimeout, dialTimeout, idleTimeout, keepAlive, drain *time.Duration
	helloMax                                                 *int
	accessLog                                                *bool
	logFormat, logLevel                                      *string
}

func addRunFlags(fs *flag.FlagSet) *runFlags {
	return &runFlags{
		admin:        fs.String("admin", "127.0.0.1:9901", "admin listener for /metrics, /healthz, /readyz, /status, /debug/pprof (empty disables); keep it on loopback: /status names every tenant's hostnames and backends"),
		metrics:      fs.String("metrics", "", "listener for /metrics, /healthz and /readyz only, for a Pod network (empty disables)"),
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

// startAdmin serves the full admin endpoints on --admin and the public ones on --metrics
// (each only when its address is set) and returns the function that stops them. An --admin
// address that is not loopback is served, as asked, with a warning: it exposes /status and
// /debug/pprof to that network.
func startAdmin(f *runFlags, m *metrics.Metrics, state func() admin.State, log *slog.Logger) (func(), error) {
	var servers []*admin.Server
	stop := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for _, l := range []struct {
		flag, addr string
		srv        func(*metrics.Metrics, func() admin.State) *admin.Server
	}{
		{"--admin", *f.admin, admin.New},
		{"--metrics", *f.metrics, admin.NewPublic},
	} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		srv := l.srv(m, state)
		servers = append(servers, srv)
		go srv.Serve(ln)
		log.Info("admin listening", "flag", l.flag, "address", ln.Addr().String())
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); l.flag == "--admin" && err == nil && !ap.Addr().IsLoopback() {
			log.Warn("--admin is not on loopback: /status and /debug/pprof are open to that network; "+
				"serve only --metrics there and keep --admin on 127.0.0.1", "address", ln.Addr().String())
		}
	}
	return stop, nil
}
