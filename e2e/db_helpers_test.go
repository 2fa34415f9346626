package e2e

// Helpers for the database end-to-end tests (db_*_test.go): real servers from
// internal/testutil behind the real snigate binary, driven by real clients.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// dbCmdTimeout bounds every database client process a test runs. The machine is small and
// shared: generous, except where a test measures a bound of its own.
const dbCmdTimeout = 60 * time.Second

// dbCmdResult is what a client process did.
type dbCmdResult struct {
	stdout, stderr string
	err            error // nil when it exited 0
	took           time.Duration
}

func (r dbCmdResult) String() string {
	return fmt.Sprintf("err=%v after %v\nstdout:\n%s\nstderr:\n%s", r.err, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// dbRun runs a client binary with a clean environment (no PG*/MYSQL*/REDISCLI* variables)
// and a private HOME (no ~/.postgresql/root.crt, ~/.psqlrc, ~/.my.cnf), bounded by
// dbCmdTimeout.
func dbRun(t *testing.T, bin string, args ...string) dbCmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbCmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(testutil.CleanEnv(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := dbCmdResult{stdout: stdout.String(), stderr: stderr.String(), err: err, took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after %v\n%s", filepath.Base(bin), strings.Join(args, " "), dbCmdTimeout, r)
	}
	return r
}

// dbPsqlBin is Debian's psql from the newest PostgreSQL folder (15 on Debian 12): the real
// binary, not the pg_wrapper script in /usr/bin.
func dbPsqlBin(t *testing.T) string {
	t.Helper()
	dir, err := testutil.PostgresBinDir()
	testutil.Require(t, "PostgreSQL client (psql)", err)
	return testutil.Binary(t, "psql", dir)
}

// dbPsql runs psql -X -At with connection string conn and the given SQL.
func dbPsql(t *testing.T, conn, sql string) dbCmdResult {
	t.Helper()
	return dbRun(t, dbPsqlBin(t), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", conn, "-c", sql)
}

// dbMetric returns the sum of the samples of metric name whose labels include every
// "key=value" pair (labels not named are summed over).
func (g *gateway) dbMetric(t *testing.T, name string, pairs ...string) float64 {
	t.Helper()
	code, body, err := g.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", code, err)
	}
	v, err := dbSumMetric(string(body), name, pairs...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func dbSumMetric(text, name string, pairs ...string) (float64, error) {
	var want []string
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return 0, fmt.Errorf("label pair %q is not key=value", p)
		}
		want = append(want, k+`="`+v+`"`)
	}
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		var labels, sample string
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			if labels, sample, ok = strings.Cut(rest, "} "); !ok {
				continue
			}
		} else if sample, ok = strings.CutPrefix(line, name+" "); !ok {
			continue // another metric (a sample without labels has none to match)
		}
		match := true
		for _, w := range want {
			if !hasLabel(labels, w) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f := strings.Fields(sample)
		if len(f) == 0 {
			return 0, fmt.Errorf("metric line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// dbConns is snigate_connections_total summed over the series with the given labels.
func (g *gateway) dbConns(t *testing.T, pairs ...string) float64 {
	t.Helper()
	return g.dbMetric(t, "snigate_connections_total", pairs...)
}

// dbWaitConns waits until dbConns(pairs) reaches want. Connections are counted when they
// end, which may come a moment after the client saw the close.
func (g *gateway) dbWaitConns(t *testing.T, want float64, pairs ...string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := g.dbConns(t, pairs...)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			_, body, _ := g.get("/metrics")
			t.Fatalf("snigate_connections_total%v = %v after %v, want >= %v\n%s",
				pairs, got, waitTimeout, want, grepLines(string(body), "snigate_connections_total{"))
		}
		time.Sleep(pollEvery)
	}
}

// dbLogField returns rec[key] as a string ("" when absent).
func dbLogField(rec map[string]any, key string) string {
	s, _ := rec[key].(string)
	return s
}

// dbMatchLog matches access-log records whose fields have the given values.
func dbMatchLog(kv ...string) func(map[string]any, string) bool {
	return func(rec map[string]any, _ string) bool {
		for i := 0; i+1 < len(kv); i += 2 {
			if dbLogField(rec, kv[i]) != kv[i+1] {
				return false
			}
		}
		return true
	}
}

// dbDialFrom connects to the gateway port from a given loopback source address (every
// 127/8 address is local on Linux), so that a test can play a second client host.
func dbDialFrom(t *testing.T, source string, port int) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	c, err := d.Dial("tcp", addr(port))
	if err != nil {
		t.Fatalf("connect to :%d from %s: %v", port, source, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// Fixed PostgreSQL packets (protocol 3.0).
var (
	dbSSLRequest    = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	dbGSSENCRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30}
)

// dbCancelPacket is a CancelRequest for pid and key: length, 80877102, pid, key.
func dbCancelPacket(pid uint32, key []byte) []byte {
	b := make([]byte, 12+len(key))
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)))
	binary.BigEndian.PutUint32(b[4:], 80877102)
	binary.BigEndian.PutUint32(b[8:], pid)
	copy(b[12:], key)
	return b
}

// dbStartupMessage is a protocol 3.0 StartupMessage for user and database.
func dbStartupMessage(user, database string) []byte {
	params := "user\x00" + user + "\x00database\x00" + database + "\x00\x00"
	b := make([]byte, 8, 8+len(params))
	binary.BigEndian.PutUint32(b[0:], uint32(8+len(params)))
	binary.BigEndian.PutUint32(b[4:], 3<<16)
	return append(b, params...)
}

// dbSendCancel sends a hand-made plaintext CancelRequest from source to the gateway, the way
// psql 15 does on Ctrl-C, and waits for the gateway to close the connection; it returns the
// bytes that came back (there must be none: a cancel gets no answer).
func dbSendCancel(t *testing.T, source string, port int, packet []byte) int64 {
	t.Helper()
	c := dbDialFrom(t, source, port)
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(packet); err != nil {
		t.Fatalf("write cancel request: %v", err)
	}
	n, closed, err := drain(c, ioTimeout)
	if !closed {
		t.Fatalf("gateway kept the cancel connection open %v (%v)", ioTimeout, err)
	}
	return n
}

// dbCRL writes a PEM CRL signed by ca that revokes serial, and returns its path. A client
// given it refuses exactly the server certificate with that serial: the differential test
// of "the certificate psql saw has this serial" when psql cannot print it.
func dbCRL(t *testing.T, ca *testutil.CA, serial *big.Int) string {
	t.Helper()
	now := time.Now()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:     big.NewInt(now.UnixNano()),
		ThisUpdate: now.Add(-time.Hour),
		NextUpdate: now.Add(24 * time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{
			{SerialNumber: serial, RevocationTime: now.Add(-time.Hour)},
		},
	}, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "revoked-"+serial.Text(16)+".crl")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// dbCountFile counts the lines of a file (a server's log) that contain substr.
func dbCountFile(t *testing.T, path, substr string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return bytes.Count(b, []byte(substr))
}

// dbWaitFile waits until the file contains substr.
func dbWaitFile(t *testing.T, path, substr string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for dbCountFile(t, path, substr) == 0 {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("no %q in %s within %v:\n%s", substr, path, waitTimeout, dbTail(b, 3000))
		}
		time.Sleep(pollEvery)
	}
}

func dbTail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// dbTLSNoBytes runs a crypto/tls handshake over an established conn and expects it to fail
// with the connection closed and nothing received.
func dbTLSNoBytes(t *testing.T, c net.Conn, cfg *tls.Config) {
	t.Helper()
	cc := &countingConn{Conn: c}
	c.SetDeadline(time.Now().Add(ioTimeout))
	herr := tls.Client(cc, cfg).Handshake()
	if herr == nil {
		t.Fatalf("handshake with SNI %q succeeded, want the connection closed", cfg.ServerName)
	}
	var ne net.Error
	if errors.As(herr, &ne) && ne.Timeout() {
		t.Fatalf("handshake timed out (%v): the gateway kept the connection open", herr)
	}
	n, closed, err := drain(c, ioTimeout)
	if !closed {
		t.Fatalf("connection still open after the failed handshake (%v)", err)
	}
	if total := cc.n + n; total != 0 {
		t.Fatalf("received %d bytes, want 0 (handshake error: %v)", total, herr)
	}
}

// dbReadByte reads exactly one byte, bounded by ioTimeout.
func dbReadByte(t *testing.T, c net.Conn) byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(ioTimeout))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read one byte: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	return b[0]
}
