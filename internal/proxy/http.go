package proxy

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snigate/snigate/internal/httpproxy"
	"github.com/snigate/snigate/internal/snapshot"
)

// HTTP and HTTPS listeners hand their connections to one http.Server per bound port, fed
// through an in-memory net.Listener: accepting (on the relay's loops), connection limits,
// fail-closed rejects and drain stay those of every other connection, and the SNI
// dispatch happens before the server sees anything. For HTTPS the connection arrives as a *tls.Conn whose
// handshake is done (with ALPN h2 or http/1.1), so net/http fills Request.TLS and serves
// HTTP/2 through its TLSNextProto hook. The handler routes with the current snapshot on
// every request.

// httpServer is the HTTP server of one port.
type httpServer struct {
	srv *http.Server
	ln  *chanListener
}

func (p *Proxy) newHTTPServer(pl *portListener) *httpServer {
	ln := &chanListener{addr: pl.netAddr, conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{
		Handler:           p.httpHandler,
		ReadHeaderTimeout: p.opts.HTTPReadHeaderTimeout,
		IdleTimeout:       p.opts.HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ci := &httpproxy.ConnInfo{Addr: pl.addr}
			if tc, ok := c.(*tls.Conn); ok {
				ci.TLS = true
				var buf [snapshot.MaxHostnameLen]byte
				if sni, ok := snapshot.NormalizeSNI(buf[:], []byte(tc.ConnectionState().ServerName)); ok {
					ci.SNI = string(sni)
				}
			}
			return httpproxy.WithConnInfo(ctx, ci)
		},
	}
	hs := &httpServer{srv: srv, ln: ln}
	go srv.Serve(ln)
	return hs
}

// http returns the port's HTTP server, starting it on first use.
func (pl *portListener) http(p *Proxy) *httpServer {
	pl.httpOnce.Do(func() { pl.httpSrv = p.newHTTPServer(pl) })
	return pl.httpSrv
}

// shutdownHTTP stops the port's HTTP server gracefully, if it was started: idle connections
// close, requests in flight finish.
func (pl *portListener) shutdownHTTP(ctx context.Context) {
	pl.httpOnce.Do(func() {}) // no server is started after this
	if pl.httpSrv != nil {
		pl.httpSrv.srv.Shutdown(ctx)
	}
}

// serveHTTP gives a connection (a *tls.Conn after its handshake, or the plain TCP
// connection) to the port's HTTP server and waits until it is closed.
func (c *conn) serveHTTP(nc net.Conn, tc *trackedConn) {
	hs := c.pl.http(c.p)
	if hs == nil {
		c.closeAndRecord(outcomePortClosed)
		return
	}
	select {
	case hs.ln.conns <- nc:
	case <-hs.ln.done:
		c.closeAndRecord(outcomePortClosed)
		return
	}
	<-tc.closed
	c.in, c.out = tc.in.Load(), tc.out.Load()
	c.closeAndRecord(outcomeOK)
}

// servePlainHTTP serves a connection on an HTTP port.
func (c *conn) servePlainHTTP() {
	c.negotiation = negHTTP
	tc := newTrackedConn(c.client)
	c.serveHTTP(tc, tc)
}

// serveHTTPS terminates TLS with the HTTPS listener's configuration, replaying the
// ClientHello already read, and serves HTTP on the connection.
func (c *conn) serveHTTPS(l *snapshot.Listener, hello []byte) {
	c.negotiation = negHTTPS
	c.listener = l.Name
	var nc net.Conn = &prefixConn{Conn: c.client, prefix: hello}
	if c.via().IsValid() {
		// Through a trusted balancer: requests come from the client its PROXY header named
		// (the access log's client, X-Forwarded-For), not from the balancer.
		nc = remoteConn{Conn: nc, remote: net.TCPAddrFromAddrPort(c.peer)}
	}
	tcn := newTrackedConn(nc)
	tc := tls.Server(tcn, l.TLS)
	c.backendMu.Lock()
	c.tlsConn = tc
	c.backendMu.Unlock()
	c.client.SetDeadline(c.start.Add(c.p.opts.HelloTimeout))
	if err := tc.Handshake(); err != nil {
		c.p.log.Debug("tls handshake failed", "sni", c.sni, "error", err)
		c.closeAndRecord(reasonHandshake)
		return
	}
	c.client.SetDeadline(time.Time{})
	c.releaseHello()
	c.serveHTTP(tc, tcn)
}

// remoteConn is a connection whose peer is another address (a PROXY header's).
type remoteConn struct {
	net.Conn
	remote net.Addr
}

func (r remoteConn) RemoteAddr() net.Addr { return r.remote }

// trackedConn counts bytes and signals when it is closed.
type trackedConn struct {
	net.Conn
	in, out   atomic.Int64
	closeOnce sync.Once
	closed    chan struct{}
}

func newTrackedConn(c net.Conn) *trackedConn {
	return &trackedConn{Conn: c, closed: make(chan struct{})}
}

func (t *trackedConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	t.in.Add(int64(n))
	return n, err
}

func (t *trackedConn) Write(b []byte) (int, error) {
	n, err := t.Conn.Write(b)
	t.out.Add(int64(n))
	return n, err
}

func (t *trackedConn) Close() error {
	err := t.Conn.Close()
	t.closeOnce.Do(func() { close(t.closed) })
	return err
}

// prefixConn must be a net.Conn for trackedConn (it is, through *fdconn.Conn).
var _ net.Conn = (*prefixConn)(nil)

// chanListener is a net.Listener fed with the connections the proxy accepted and decided.
type chanListener struct {
	addr      net.Addr
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
