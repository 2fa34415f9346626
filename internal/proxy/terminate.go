package proxy

import (
	"cmp"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/snapshot"
)

// terminate completes the TLS handshake with the listener's certificate, replaying the
// ClientHello bytes already read, then forwards the plaintext.
func (c *conn) terminate(l *snapshot.Listener, r *snapshot.Route, hello []byte) {
	pc := &prefixConn{Conn: c.client, prefix: hello}
	tc := tls.Server(pc, l.TLS)
	c.backendMu.Lock()
	c.tlsConn = tc
	c.backendMu.Unlock()
	c.client.SetDeadline(c.start.Add(c.p.opts.HelloTimeout))
	if err := tc.Handshake(); err != nil {
		// crypto/tls has answered with an alert where the protocol calls for one: this
		// listener terminates TLS, so its handshake errors are the client's to read. (An SNI
		// with a trailing dot, which RFC 6066 forbids, ends here with decode_error: it is
		// routed, but Go's TLS server refuses it.)
		c.route = r.Name
		c.p.log.Debug("tls handshake failed", "sni", c.sni, "error", err)
		c.closeAndRecord(reasonHandshake)
		return
	}
	c.client.SetDeadline(time.Time{})
	c.releaseHello()
	reason := c.connectBackend(r, c.dialGo)
	if reason != "" {
		// The handshake is done: closing is all that is left. No application data was sent.
		tc.Close()
		c.p.rejectedCounter(reason, c.route).Inc()
		c.closeAndRecord(reason)
		return
	}
	if err := c.writeProxyHeader(c.backend, func() string { return tc.ConnectionState().NegotiatedProtocol }); err != nil {
		tc.Close()
		c.closeAndRecord(outcomeBackendWriteFailed)
		return
	}
	c.closeAndRecord(c.pipeTLS(tc, c.backend))
}

// endHalf ends a terminated connection's copy toward dst: a clean EOF is passed on as a
// half-close (a close_notify toward the client); an idle timeout or an error of either
// side ends both directions (endEarly), and *ended says why.
func (c *conn) endHalf(ended *outcome, dst interface{ CloseWrite() error }, res copyResult) {
	switch {
	case res.idle:
		c.endEarly(ended, outcomeIdle, false)
	case res.err != nil:
		c.endEarly(ended, outcomeOK, true)
	default:
		dst.CloseWrite()
	}
}

// endEarly ends both directions of a terminated connection for o (closeLocked; reset for a
// side's break, a clean close for the idle timeout, as the relay does), unless something
// ended them already: the first reason stands in *ended (guarded by backendMu). Closed by
// no endEarly, the sockets were closed by the drain's cut-off (closeAll).
func (c *conn) endEarly(ended *outcome, o outcome, reset bool) {
	c.backendMu.Lock()
	defer c.backendMu.Unlock()
	switch {
	case !c.closing:
		*ended = o
		c.closeLocked(reset)
	case *ended == "":
		*ended = outcomeShutdown
	}
}

// pipeTLS copies between a terminated TLS client and a plain backend, through pooled
// buffers (splice cannot help: the bytes must pass through crypto/tls), until both
// directions have ended; it returns the connection's outcome.
func (c *conn) pipeTLS(client *tls.Conn, backend *fdconn.Conn) outcome {
	c.touch()
	var ended outcome
	done := make(chan struct{})
	go func() {
		res := c.copyBuf(backend, client)
		c.in += res.n
		c.endHalf(&ended, backend, res)
		close(done)
	}()
	res := c.copyBuf(client, backend)
	c.out += res.n
	c.endHalf(&ended, client, res)
	<-done
	return cmp.Or(ended, outcomeOK)
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyResult is how one copy of copyBuf ended: at the source's EOF (no error), at an idle
// timeout, or on an error of either side.
type copyResult struct {
	n    int64
	idle bool
	err  error
}

// copyBuf copies src to dst through a pooled buffer until src's EOF or an error. With an
// idle timeout, reads carry a deadline that moves with activity in either direction.
func (c *conn) copyBuf(dst io.Writer, src interface {
	io.Reader
	SetReadDeadline(time.Time) error
}) (res copyResult) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	idle := c.p.opts.IdleTimeout
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := src.Read(buf)
		if err != nil && n == 0 && idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			if time.Since(time.Unix(0, c.lastActive.Load())) < idle {
				continue // the other direction was active
			}
			res.idle = true
			return res
		}
		if n > 0 && idle > 0 {
			c.touch()
		}
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			res.n += int64(w)
			if werr != nil {
				res.err = werr
				return res
			}
		}
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			return res
		}
	}
}

// prefixConn replays bytes already read from a connection before reading it further: it
// lets crypto/tls see the ClientHello the proxy consumed for routing.
type prefixConn struct {
	*fdconn.Conn
	prefix []byte
}

func (pc *prefixConn) Read(b []byte) (int, error) {
	if len(pc.prefix) > 0 {
		n := copy(b, pc.prefix)
		pc.prefix = pc.prefix[n:]
		return n, nil
	}
	return pc.Conn.Read(b)
}
