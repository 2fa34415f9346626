package proxy

import (
	"errors"
	"os"
	"time"

	"github.com/snigate/snigate/internal/clienthello"
	"github.com/snigate/snigate/internal/pgwire"
)

// Reject reasons specific to PostgreSQL's negotiation.
const (
	reasonPGPlaintext   = "postgres_plaintext_refused"
	reasonPGSmuggled    = "postgres_bytes_after_sslrequest"
	reasonPGBadPacket   = "postgres_bad_packet"
	reasonPGCancelDrop  = "postgres_cancel_dropped"
	reasonPGCancelRelay = "postgres_cancel_forwarded"
)

// pgPlaintextMessage is what a client that tried PostgreSQL without TLS reads.
const (
	pgPlaintextMessage = "this endpoint serves PostgreSQL only over TLS with a server name (SNI): connect with sslmode=require (or verify-full) and host=<database host name>"
	pgPlaintextHint    = "e.g. psql \"host=db.example.com sslmode=require\"; hostaddr= may give the address, but host= must be the name"
)

var pgPlaintextError = pgwire.ErrorResponse(pgwire.SQLStateInvalidAuthorization, pgPlaintextMessage, pgPlaintextHint)

// preamble is what readPreamble found before any backend is chosen.
type preamble struct {
	// buf holds the ClientHello's bytes exactly as read (after any PostgreSQL requests,
	// which are answered here and not forwarded).
	buf   []byte
	hello clienthello.Hello
	// pgSSL is set when the client negotiated TLS the PostgreSQL way (SSLRequest, or direct
	// TLS with ALPN "postgresql"): the backend side must do the same.
	pgSSL bool
	// cancel is a plaintext PostgreSQL CancelRequest packet, when that is what came.
	cancel []byte
}

// readPreamble reads from the client until it holds a complete ClientHello, handling the
// PostgreSQL requests that may come first, under the hello deadline and size cap. The first
// n bytes of buf were read already. It returns a reject reason when the connection must be
// closed without a byte (or, for a plaintext PostgreSQL startup, after the error response
// was written).
func (c *conn) readPreamble(buf []byte, n int) (preamble, string) {
	var (
		pre    preamble
		parser clienthello.Parser
		// held: the first n bytes are decided on before reading more.
		held = n
		// pgPhase: 0 = PostgreSQL requests allowed, 1 = only TLS may follow (after an
		// SSLRequest was answered), 2 = the first bytes were TLS.
		pgPhase int
	)
	max := c.p.opts.HelloMaxBytes
	c.client.SetReadDeadline(c.start.Add(c.p.opts.HelloTimeout))
	defer c.client.SetReadDeadline(time.Time{})
	for {
		if n == len(buf) {
			if n >= max {
				pre.buf = buf[:n]
				return pre, reasonTooLarge
			}
			nb := make([]byte, min(2*len(buf), max))
			copy(nb, buf[:n])
			buf = nb
		}
		var (
			k   int
			err error
		)
		if held > 0 {
			k, held = held, 0
		} else {
			k, err = c.client.Read(buf[n:])
			n += k
		}
	decide:
		for k > 0 && n > 0 {
			pre.buf = buf[:n]
			if pgPhase == 0 && buf[0] != 0x16 {
				kind, size, perr := pgwire.Classify(buf[:n])
				if errors.Is(perr, pgwire.ErrIncomplete) {
					break decide
				}
				if perr != nil {
					if n >= 1 && buf[0] != 0 {
						return pre, reasonNotTLS
					}
					return pre, reasonPGBadPacket
				}
				switch kind {
				case pgwire.KindSSLRequest:
					c.negotiation = "postgres"
					if n > size {
						// Bytes sent ahead of the TLS handshake would reach the backend
						// as if they came from inside TLS (CVE-2021-23214 class).
						return pre, reasonPGSmuggled
					}
					if _, err := c.client.Write([]byte{'S'}); err != nil {
						return pre, reasonClientGone
					}
					pre.pgSSL = true
					pgPhase = 1
					n = 0
					break decide
				case pgwire.KindGSSENCRequest:
					// Refuse GSS encryption ourselves: the client goes on with an
					// SSLRequest on the same connection.
					if _, err := c.client.Write([]byte{'N'}); err != nil {
						return pre, reasonClientGone
					}
					n = copy(buf, buf[size:n])
					continue
				case pgwire.KindStartup:
					c.negotiation = "postgres-plaintext"
					c.client.Write(pgPlaintextError)
					return pre, reasonPGPlaintext
				case pgwire.KindCancelRequest:
					c.negotiation = "postgres-cancel"
					if n < size {
						break decide
					}
					if n > size {
						return pre, reasonPGBadPacket
					}
					pre.cancel = append([]byte(nil), buf[:n]...)
					return pre, ""
				}
			}
			if pgPhase == 0 {
				pgPhase = 2
			}
			perr := parser.Parse(buf[:n], &pre.hello)
			switch {
			case perr == nil:
				if pgPhase == 2 && pre.hello.HasALPN("postgresql") {
					c.negotiation = "postgres-direct"
					pre.pgSSL = true
				}
				return pre, ""
			case errors.Is(perr, clienthello.ErrIncomplete):
				break decide
			case errors.Is(perr, clienthello.ErrNotTLS):
				return pre, reasonNotTLS
			default:
				return pre, reasonMalformed
			}
		}
		if err != nil {
			pre.buf = buf[:n]
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return pre, reasonTimeout
			}
			return pre, reasonClientGone
		}
	}
}

// pgSSLExchange performs the classic PostgreSQL TLS negotiation toward the backend: send
// SSLRequest alone, read exactly one byte. Only after 'S' may the ClientHello follow: a
// PostgreSQL 15 that receives both in one write reads the ClientHello as plaintext and hangs.
func (c *conn) pgSSLExchange(bc interface {
	Write([]byte) (int, error)
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}) error {
	if _, err := bc.Write([]byte(pgwire.SSLRequest)); err != nil {
		return err
	}
	bc.SetReadDeadline(time.Now().Add(c.p.opts.DialTimeout))
	defer bc.SetReadDeadline(time.Time{})
	var b [1]byte
	if _, err := bc.Read(b[:]); err != nil {
		return err
	}
	if b[0] != 'S' {
		return errBackendNoTLS{b[0]}
	}
	return nil
}

type errBackendNoTLS struct{ answer byte }

func (e errBackendNoTLS) Error() string {
	return "backend answered " + quoteByte(e.answer) + " to SSLRequest instead of 'S': it runs with ssl=off; turn TLS on in the backend"
}

func quoteByte(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return "'" + string(rune(b)) + "'"
	}
	const hex = "0123456789abcdef"
	return "0x" + string([]byte{hex[b>>4], hex[b&15]})
}

// forwardCancel relays a plaintext PostgreSQL CancelRequest. It carries no SNI, so it goes
// only to the backend endpoints that the same client address holds PostgreSQL connections
// to through this port — never to every backend, which would hand one tenant's cancel key
// to other tenants' servers.
func (c *conn) forwardCancel(packet []byte) {
	c.releaseHello()
	client, _ := netipAddr(c.client.RemoteAddr())
	eps := c.pl.pgEndpoints(client)
	if len(eps) == 0 {
		c.p.reject(c.pl.addr, c.client, reasonPGCancelDrop, "", c.start, c.negotiation)
		return
	}
	for _, ep := range eps {
		nc, err := c.p.dialer.Dial("tcp", ep.String())
		if err != nil {
			c.p.log.Warn("postgres cancel: backend unreachable", "endpoint", ep.String(), "error", err)
			continue
		}
		nc.Write(packet)
		nc.Close()
	}
	c.client.Close()
	c.p.m.Connections.WithLabelValues(c.pl.addr, "", "", c.negotiation, reasonPGCancelRelay).Inc()
	if c.p.opts.AccessLog {
		c.p.log.Info("connection", "client", c.client.RemoteAddr().String(), "address", c.pl.addr,
			"negotiation", c.negotiation, "outcome", reasonPGCancelRelay, "endpoints", len(eps),
			"duration", time.Since(c.start))
	}
}
