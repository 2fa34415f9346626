package main

import (
	"cmp"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/relay"
)

// runFlags are the flags of every command that runs the data plane (serve, controller,
// dataplane), registered in one place so that their names, defaults and help stay the same.
type runFlags struct {
	admin, metrics, bind                                           *string
	helloTimeout, dialTimeout, idleTimeout, keepAlive, drain, spin *time.Duration
	helloMax, accessClients                                        *int
	accessLog, ioURing                                             *bool
	logFormat, logLevel                                            *string
}

func addRunFlags(fs *flag.FlagSet) *runFlags {
	return &runFlags{
		admin:         fs.String("admin", "127.0.0.1:9901", "admin listener for /metrics, /healthz, /readyz, /status, /debug/pprof (empty disables); keep it on loopback: /status names every tenant's hostnames and backends"),
		metrics:       fs.String("metrics", "", "listener for /metrics, /healthz and /readyz only, for a Pod network (empty disables)"),
		bind:          fs.String("bind", "0.0.0.0", "bind address for Gateways without an IPAddress in spec.addresses"),
		helloTimeout:  fs.Duration("hello-timeout", 10*time.Second, "deadline for a complete ClientHello"),
		helloMax:      fs.Int("hello-max-bytes", 64<<10, "size cap for the ClientHello"),
		dialTimeout:   fs.Duration("dial-timeout", 5*time.Second, "backend connect timeout"),
		idleTimeout:   fs.Duration("idle-timeout", 0, "close connections idle this long (0: never)"),
		keepAlive:     fs.Duration("keepalive", 30*time.Second, "TCP keepalive idle time on both sides (negative: off)"),
		drain:         fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long open connections may finish"),
		accessLog:     fs.Bool("access-log", true, "log one line per connection"),
		accessClients: fs.Int("access-clients", access.DefaultClients, "how many clients the AccessPolicies' per-client limits track at most, over all policies (16 bytes each, rounded up to a power of two): a flood from more addresses evicts clients that hold no connection, those whose rate refills soonest first"),
		ioURing:       fs.Bool("io-uring", false, "relay loops wait on io_uring where the kernel allows it (Linux 6.12+, not refused by seccomp or kernel.io_uring_disabled), on epoll otherwise, with a warning"),
		spin:          fs.Duration("spin", relay.DefaultSpin, "how long a relay loop that has just worked asks again without waiting before it sleeps, when such spins have been paying: fewer wake-ups for the CPUs that send to it under many busy connections, at up to this much CPU per spin that finds nothing (0: never spin; epoll loops only)"),
		logFormat:     fs.String("log-format", "text", "log format: json or text"),
		logLevel:      fs.String("log-level", "info", "log level: debug, info, warn, error"),
	}
}

func (f *runFlags) logs() (*logs, error) { return newLogs(*f.logFormat, *f.logLevel, *f.accessLog) }

// newProxy makes the data plane of a serving mode (serve, dataplane, controller with
// --serve-proxy) from the flags.
//
// It also has the process ignore SIGPIPE, as nginx and HAProxy do. A write to a peer that
// has reset its connection (common: a client that closes while a TLS close_notify is on its
// way) makes the kernel raise SIGPIPE; Go's runtime takes the signal and drops it, a
// delivery, a handler run and an rt_sigreturn per such connection for nothing. Ignored, the
// write fails with EPIPE alone, which every path handles already. A broken standard output or
// error then fails its writes instead of ending the process, which suits a server.
func (f *runFlags) newProxy(m *metrics.Metrics, lg *logs) *proxy.Proxy {
	signal.Ignore(syscall.SIGPIPE)
	return proxy.New(proxy.Options{
		HelloTimeout: *f.helloTimeout, HelloMaxBytes: *f.helloMax, DialTimeout: *f.dialTimeout,
		IdleTimeout: *f.idleTimeout, KeepAlive: *f.keepAlive, AccessLog: lg.access, IOURing: *f.ioURing,
		Spin: spinOption(*f.spin), AccessClients: *f.accessClients, Metrics: m, Logger: lg.log,
	})
}

// startAdmin serves the full admin endpoints on --admin and the public ones on --metrics
// (each only when its address is set) and returns the function that stops them. With guard
// (--admin-auth), --admin asks it about every request and speaks TLS with a self-signed
// certificate made at start. An unguarded --admin that is not on loopback is served, as asked,
// with a warning: it exposes /status and /debug/pprof to that network.
func startAdmin(f *runFlags, m *metrics.Metrics, state func() admin.State, log *slog.Logger, guard func(http.Handler) (http.Handler, error)) (func(), error) {
	a, err := startAdminServers(f, m, state, log, guard, nil, nil)
	if err != nil {
		return nil, err
	}
	return a.close, nil
}

// adminServers are the admin listeners a mode serves, by flag ("--admin", "--metrics").
type adminServers struct {
	servers []*admin.Server
	lns     map[string]net.Listener
}

// close stops the servers.
func (a *adminServers) close() {
	for _, s := range a.servers {
		s.Close()
	}
}

// stopAccepting closes the listeners and leaves the requests under way to finish (a live
// upgrade: the new process accepts on the same sockets).
func (a *adminServers) stopAccepting() {
	for _, ln := range a.lns {
		ln.Close()
	}
}

// startAdminServers is startAdmin with the listeners a live upgrade inherited (by flag:
// served instead of binding the address) and setup, called with each server before it
// serves.
func startAdminServers(f *runFlags, m *metrics.Metrics, state func() admin.State, log *slog.Logger, guard func(http.Handler) (http.Handler, error),
	inherited map[string]net.Listener, setup func(flag string, s *admin.Server)) (*adminServers, error) {
	a := &adminServers{lns: map[string]net.Listener{}}
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
		ln, ok := inherited[l.flag]
		if !ok {
			var err error
			if ln, err = net.Listen("tcp", l.addr); err != nil {
				a.close()
				return nil, fmt.Errorf("%s: %w", l.flag, err)
			}
		}
		srv := l.srv(m, state)
		protected := l.flag == "--admin" && guard != nil
		if protected {
			cert, err := selfSigned(ln.Addr())
			if err == nil {
				err = srv.Protect(guard, cert)
			}
			if err != nil {
				ln.Close()
				a.close()
				return nil, fmt.Errorf("--admin-auth: %w", err)
			}
		}
		if setup != nil {
			setup(l.flag, srv)
		}
		a.servers = append(a.servers, srv)
		a.lns[l.flag] = ln
		go srv.Serve(ln)
		log.Info("admin listening", "flag", l.flag, "address", ln.Addr().String(), "authenticated", protected)
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); l.flag == "--admin" && !protected && err == nil && !ap.Addr().IsLoopback() {
			log.Warn("--admin is not on loopback: /status and /debug/pprof are open to that network; "+
				"serve only --metrics there and keep --admin on 127.0.0.1, or add --admin-auth=kubernetes", "address", ln.Addr().String())
		}
	}
	return a, nil
}

// selfSigned is a certificate for the admin listener at addr, made at start: clients of an
// authenticated admin listener pin nothing (curl -k with a bearer token); TLS is there so
// that the token is not sent in clear.
func selfSigned(addr net.Addr) (tls.Certificate, error) {
	var ips []net.IP
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		ips = append(ips, ta.IP)
	}
	host, _ := os.Hostname()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(cmp.Or(host, "snigate"), ips, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// adminAuthFlag registers --admin-auth (the commands that talk to an API server); the
// returned func gives the guard for startAdmin once the REST config is known.
func adminAuthFlag(fs *flag.FlagSet) func(rc *rest.Config) (func(http.Handler) (http.Handler, error), error) {
	mode := fs.String("admin-auth", "none", "none, or kubernetes: every request to --admin needs a bearer token the API server accepts "+
		"(TokenReview) for an identity allowed to get the path (SubjectAccessReview on the non-resource URL, e.g. ClusterRole "+
		"snigate-admin-reader), over TLS; --admin may then listen on the Pod network")
	return func(rc *rest.Config) (func(http.Handler) (http.Handler, error), error) {
		switch *mode {
		case "none":
			return nil, nil
		case "kubernetes":
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return nil, fmt.Errorf("--admin-auth: %w", err)
			}
			return admin.KubernetesGuard(cs), nil
		}
		return nil, fmt.Errorf("--admin-auth %q: want none or kubernetes", *mode)
	}
}

// spinOption turns --spin into proxy.Options.Spin, where 0 means the default: --spin=0
// turns spinning off.
func spinOption(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
