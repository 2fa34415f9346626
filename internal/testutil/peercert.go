package testutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The PeerCert functions connect to addr, negotiate TLS the way a client of that protocol
// does, send serverName as SNI, and return the certificate the server presented, without
// verifying it: a test compares its serial with the one it issued, to prove which server it
// reached. They are bounded by ctx and by a 10 s deadline.

// PeerCertTLS does a plain TLS handshake (Redis, direct-TLS PostgreSQL when alpn is
// "postgresql", anything else). alpn may be empty.
func PeerCertTLS(ctx context.Context, addr, serverName string, alpn ...string) (*x509.Certificate, error) {
	conn, err := dialBounded(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return handshake(ctx, conn, serverName, alpn)
}

// PeerCertPostgres sends an SSLRequest, expects 'S', then does the TLS handshake: what libpq
// does with sslnegotiation=postgres.
func PeerCertPostgres(ctx context.Context, addr, serverName string) (*x509.Certificate, error) {
	conn, err := dialBounded(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("\x00\x00\x00\x08\x04\xd2\x16\x2f")); err != nil {
		return nil, err
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return nil, fmt.Errorf("reading SSLRequest answer: %w", err)
	}
	if b[0] != 'S' {
		return nil, fmt.Errorf("server answered %q to SSLRequest", b[0])
	}
	return handshake(ctx, conn, serverName, nil)
}

// MySQL capability flags used by PeerCertMySQL.
const (
	mysqlClientLongPassword     = 1 << 0
	mysqlClientProtocol41       = 1 << 9
	mysqlClientSSL              = 1 << 11
	mysqlClientSecureConnection = 1 << 15
	mysqlClientPluginAuth       = 1 << 19
)

// PeerCertMySQL reads the server's greeting, sends the SSL request packet, then does the TLS
// handshake: what MySQL and MariaDB clients do (the server speaks first).
func PeerCertMySQL(ctx context.Context, addr, serverName string) (*x509.Certificate, error) {
	conn, err := dialBounded(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return nil, fmt.Errorf("reading greeting: %w", err)
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	greeting := make([]byte, n)
	if _, err := io.ReadFull(conn, greeting); err != nil {
		return nil, fmt.Errorf("reading greeting: %w", err)
	}
	if len(greeting) == 0 || greeting[0] != 10 {
		return nil, fmt.Errorf("not a protocol 10 greeting: %q", greeting)
	}
	// version string NUL, connection id (4), scramble part 1 (8), filler (1), capabilities (2)
	i := 1
	for i < len(greeting) && greeting[i] != 0 {
		i++
	}
	i += 1 + 4 + 8 + 1
	if i+2 > len(greeting) {
		return nil, errors.New("short greeting")
	}
	if caps := binary.LittleEndian.Uint16(greeting[i:]); caps&mysqlClientSSL == 0 {
		return nil, errors.New("server does not offer TLS")
	}
	req := make([]byte, 4+32)
	req[0], req[3] = 32, hdr[3]+1 // length 32, next sequence id
	binary.LittleEndian.PutUint32(req[4:], mysqlClientLongPassword|mysqlClientProtocol41|mysqlClientSSL|mysqlClientSecureConnection|mysqlClientPluginAuth)
	binary.LittleEndian.PutUint32(req[8:], 1<<24) // max packet size
	req[12] = 45                                  // utf8mb4_general_ci
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	return handshake(ctx, conn, serverName, nil)
}

func dialBounded(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	return conn, nil
}

func handshake(ctx context.Context, conn net.Conn, serverName string, alpn []string) (*x509.Certificate, error) {
	tc := tls.Client(conn, &tls.Config{
		ServerName:         serverName,
		InsecureSkipVerify: true, // the caller checks the serial; the chain is not the point here
		NextProtos:         alpn,
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("server sent no certificate")
	}
	return certs[0], nil
}
