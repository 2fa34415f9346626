package proxy

import (
	"errors"
	"os"
	"time"

	"github.com/snigate/snigate/internal/pgwire"
	"github.com/snigate/snigate/internal/snapshot"
)

// pgPlaintextMessage is what a client that tried PostgreSQL without TLS reads.
const (
	pgPlaintextMessage = "this endpoint serves PostgreSQL only over TLS with a server name (SNI): connect with sslmode=require (or verify-full) and host=<database host name>"
	pgPlaintextHint    = "e.g. psql \"host=db.example.com sslmode=require\"; hostaddr= may give the address, but host= must be the name"
)

var pgPlaintextError = pgwire.ErrorResponse(pgwire.SQLStateInvalidAuthorization, pgPlaintextMessage, pgPlaintextHint)

// readPreamble settles what the connection is: it acts on first, the relay router's
// decision on already (the bytes read so far), or decides on already itself, and reads from
// the client for as long as decide asks for more, under the hello deadline, writing the
// answers to PostgreSQL's requests that decide asks for and deciding again on what follows.
// The deciding is all decide's; the reading, writing and the I/O outcomes (hello_timeout,
// client_closed) are this function's.
//
// It returns a final decision (never kindUndecided or kindPGNegotiate) and the bytes it
// applies to: the ClientHello and anything after it exactly as read, after any PostgreSQL
// requests (answered here and not forwarded), in c.helloBuf (nil for a TCP or HTTP port).
func (c *conn) readPreamble(port *snapshot.Port, first *decision, already []byte) (decision, []byte) {
	st := c.preambleState()
	var (
		d    decision
		more bool
	)
	if first != nil {
		d = *first
	} else {
		d, more = decide(port, already, &st)
	}
	final := !more && d.kind != kindPGNegotiate
	if final && len(already) == 0 {
		return d, nil // a TCP or HTTP port: nothing to hold
	}
	// The bytes go to the pooled buffer even when they are final: already is the relay's
	// copy, and the buffer returns to the pool once its bytes were handed on (releaseHello),
	// where a terminated connection would keep already alive as long as it lasts.
	if len(already) <= 4096 {
		c.helloBuf = helloBufs.Get().(*[]byte)
	} else {
		b := make([]byte, len(already))
		c.helloBuf = &b
	}
	buf := *c.helloBuf
	n := copy(buf, already)
	if final {
		return d, buf[:n] // decided without reading: no deadline
	}
	c.client.SetReadDeadline(c.start.Add(c.p.opts.HelloTimeout))
	defer c.client.SetReadDeadline(time.Time{})
	var rerr error
	for {
		if !more {
			if d.kind != kindPGNegotiate {
				return d, buf[:n]
			}
			if d.skip > 0 {
				// The PROXY header went with the request: decide on from after both, with
				// the header's address as the client's.
				c.acceptProxy(&d)
				st.proxyDone, st.client = true, c.peer.Addr()
			}
			if _, err := c.client.Write(d.reply); err != nil {
				d.reject(reasonClientGone)
				return d, buf[:n]
			}
			n = copy(buf, buf[d.consumed:n])
			st.phase = d.next
		} else {
			if rerr != nil {
				// Bytes that came with the error were decided on first.
				reason := reasonClientGone
				if errors.Is(rerr, os.ErrDeadlineExceeded) {
					reason = reasonTimeout
				}
				d.reject(reason)
				return d, buf[:n]
			}
			if n == len(buf) {
				// decide rejects an undecided preamble of maxBytes, so the buffer grows at
				// most to that.
				nb := make([]byte, min(2*len(buf), st.maxBytes))
				copy(nb, buf[:n])
				buf = nb
			}
			var k int
			k, rerr = c.client.Read(buf[n:])
			n += k
		}
		d, more = decide(port, buf[:n], &st)
	}
}

// preambleState is the state decide starts a connection's preamble with.
func (c *conn) preambleState() preambleState {
	return preambleState{maxBytes: c.p.opts.HelloMaxBytes, peer: c.tcpPeer(), client: c.peer.Addr(), at: c.start, access: c.p.access}
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
	client := c.peer.Addr() // the PROXY header's, through a trusted balancer
	eps := c.pl.pgEndpoints(client)
	if len(eps) == 0 {
		c.reject(reasonPGCancelDrop, "")
		return
	}
	for _, ep := range eps {
		nc, err := c.p.dialBackend(ep)
		if err != nil {
			c.p.log.Warn("postgres cancel: backend unreachable", "endpoint", ep.String(), "error", err)
			continue
		}
		nc.Write(packet)
		nc.Close()
	}
	c.client.Close()
	c.p.m.Connections.WithLabelValues(c.pl.addr, "", "", string(c.negotiation), string(outcomePGCancelForwarded)).Inc()
	if al := c.p.opts.AccessLog; al != nil {
		e := al.Begin("connection").AddrPort("client", c.peer).Str("address", c.pl.addr).
			Str("negotiation", string(c.negotiation)).Str("outcome", string(outcomePGCancelForwarded)).
			Int("endpoints", int64(len(eps))).Dur("duration", time.Since(c.start))
		c.endLine(e)
	}
}
