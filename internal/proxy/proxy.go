// Package proxy is snigate's data plane: it binds one socket per port of the serving
// snapshot, reads each connection's ClientHello, routes it by SNI and forwards it to a
// backend, either untouched (passthrough, spliced by the kernel) or decrypted (terminate).
//
// The proxy reads only snapshots (package snapshot) and imports no Gateway API types.
//
// How a connection flows: every port's listening socket is in the relay's event loops
// (relay.Listen); the loop that accepts a connection asks portListener.Accepted for its
// books (limits, metrics), reads the ClientHello and calls router.Route, all on the loop.
// Every connection's fate is one pure function, decide (decide.go): from the
// port and the bytes it says passthrough, TCP, terminate, HTTPS, HTTP, a PostgreSQL request
// to answer, a PostgreSQL cancel, or a reject with its reason. A passthrough or TCP decision
// is dialed and relayed right there; anything else is released back, with the bytes read
// so far and the decision, to conn.serveFD, a goroutine with a net.Conn (conn.go), which
// acts on it, answering PostgreSQL's requests and deciding again on what follows
// (readPreamble). Every label value of the connection metrics is in outcome.go.
//
//	p := proxy.New(proxy.Options{Metrics: metrics.New(), Logger: slog.Default()})
//	if err := p.Apply(snap); err != nil { ... } // binds new ports, swaps the table, closes old ports
//	...
//	p.Shutdown(ctx) // stop accepting, drain open connections until ctx ends
//
// Lifecycle of Apply, in order: (1) every port of the new snapshot that is not bound yet is
// bound; if one fails, the ports bound by this call are closed again and the error is
// returned: the previous snapshot keeps serving untouched. (2) The new snapshot is swapped in
// with one atomic store; every connection accepted from then on routes with it. (3) Ports
// that the new snapshot no longer has stop accepting. Established connections never look at
// a snapshot again after they were routed, so they keep flowing to their backend whatever
// the new snapshot says.
//
// A live upgrade (handover.go, handover_pairs.go) passes the listening sockets to the
// process that replaces this one (ListenerFDs, Inherit, StopAccepting) and then its relayed
// connections (DetachPairs, Resume).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/accesslog"
	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/httpproxy"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/relay"
	"github.com/snigate/snigate/internal/snapshot"
)

// Options tunes the data plane. Zero values take the defaults in the comments.
type Options struct {
	// HelloTimeout bounds the time from accept until the ClientHello is complete (10 s).
	HelloTimeout time.Duration
	// HelloMaxBytes caps the bytes read while waiting for the ClientHello (64 KiB).
	HelloMaxBytes int
	// DialTimeout bounds one connect to a backend endpoint (5 s).
	DialTimeout time.Duration
	// IdleTimeout closes a proxied connection after this long without bytes in either
	// direction. 0 (the default) disables it: database sessions stay idle for hours. The
	// relay checks it four times per timeout (package relay), so a connection ends between
	// 1 and 1.25 timeouts after its last byte.
	IdleTimeout time.Duration
	// KeepAlive is the TCP keepalive idle time on both sides (30 s); negative disables it.
	KeepAlive time.Duration
	// EjectAfter consecutive dial failures take an endpoint out of rotation for EjectFor
	// (3 failures, 10 s).
	EjectAfter int
	EjectFor   time.Duration
	// AccessLog, when set, gets one line per connection; HTTP requests get one line each
	// through Logger.
	AccessLog *accesslog.Logger
	// HTTPReadHeaderTimeout bounds the time to read an HTTP request's headers (10 s): slow
	// clients cannot hold connections open by trickling headers.
	HTTPReadHeaderTimeout time.Duration
	// HTTPIdleTimeout closes kept-alive HTTP connections idle this long (2 min).
	HTTPIdleTimeout time.Duration
	// IOURing has the relay's loops wait on io_uring where the kernel allows it, epoll
	// otherwise (relay.WithIOURing); the log says which at the first listener.
	IOURing bool
	// AccessClients is how many clients the AccessPolicies' per-client limits track at
	// most, over all policies (access.DefaultClients when 0): a flood from more addresses
	// evicts the least recently seen that hold no connection (docs/access.md).
	AccessClients int
	// Spin is how long a relay loop that has just worked asks again without waiting before
	// it sleeps, when such spins have been paying (relay.WithSpin): 0 is the relay's default
	// (10 µs), negative never spins.
	Spin time.Duration

	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

func (o *Options) setDefaults() {
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 10 * time.Second
	}
	if o.HelloMaxBytes <= 0 {
		o.HelloMaxBytes = 64 << 10
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = 30 * time.Second
	}
	if o.EjectAfter <= 0 {
		o.EjectAfter = 3
	}
	if o.EjectFor <= 0 {
		o.EjectFor = 10 * time.Second
	}
	if o.HTTPReadHeaderTimeout <= 0 {
		o.HTTPReadHeaderTimeout = 10 * time.Second
	}
	if o.HTTPIdleTimeout <= 0 {
		o.HTTPIdleTimeout = 2 * time.Minute
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Proxy is the data plane. Its methods are safe for concurrent use.
type Proxy struct {
	opts Options
	log  *slog.Logger
	m    *metrics.Metrics
	snap atomic.Pointer[snapshot.Snapshot]
	// applying is the snapshot an Apply is storing, set while it opens its listeners: an
	// inherited listening socket (a live upgrade) has connections queued already, and a
	// loop may accept one before snap holds the port (port).
	applying atomic.Pointer[snapshot.Snapshot]
	// hintAt is when the last speaks-first hint was logged (reject.go), in Unix nanoseconds.
	hintAt atomic.Int64
	health health
	// dialOK and dialErr are snigate_backend_dial_seconds' two children, resolved once.
	dialOK, dialErr prometheus.Observer
	// httpHandler serves the requests of every HTTP and HTTPS listener.
	httpHandler *httpproxy.Handler

	mu        sync.Mutex // guards listeners, closing, inherited, stoppedPorts; serialises Apply and Shutdown
	listeners map[string]*portListener
	closing   bool
	// inherited holds the listening sockets of the process this one replaced (Inherit),
	// by address, until a port takes its own.
	inherited map[string]int
	// stoppedPorts are the ports StopAccepting closed, whose HTTP servers Shutdown ends.
	stoppedPorts []*portListener
	// orphans keep the books of connections handed over (Resume) on ports the new
	// configuration does not have.
	orphans map[string]*portListener

	// relays moves the bytes of routed passthrough and TCP connections; started by the
	// first one (see relay).
	relayOnce sync.Once
	relays    *relay.Relay
	relayErr  error

	// ends caches the counters of finished connections by label set (endCounters).
	endMu sync.RWMutex
	ends  map[endKey]*endCounters
	// routeGauges caches each route's child of snigate_route_active_connections, rejects
	// snigate_rejected_connections_total's by reason and route.
	routeGauges map[string]prometheus.Gauge
	rejects     map[[2]string]prometheus.Counter
	// access counts the connections the AccessPolicies limit (package access).
	access *access.Limiter

	// conns counts open connections. Shutdown waits on it only once every listener is
	// closed: a closed relay.Listener makes no more Accepted calls, each of which Adds, and a
	// WaitGroup's Add must not race its Wait.
	conns     sync.WaitGroup
	connMu    sync.Mutex
	connSet   map[*conn]struct{}
	draining  atomic.Bool
	idleCheck time.Duration
}

// New returns a proxy serving nothing until the first Apply.
func New(opts Options) *Proxy {
	opts.setDefaults()
	p := &Proxy{
		opts:        opts,
		log:         opts.Logger,
		m:           opts.Metrics,
		listeners:   map[string]*portListener{},
		connSet:     map[*conn]struct{}{},
		ends:        map[endKey]*endCounters{},
		routeGauges: map[string]prometheus.Gauge{},
		rejects:     map[[2]string]prometheus.Counter{},
		access:      access.NewLimiter(opts.AccessClients),
	}
	p.m.AccessClients(p.access)
	p.health.init(opts.EjectAfter, opts.EjectFor)
	p.dialOK = p.m.DialSeconds.WithLabelValues("ok")
	p.dialErr = p.m.DialSeconds.WithLabelValues("error")
	p.httpHandler = httpproxy.New(httpproxy.Options{
		Snapshot:    p.snap.Load,
		DialTimeout: opts.DialTimeout,
		AccessLog:   opts.AccessLog != nil,
		Metrics:     opts.Metrics,
		Logger:      opts.Logger,
	})
	return p
}

// dialBackend connects to a backend the proxy talks to itself (terminated TLS, PostgreSQL's
// SSLRequest exchange, a forwarded cancel) on Go's poller, within the dial timeout.
// fdconn rather than net.Dialer: dials are a quarter of the proxy's CPU per connection,
// nearly all of it system calls. The dialer formats and parses the address and, after the
// connect, asks for SO_ERROR and both addresses; fdconn asks one getpeername (or none
// beyond what tells it the connect ended).
func (p *Proxy) dialBackend(ep netip.AddrPort) (*fdconn.Conn, error) {
	return fdconn.Dial(ep, p.opts.DialTimeout, func(fd int) error {
		return relay.SetBackendSockopts(fd, p.opts.KeepAlive)
	})
}

// Snapshot returns the snapshot being served, or nil before the first Apply.
func (p *Proxy) Snapshot() *snapshot.Snapshot { return p.snap.Load() }

// Addrs returns the bound addresses, for logs and tests.
func (p *Proxy) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.listeners))
	for a := range p.listeners {
		out = append(out, a)
	}
	return out
}

// Apply makes s the serving snapshot. On error nothing changed.
func (p *Proxy) Apply(s *snapshot.Snapshot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return errors.New("proxy is shutting down")
	}
	var opened []*portListener
	p.applying.Store(s)
	defer p.applying.Store(nil)
	for _, port := range s.Ports {
		if _, ok := p.listeners[port.Address]; ok {
			continue
		}
		pl, err := p.listen(port.Address)
		if err != nil {
			for _, o := range opened {
				o.ln.Close()
			}
			return &BindError{Address: port.Address, Listener: firstListenerName(port), Err: err}
		}
		opened = append(opened, pl)
	}
	for _, pl := range opened {
		p.listeners[pl.addr] = pl
	}
	p.snap.Store(s)
	for addr, pl := range p.listeners {
		if s.Port(addr) == nil {
			pl.ln.Close()
			go pl.shutdownHTTP(context.Background())
			delete(p.listeners, addr)
			p.log.Info("port closed", "address", addr)
		}
	}
	for _, pl := range opened {
		p.log.Info("port opened", "address", pl.addr)
	}
	return nil
}

// BindError says which listener's socket could not be bound.
type BindError struct {
	Address  string
	Listener string // "namespace/gateway/listener"
	Err      error
}

func (e *BindError) Error() string {
	return fmt.Sprintf("listener %s: cannot bind %s: %v", e.Listener, e.Address, e.Err)
}

func (e *BindError) Unwrap() error { return e.Err }

func firstListenerName(p *snapshot.Port) string {
	if p.TCP != nil {
		return p.TCP.Name
	}
	for _, e := range p.Listeners.Entries() {
		return e.Value.Name
	}
	return "?"
}

// Shutdown stops accepting on every port, then waits for open connections to finish until
// ctx is done, then closes the rest. It returns ctx.Err() when it had to cut connections.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	var stopping sync.WaitGroup
	for addr, pl := range p.listeners {
		pl.ln.Close()
		stopping.Go(func() { pl.shutdownHTTP(ctx) })
		delete(p.listeners, addr)
	}
	p.mu.Unlock()
	stopping.Go(func() { p.shutdownStopped(ctx) })
	stopping.Wait()
	p.draining.Store(true)

	done := make(chan struct{})
	go func() { p.conns.Wait(); close(done) }()
	defer func() {
		// Every connection has ended: the relay's loops have nothing left to run.
		if p.relays != nil {
			p.relays.Close()
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		p.connMu.Lock()
		for c := range p.connSet {
			c.closeAll()
		}
		p.connMu.Unlock()
		<-done
		return ctx.Err()
	}
}

// relay returns the proxy's relay, starting its event loops (one per usable CPU) the first
// time.
func (p *Proxy) relay() (*relay.Relay, error) {
	p.relayOnce.Do(func() {
		spin := relay.DefaultSpin
		if p.opts.Spin != 0 {
			spin = p.opts.Spin
		}
		p.relays, p.relayErr = relay.New(0, relay.WithIOURing(p.opts.IOURing), relay.WithSpin(spin))
		if p.relayErr != nil {
			return
		}
		wait, why := p.relays.Wait()
		attrs := []any{"wait", wait}
		if wait == "epoll" { // loops on io_uring batch their waits instead of spinning
			attrs = append(attrs, "spin", max(spin, 0).String())
		}
		if why != nil {
			p.log.Warn("the relay's wait: epoll, io_uring asked for and refused", append(attrs, "reason", why.Error())...)
		} else {
			p.log.Info("the relay's wait: "+wait, attrs...)
		}
	})
	return p.relays, p.relayErr
}

// portListener is one bound port. The relay's loops accept its connections (Accepted).
type portListener struct {
	p       *Proxy
	addr    string
	netAddr net.Addr
	fd      int // the listening socket, which ln owns
	ln      *relay.Listener
	active  atomic.Int64
	pg      pgTracker
	// activeGauge is this port's child of snigate_active_connections, resolved once here
	// rather than by a label lookup per connection.
	activeGauge prometheus.Gauge

	httpOnce sync.Once
	httpSrv  *httpServer
}

func (p *Proxy) listen(addr string) (*portListener, error) {
	rl, err := p.relay()
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{
		// TCP_NODELAY and keepalive are configured once on the listening socket, which
		// accepted sockets inherit on Linux, instead of setsockopt calls per connection.
		KeepAlive: -1,
		Control: func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = setListenerSockopts(int(fd), p.opts.KeepAlive) })
			if err != nil {
				return err
			}
			return serr
		},
	}
	var netAddr net.Addr
	fd := p.takeInherited(addr)
	if fd >= 0 {
		// The process this one replaced bound it, with the same options.
		if netAddr, err = sockName(fd); err != nil {
			unix.Close(fd)
			return nil, err
		}
	} else {
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			return nil, err
		}
		netAddr = ln.Addr()
		if fd, err = listenFD(ln.(*net.TCPListener)); err != nil {
			ln.Close()
			return nil, err
		}
	}
	pl := &portListener{p: p, addr: addr, netAddr: netAddr, fd: fd, activeGauge: p.m.Active.WithLabelValues(addr)}
	if pl.ln, err = rl.Listen(fd, pl); err != nil {
		return nil, err // Listen closed fd
	}
	return pl, nil
}

// port is addr's port in the serving snapshot or, for a port an Apply is opening right
// now, in the snapshot it is about to store. Without the second, a connection a new
// process accepted on an inherited socket before its first snapshot was stored was reset
// (TestUpgradeUnderLoad saw 1 or 2 in 1 500). Only a nil first lookup reads it. A port whose
// Apply then fails serves that connection with the refused snapshot's table: its routes
// passed translate; only binding another port failed.
func (p *Proxy) port(addr string) *snapshot.Port {
	if port := p.snap.Load().Port(addr); port != nil {
		return port
	}
	return p.applying.Load().Port(addr)
}

// Accepted is relay.Acceptor's: a loop accepted a connection on this port. Passthrough and
// TCP connections stay on that loop, which reads the ClientHello and routes (see router);
// the others are handed back to a goroutine with a net.Conn (conn.serveFD) by the router.
func (pl *portListener) Accepted(fd int, peer netip.AddrPort) (relay.Router, any, time.Time, bool) {
	p := pl.p
	port := p.port(pl.addr)
	if port == nil {
		closeReset(fd) // the port is going away
		return nil, nil, time.Time{}, false
	}
	n := pl.active.Add(1)
	if port.MaxConnections > 0 && n > int64(port.MaxConnections) {
		pl.active.Add(-1)
		p.rejected(rejection{addr: pl.addr, client: peer, reason: reasonLimit, start: time.Now()}) // before the close, as reject
		unix.Close(fd)
		return nil, nil, time.Time{}, false
	}
	p.conns.Add(1)
	c := p.newConn(pl, peer)
	c.fd = int32(fd)
	return router{}, c, c.start.Add(p.opts.HelloTimeout), true
}

// Failed is relay.Acceptor's: accepting failed for a reason that is not one client's (out
// of file descriptors); the relay pauses the port a little.
func (pl *portListener) Failed(err error) {
	pl.p.log.Warn("accept failed", "address", pl.addr, "error", err)
}
