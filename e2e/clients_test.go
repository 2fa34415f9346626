package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/echo"
	"github.com/snigate/snigate/internal/testutil"
)

const ioTimeout = 10 * time.Second // every read or write of a test connection

// startEcho runs an in-process echo backend named name on a free loopback port and returns
// the port. cert nil means plain TCP.
func startEcho(t *testing.T, name string, cert *testutil.Cert) int {
	t.Helper()
	ln := testutil.Listen(t)
	s := &echo.Server{Name: name}
	if cert != nil {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12}
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// session is a TLS connection through the gateway whose greeting has been read.
type session struct {
	t     *testing.T
	raw   *net.TCPConn
	tls   *tls.Conn
	br    *bufio.Reader
	hello echo.Hello
}

// dialTLS connects to the gateway port, completes the handshake with cfg and reads the
// backend's greeting; it fails the test on any error.
func dialTLS(t *testing.T, port int, cfg *tls.Config) *session {
	t.Helper()
	s, err := tryTLS(port, cfg)
	if err != nil {
		t.Fatalf("TLS to :%d with SNI %q: %v", port, cfg.ServerName, err)
	}
	s.t = t
	t.Cleanup(func() { s.raw.Close() })
	return s
}

// tryTLS is dialTLS returning its error; the caller closes the session.
func tryTLS(port int, cfg *tls.Config) (*session, error) {
	c, err := net.DialTimeout("tcp", addr(port), ioTimeout)
	if err != nil {
		return nil, err
	}
	return sessionOn(c, cfg)
}

// sessionOn completes the handshake on the connection c and reads the backend's greeting;
// it closes c on error.
func sessionOn(c net.Conn, cfg *tls.Config) (*session, error) {
	raw := c.(*net.TCPConn)
	raw.SetDeadline(time.Now().Add(ioTimeout))
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	br := bufio.NewReader(tc)
	line, err := br.ReadString('\n')
	if err != nil {
		raw.Close()
		return nil, errors.Join(errors.New("read greeting"), err)
	}
	h, err := echo.ParseGreeting(line)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return &session{raw: raw, tls: tc, br: br, hello: h}, nil
}

// peerSerial is the serial number of the certificate the server presented.
func (s *session) peerSerial() *big.Int {
	return s.tls.ConnectionState().PeerCertificates[0].SerialNumber
}

// roundTrip sends msg and expects it echoed back.
func (s *session) roundTrip(msg string) {
	s.t.Helper()
	s.raw.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(s.tls, msg); err != nil {
		s.t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s.br, got); err != nil {
		s.t.Fatalf("read echo of %d bytes: %v (got %q)", len(msg), err, got)
	}
	if string(got) != msg {
		s.t.Fatalf("echo = %q, want %q", got, msg)
	}
}

// finish half-closes (close_notify, then a TCP FIN) and expects EOF with nothing more.
func (s *session) finish() {
	s.t.Helper()
	s.raw.SetDeadline(time.Now().Add(ioTimeout))
	s.tls.CloseWrite()
	s.raw.CloseWrite()
	rest, err := io.ReadAll(s.br)
	if err != nil || len(rest) > 0 {
		s.t.Fatalf("after half-close: read %q, %v; want EOF and nothing", rest, err)
	}
}

// wantHello checks a greeting's backend name and SNI (case-insensitively: the backend sees
// the SNI as the client sent it).
func wantHello(t *testing.T, h echo.Hello, name, sni, tlsVersion string) {
	t.Helper()
	if h.Name != name || !strings.EqualFold(h.SNI, sni) || h.TLS != tlsVersion {
		t.Errorf("greeting %+v, want backend %s sni=%s tls=%s", h, name, sni, tlsVersion)
	}
}

// drain reads c until EOF, a reset or the timeout. closed is true for EOF and reset, which
// both count as the gateway closing the connection.
func drain(c net.Conn, timeout time.Duration) (n int64, closed bool, err error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	n, err = io.Copy(io.Discard, c)
	switch {
	case err == nil, errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return n, true, nil
	}
	return n, false, err
}

// expectRejectedRaw connects, sends payload (write errors ignored: a reset may come first),
// and expects the connection closed within timeout with zero bytes received. It returns the
// time from connect to close.
func expectRejectedRaw(t *testing.T, port int, payload []byte, timeout time.Duration) time.Duration {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr(port), ioTimeout)
	if err != nil {
		t.Fatalf("connect :%d: %v (rejection must accept, then close)", port, err)
	}
	defer c.Close()
	begin := time.Now()
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	c.Write(payload)
	n, closed, err := drain(c, timeout)
	if !closed {
		t.Fatalf("connection still open %v later (%v), want it closed", timeout, err)
	}
	if n != 0 {
		t.Fatalf("received %d bytes, want 0", n)
	}
	return time.Since(begin)
}

// expectRejectedTLS runs a real crypto/tls handshake with cfg and expects it to fail with the
// connection closed and zero bytes received.
func expectRejectedTLS(t *testing.T, port int, cfg *tls.Config) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr(port), ioTimeout)
	if err != nil {
		t.Fatalf("connect :%d: %v (rejection must accept, then close)", port, err)
	}
	defer c.Close()
	dbTLSNoBytes(t, c, cfg)
}

type countingConn struct {
	net.Conn
	n int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += int64(n)
	return n, err
}

// clientHello returns the bytes crypto/tls sends first with cfg: its ClientHello records.
func clientHello(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	rc := &recordingConn{}
	tls.Client(rc, cfg).Handshake() // fails at the first read, after the ClientHello is written
	if rc.buf.Len() < 5 || rc.buf.Bytes()[0] != 0x16 {
		t.Fatalf("recorded %d bytes, not a handshake record", rc.buf.Len())
	}
	return rc.buf.Bytes()
}

// recordingConn keeps what is written to it and reports EOF on read.
type recordingConn struct{ buf bytes.Buffer }

func (r *recordingConn) Write(p []byte) (int, error)      { return r.buf.Write(p) }
func (r *recordingConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (r *recordingConn) Close() error                     { return nil }
func (r *recordingConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (r *recordingConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (r *recordingConn) SetDeadline(time.Time) error      { return nil }
func (r *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (r *recordingConn) SetWriteDeadline(time.Time) error { return nil }

// openssl returns the path of the openssl binary, or stops the test through testutil.Require.
func openssl(t *testing.T) string {
	t.Helper()
	return testutil.Binary(t, "openssl", "/usr/bin")
}

// sClient runs `openssl s_client -connect 127.0.0.1:PORT args...` with its input held open
// until the output contains waitFor (or the process exits), then closes the input so
// s_client sends close_notify and quits. It returns stdout and the exit code.
func sClient(t *testing.T, port int, waitFor string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*ioTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl(t), append([]string{"s_client", "-connect", addr(port)}, args...)...)
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(ioTimeout)
	var werr error
	exited := false
	for !exited && (waitFor == "" || !strings.Contains(stdout.String(), waitFor)) {
		if time.Now().After(deadline) {
			if waitFor == "" {
				t.Errorf("openssl s_client still running after %v, want it to fail and exit", ioTimeout)
			} else {
				t.Errorf("openssl s_client: no %q in its output within %v", waitFor, ioTimeout)
			}
			break
		}
		select {
		case werr = <-done:
			exited = true
		case <-time.After(pollEvery):
		}
	}
	stdin.Close()
	if !exited {
		werr = <-done // bounded by ctx
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
	} else if werr != nil {
		t.Fatalf("openssl s_client: %v", werr)
	}
	if t.Failed() {
		t.Logf("openssl s_client %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	return stdout.String(), code
}

// sClientPeerSerial is the serial of the first certificate s_client printed.
func sClientPeerSerial(t *testing.T, out string) *big.Int {
	t.Helper()
	i := strings.Index(out, "-----BEGIN CERTIFICATE-----")
	if i < 0 {
		t.Fatalf("no server certificate in s_client output:\n%s", out)
	}
	b, _ := pem.Decode([]byte(out[i:]))
	if b == nil {
		t.Fatalf("bad certificate PEM in s_client output:\n%s", out)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

var handshakeRead = regexp.MustCompile(`SSL handshake has read (\d+) bytes`)

// sClientBytesRead is what s_client reports having read during the handshake.
func sClientBytesRead(t *testing.T, out string) int {
	t.Helper()
	m := handshakeRead.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in s_client output:\n%s", handshakeRead, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
