// Package wire is the small protocol the benchmark's load generator and backends speak
// through a passthrough proxy. A passthrough proxy only reads the client's first TLS record
// (the ClientHello) and then copies bytes, so the harness sends a real ClientHello captured
// from crypto/tls and after it plain bytes shaped like a TLS exchange: the proxies do the
// same work as for a real handshake while the client and backends, which share CPU 0, spend
// no CPU on cryptography.
//
//	echo port:  C: ClientHello   S: Flight bytes   then S echoes every byte C sends
//	bulk port:  C: ClientHello, 8-byte big-endian N   S: N bytes, then waits for C's close
//	tiny port:  C: ClientHello   S: TinyFlightSize bytes   then S echoes every byte C sends
//
// A real TLS echo (crypto/tls) listens beside them so that the runner can prove, through
// every proxy, that the bytes really pass through untouched (the client sees the backend's
// certificate).
package wire

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

const (
	// FlightSize is what the echo backend answers a ClientHello with: about a TLS 1.3 server
	// flight with an ECDSA certificate (ServerHello, EncryptedExtensions, Certificate,
	// CertificateVerify, Finished).
	FlightSize = 2000
	// TinyFlightSize is the tiny port's answer: the smallest server flight, one record, for
	// the connection shape where setup and teardown are all there is.
	TinyFlightSize = 64
	// MsgSize is the size of the request and response after the flight, and of the latency
	// test's echo.
	MsgSize = 64
	// maxRecord caps a TLS record (2^14 plus the largest expansion allowed).
	maxRecord = 16384 + 2048
)

// Flight returns the echo backend's answer to a ClientHello: FlightSize bytes framed like a
// TLS 1.3 server flight (a ServerHello record, a ChangeCipherSpec record, then encrypted
// records). Proxies may check that a backend speaks TLS (snigate reads the first byte).
func Flight() []byte {
	b := make([]byte, FlightSize)
	put := func(at int, typ byte, n int) int {
		b[at], b[at+1], b[at+2] = typ, 3, 3
		binary.BigEndian.PutUint16(b[at+3:], uint16(n))
		return at + 5 + n
	}
	at := put(0, 0x16, 122) // ServerHello
	at = put(at, 0x14, 1)   // ChangeCipherSpec
	b[at-1] = 1
	put(at, 0x17, FlightSize-at-5) // the encrypted rest of the flight
	return b
}

// TinyFlight returns the tiny port's answer: TinyFlightSize bytes framed as one
// ServerHello record.
func TinyFlight() []byte {
	b := make([]byte, TinyFlightSize)
	b[0], b[1], b[2] = 0x16, 3, 3
	binary.BigEndian.PutUint16(b[3:], TinyFlightSize-5)
	return b
}

// ClientHello returns one real TLS ClientHello record for sni, as crypto/tls sends it (Go's
// defaults, including the X25519MLKEM768 key share that makes it about 1.8 KB).
func ClientHello(sni string) ([]byte, error) { return ClientHelloALPN(sni) }

// ClientHelloALPN is ClientHello offering the ALPN protocols alpn ("postgresql": a
// PostgreSQL client's direct TLS, which snigate bridges with the SSLRequest exchange).
func ClientHelloALPN(sni string, alpn ...string) ([]byte, error) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go func() {
		cl := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: alpn})
		cl.Handshake() // fails once s is closed; only its first write matters
	}()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	return ReadRecord(s, nil)
}

// ReadRecord reads one TLS record (header and body) into buf[:0] and returns it.
func ReadRecord(r io.Reader, buf []byte) ([]byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if h[0] != 0x16 {
		return nil, fmt.Errorf("not a TLS handshake record (first byte %#x)", h[0])
	}
	n := int(binary.BigEndian.Uint16(h[3:]))
	if n > maxRecord {
		return nil, fmt.Errorf("TLS record of %d bytes", n)
	}
	if cap(buf) < 5+n {
		buf = make([]byte, 5+n)
	}
	buf = buf[:5+n]
	copy(buf, h[:])
	if _, err := io.ReadFull(r, buf[5:]); err != nil {
		return nil, err
	}
	return buf, nil
}

// BulkRequest encodes the bulk port's request for n bytes.
func BulkRequest(n int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(n))
	return b
}

// ParseBulkRequest decodes BulkRequest.
func ParseBulkRequest(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// SetLinger0 makes Close send a RST instead of a FIN, so a load generator that opens
// thousands of connections a second leaves no socket in TIME_WAIT and does not run out of
// ephemeral ports.
func SetLinger0(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return errors.New("not a TCP connection")
	}
	return tc.SetLinger(0)
}

// NoKeepAlive is a Dialer/ListenConfig KeepAlive value that leaves TCP keepalive off: the
// harness' sockets live for milliseconds, and every setsockopt is CPU on CPU 0.
const NoKeepAlive = -1

// IsReset reports whether err is a connection reset or broken pipe: what a peer that closed
// with SO_LINGER 0 leaves behind, and no failure of the system under test.
func IsReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
