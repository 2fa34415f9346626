package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/pgwire"
)

// phase is how far a connection got, so that a failure's message says what the server did
// not do.
type phase int

const (
	phaseDial       phase = iota
	phaseSSLRequest       // PostgreSQL: SSLRequest written, its one-byte answer awaited
	phaseGreeting         // MySQL: the server's greeting awaited, then our SSLRequest written
	phaseHandshake        // the TLS handshake
)

// session is one probe's connection.
type session struct {
	t      Target
	sni    string
	budget time.Duration // the probe's time limit, for messages
	conn   *recordingConn
}

// fetchChain connects, starts TLS the engine's way and returns the served chain. fail is set
// when no certificate was read; hsErr when one was but the handshake failed afterwards.
func fetchChain(ctx context.Context, t Target) (chain []*x509.Certificate, hsErr error, fail *Result) {
	s := &session{t: t, sni: t.SNI}
	if s.sni == "" {
		s.sni = t.Hostnames[0]
	}
	if dl, ok := ctx.Deadline(); ok {
		s.budget = time.Until(dl).Round(100 * time.Millisecond)
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", t.Address)
	if err != nil {
		return nil, nil, s.failed(ctx, phaseDial, err)
	}
	defer raw.Close()
	// Every read and write below is bounded by ctx: its deadline becomes the connection's,
	// and cancelling it moves the deadline into the past, which ends a blocked read at once.
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	s.conn = &recordingConn{Conn: raw}

	switch t.Start {
	case engine.PostgresSSLRequest:
		if fail := s.postgresSSLRequest(ctx); fail != nil {
			return nil, nil, fail
		}
	case engine.ServerFirst:
		if fail := s.mysqlSSLRequest(ctx); fail != nil {
			return nil, nil, fail
		}
	}
	return s.handshake(ctx)
}

// postgresSSLRequest does PostgreSQL's classic negotiation: SSLRequest, then exactly one byte.
func (s *session) postgresSSLRequest(ctx context.Context) *Result {
	if _, err := io.WriteString(s.conn, pgwire.SSLRequest); err != nil {
		return s.failed(ctx, phaseSSLRequest, err)
	}
	var b [1]byte
	if _, err := io.ReadFull(s.conn, b[:]); err != nil {
		return s.failed(ctx, phaseSSLRequest, err)
	}
	switch b[0] {
	case pgwire.SSLAccept:
		return nil
	case pgwire.SSLReject:
		return notTLS("%s refused TLS: it answered 'N' to PostgreSQL's SSLRequest; turn TLS on in the server (ssl = on, with ssl_cert_file and ssl_key_file)", s.t.Address)
	case recordAlert, recordHandshake:
		return notTLS("%s answered PostgreSQL's SSLRequest with a TLS record: it expects a TLS handshake at once, not PostgreSQL's negotiation; check the exposure's engine and backendRef port", s.t.Address)
	}
	return notTLS("%s answered %q to PostgreSQL's SSLRequest, neither 'S' nor 'N': it is not a PostgreSQL server; check the exposure's engine and backendRef port", s.t.Address, b[:])
}

// mysqlSSLRequest reads the server's greeting and asks for TLS, as MySQL and MariaDB clients
// do.
func (s *session) mysqlSSLRequest(ctx context.Context) *Result {
	// Buffered, so that the first read takes all the server sent at once: a server that is
	// not MySQL is then quoted in full, not by its first four bytes.
	br := bufio.NewReaderSize(s.conn, maxGreeting+4)
	g, err := readGreeting(br)
	if err == nil && br.Buffered() > 0 {
		// Bytes the TLS handshake would have to skip: a MySQL server sends nothing more
		// before the client answered.
		err = fmt.Errorf("%w: %d bytes follow the greeting before the client answered", errNotMySQL, br.Buffered())
	}
	if err != nil {
		var me *mysqlError
		switch {
		case errors.As(err, &me):
			// Too many connections, a host that is not allowed or blocked: the server
			// speaks MySQL but turns the probe away before any TLS.
			return unreachable("%s refused the connection before TLS: %v", s.t.Address, me)
		case errors.Is(err, errNotMySQL):
			detail := strings.TrimPrefix(err.Error(), errNotMySQL.Error()+": ")
			return notTLS("%s did not greet like a MySQL server (%s; its first bytes: %s): check the exposure's engine and backendRef port", s.t.Address, detail, quote(s.conn.first))
		}
		return s.failed(ctx, phaseGreeting, err)
	}
	if g.caps&clientSSL == 0 {
		return notTLS("%s (%s) offers no TLS: its greeting lacks CLIENT_SSL; give the server a certificate and key (ssl_cert and ssl_key)", s.t.Address, g.version)
	}
	if _, err := s.conn.Write(sslRequest(g)); err != nil {
		return s.failed(ctx, phaseGreeting, err)
	}
	return nil
}

// handshake runs the TLS handshake and returns what the server presented.
func (s *session) handshake(ctx context.Context) ([]*x509.Certificate, error, *Result) {
	s.conn.reset() // only what answers the ClientHello tells plaintext from TLS
	var chain []*x509.Certificate
	tc := tls.Client(s.conn, &tls.Config{
		ServerName: s.sni,
		// Verification is Judge's: a certificate that fails it must still be read, to say
		// what is wrong with it.
		InsecureSkipVerify: true,
		// Called as soon as the server's Certificate message was parsed, so the chain is
		// kept even when the handshake fails after it.
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = cs.PeerCertificates
			return nil
		},
	})
	err := tc.HandshakeContext(ctx)
	if err == nil {
		_ = tc.Close() // a close_notify alert, no application data
	}
	if len(chain) > 0 {
		return chain, err, nil
	}
	if err == nil {
		return nil, nil, unreachable("%s completed the TLS handshake without presenting a certificate", s.t.Address)
	}
	return nil, nil, s.failed(ctx, phaseHandshake, err)
}

// failed turns a connection error into the verdict and a message that says what to check.
func (s *session) failed(ctx context.Context, ph phase, err error) *Result {
	addr := s.t.Address
	if errors.Is(ctx.Err(), context.Canceled) {
		return unreachable("the probe of %s was cancelled: %v", addr, context.Cause(ctx))
	}
	closed := isClosed(err)
	if ph == phaseHandshake && len(s.conn.first) > 0 && !looksLikeTLS(s.conn.first) {
		if e, ok := engine.Greeting(s.conn.first); ok && e.SpeaksFirstFix != "" {
			// TLS may well be on: the server greeted before it read the ClientHello
			// (issue 53: "turn TLS on" named the wrong fix for NATS).
			name := string(e.Name)
			if e.Start == engine.ServerFirst {
				name = "MySQL or MariaDB" // one greeting for both
			}
			return notTLS("%s sent a %s greeting first (%s) instead of answering the TLS ClientHello: %s", addr, name, quote(s.conn.first), e.SpeaksFirstFix)
		}
		return notTLS("%s answered the TLS ClientHello in plaintext (%s): it does not speak TLS on this port; turn TLS on in the server, or point backendRef at its TLS port", addr, quote(s.conn.first))
	}
	if ctx.Err() != nil || isTimeout(err) {
		switch ph {
		case phaseDial:
			return unreachable("no connection to %s within %v: check that the database runs and that network policies let the gateway reach it", addr, s.budget)
		case phaseSSLRequest:
			return unreachable("%s accepted the connection but did not answer PostgreSQL's SSLRequest within %v: it is overloaded, or not a PostgreSQL server", addr, s.budget)
		case phaseGreeting:
			return unreachable("%s accepted the connection but sent no complete greeting within %v: MySQL and MariaDB servers speak first, so it is overloaded or not one of them", addr, s.budget)
		}
		// A plaintext Redis 7 lands here too: it reads a ClientHello as an inline command,
		// which it only parses up to a newline that the ClientHello's NUL bytes hide from
		// it, so it waits for more instead of answering (TestRealRedisPlaintext).
		return unreachable("%s accepted the connection but did not answer the TLS ClientHello within %v: it does not speak TLS on this port (a Redis without TLS waits like this), or it is overloaded or hung", addr, s.budget)
	}
	switch ph {
	case phaseDial:
		return unreachable("cannot connect to %s: %v; check that the database runs and that backendRef names the port it listens on", addr, cause(err))
	case phaseSSLRequest:
		if closed {
			return notTLS("%s closed the connection without answering PostgreSQL's SSLRequest: it is not a PostgreSQL server (a server that expects TLS at once does this: check the exposure's engine and backendRef port), or whatever sits in front of it has no backend", addr)
		}
	case phaseGreeting:
		if closed {
			return unreachable("%s closed the connection during its greeting (%v)", addr, cause(err))
		}
	case phaseHandshake:
		if closed && s.conn.n == 0 {
			return notTLS("%s closed the connection without answering the TLS ClientHello: it does not speak TLS on this port, or whatever sits in front of it has no backend", addr)
		}
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "remote error" {
			return unreachable("%s refused the TLS handshake before sending a certificate (%v): check that it serves a certificate for %q and speaks TLS 1.2 or 1.3", addr, oe.Err, s.sni)
		}
		return unreachable("the TLS handshake with %s failed before a certificate came: %v", addr, cause(err))
	}
	return unreachable("%s: %v", addr, cause(err))
}

func unreachable(format string, args ...any) *Result {
	return &Result{Reason: v1alpha1.ReasonUnreachable, Message: fmt.Sprintf(format, args...)}
}

func notTLS(format string, args ...any) *Result {
	return &Result{Reason: v1alpha1.ReasonNotTLS, Message: fmt.Sprintf(format, args...)}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// isClosed reports whether the peer closed or reset the connection. A server that closes with
// our unread bytes in its buffer makes the kernel send a reset, so both mean the same here.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// cause drops net.OpError's "read tcp a->b" prefix: the message names the address already.
func cause(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// sniffBytes is how much of a server's first answer is kept to tell plaintext from TLS and
// to quote it in a message.
const sniffBytes = 64

// recordingConn keeps the first bytes read since its last reset.
type recordingConn struct {
	net.Conn
	first []byte // at most sniffBytes
	n     int    // bytes read since the reset
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if room := sniffBytes - len(c.first); room > 0 && n > 0 {
		c.first = append(c.first, p[:min(n, room)]...)
	}
	c.n += n
	return n, err
}

func (c *recordingConn) reset() { c.first, c.n = c.first[:0], 0 }

// quote shows bytes a server sent, as a Go string literal: printable text reads as itself
// ("-ERR unknown command"), anything else is escaped, so a message never carries raw binary.
func quote(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	return fmt.Sprintf("%q", b)
}
