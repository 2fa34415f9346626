package e2e

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snigate/snigate/internal/testutil"
)

// Route host names of the two PostgreSQL servers; each server's certificate has its name as
// SAN.
const (
	dbPGA = "pg-a.db.test"
	dbPGB = "pg-b.db.test"
)

// cancelBound is how fast a cancel must stop a query through the gateway: psql's Ctrl-C
// must feel as immediate as without a gateway.
const cancelBound = 2 * time.Second

// dbPG is two real PostgreSQL servers behind one snigate TLS Passthrough port, one
// TLSRoute per host name.
type dbPG struct {
	ca   *testutil.CA
	a, b *testutil.Postgres
	port int
	g    *gateway
}

func (e *dbPG) servers() []*testutil.Postgres { return []*testutil.Postgres{e.a, e.b} }

// requireConn is a libpq connection string for pg through the gateway with sslmode=require
// and no root certificate (HOME is private, so there is no ~/.postgresql/root.crt either):
// TLS without verification, the common production setting.
func (e *dbPG) requireConn(pg *testutil.Postgres, extra ...string) string {
	s := fmt.Sprintf("host=%s hostaddr=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=require connect_timeout=10",
		pg.Name, e.port, pg.User, pg.Password, pg.Database)
	return strings.Join(append([]string{s}, extra...), " ")
}

// noHostConn is a libpq connection string with only hostaddr: libpq sends no SNI.
func (e *dbPG) noHostConn(sslmode string) string {
	return fmt.Sprintf("hostaddr=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=%s connect_timeout=10",
		e.port, testutil.PGUser, testutil.PGPassword, testutil.PGDatabase, sslmode)
}

// pgx connects with pgx through the gateway (the host name resolves to 127.0.0.1, stays the
// SNI and is verified against the CA), cancelling with a real CancelRequest. source, when
// not empty, is the client's source address. The connection is closed in t.Cleanup.
func (e *dbPG) pgx(t *testing.T, pg *testutil.Postgres, source string, extra ...string) *pgx.Conn {
	t.Helper()
	cfg := testutil.PgxConfig(t, pg.ConnString("127.0.0.1", e.port, extra...), "127.0.0.1")
	if source != "" {
		d := &net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
		cfg.DialFunc = d.DialContext
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgx to %s through the gateway (%v): %v", pg.Name, extra, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn.Close(ctx)
	})
	return conn
}

func TestDBPostgres(t *testing.T) {
	t.Parallel()
	needBinary(t)
	dbPsqlBin(t)
	e := &dbPG{ca: testutil.NewCA(t)}
	e.a = testutil.StartPostgres(t, testutil.PGOptions{CA: e.ca, Name: dbPGA})
	e.b = testutil.StartPostgres(t, testutil.PGOptions{CA: e.ca, Name: dbPGB})
	e.port = testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("postgres", e.port, "")),
		routeYAML("pg-a", "postgres", []string{dbPGA}, to("svc-pg-a")),
		routeYAML("pg-b", "postgres", []string{dbPGB}, to("svc-pg-b")),
		serviceYAML("svc-pg-a", e.a.Port),
		serviceYAML("svc-pg-b", e.b.Port),
	))
	e.g = startGateway(t, dir)

	// The subtests run in order on one gateway: counters are compared before and after.
	t.Run("psql", e.testPsql)
	t.Run("pgx", e.testPgx)
	t.Run("certificate serials", e.testSerials)
	t.Run("GSSENCRequest, then SSLRequest, then TLS", e.testGSSENC)
	t.Run("plaintext clients read the FATAL message", e.testPlaintext)
	t.Run("no SNI", e.testNoSNI)
	t.Run("cancel", e.testCancel)
	t.Run("metrics and access log show the negotiation", e.testNegotiationMetrics)
}

// psql 15 (libpq 15: SSLRequest, then a ClientHello with SNI = host) in require and
// verify-full, the certificate it saw, and SCRAM channel binding.
func (e *dbPG) testPsql(t *testing.T) {
	for _, pg := range e.servers() {
		t.Run(pg.Name, func(t *testing.T) {
			t.Run("sslmode=require", func(t *testing.T) {
				r := dbPsql(t, e.requireConn(pg), "SELECT name, ssl FROM instance, pg_stat_ssl WHERE pid = pg_backend_pid()")
				if r.err != nil || strings.TrimSpace(r.stdout) != pg.Name+"|t" {
					t.Fatalf("psql sslmode=require to %s: want %q\n%s", pg.Name, pg.Name+"|t", r)
				}
			})
			t.Run("sslmode=verify-full", func(t *testing.T) {
				r := dbPsql(t, pg.ConnString("127.0.0.1", e.port), "SELECT name, ssl FROM instance, pg_stat_ssl WHERE pid = pg_backend_pid()")
				if r.err != nil || strings.TrimSpace(r.stdout) != pg.Name+"|t" {
					t.Fatalf("psql verify-full to %s: want %q\n%s", pg.Name, pg.Name+"|t", r)
				}
			})
			// psql cannot print the certificate it saw, so a CRL asks its OpenSSL: a CRL
			// that revokes this server's serial must make verify-full fail, and the same
			// CRL revoking only the other server's serial must not.
			t.Run("the certificate psql saw has the server's serial", func(t *testing.T) {
				other := e.b
				if pg == e.b {
					other = e.a
				}
				ok := dbPsql(t, pg.ConnString("127.0.0.1", e.port, "sslcrl="+dbCRL(t, e.ca, other.Cert.Serial)), "SELECT name FROM instance")
				if ok.err != nil || strings.TrimSpace(ok.stdout) != pg.Name {
					t.Fatalf("psql verify-full with a CRL revoking %s's serial: want %s reached\n%s", other.Name, pg.Name, ok)
				}
				bad := dbPsql(t, pg.ConnString("127.0.0.1", e.port, "sslcrl="+dbCRL(t, e.ca, pg.Cert.Serial)), "SELECT name FROM instance")
				if bad.err == nil || !strings.Contains(bad.stderr, "certificate") {
					t.Fatalf("psql verify-full with a CRL revoking %s's serial %s: want a certificate verification failure\n%s", pg.Name, pg.Cert.SerialHex(), bad)
				}
				t.Logf("revoked serial: %s", strings.TrimSpace(bad.stderr))
			})
			// SCRAM-SHA-256-PLUS hashes the server certificate (tls-server-end-point): the
			// server checks that the client saw its own certificate.
			t.Run("channel_binding=require", func(t *testing.T) {
				r := dbPsql(t, pg.ConnString("127.0.0.1", e.port, "channel_binding=require"), "SELECT name FROM instance")
				if r.err != nil || strings.TrimSpace(r.stdout) != pg.Name {
					t.Fatalf("psql channel_binding=require to %s:\n%s", pg.Name, r)
				}
			})
		})
	}
	t.Run("sslmode=prefer with a routed host name uses TLS", func(t *testing.T) {
		r := dbPsql(t, e.requireConn(e.a, "sslmode=prefer"), "SELECT name, ssl FROM instance, pg_stat_ssl WHERE pid = pg_backend_pid()")
		if r.err != nil || strings.TrimSpace(r.stdout) != dbPGA+"|t" {
			t.Fatalf("psql sslmode=prefer host=%s:\n%s", dbPGA, r)
		}
	})
	// libpq's allow tries plaintext first and retries with TLS only when that attempt is
	// answered with an ErrorResponse: the gateway's answer makes it work.
	t.Run("sslmode=allow retries with TLS after the gateway's ErrorResponse", func(t *testing.T) {
		refused := e.g.rejected(t, "postgres_plaintext_refused")
		r := dbPsql(t, e.requireConn(e.b, "sslmode=allow"), "SELECT name, ssl FROM instance, pg_stat_ssl WHERE pid = pg_backend_pid()")
		if r.err != nil || strings.TrimSpace(r.stdout) != dbPGB+"|t" {
			t.Fatalf("psql sslmode=allow host=%s:\n%s", dbPGB, r)
		}
		e.g.waitRejected(t, "postgres_plaintext_refused", refused+1)
	})
}

// pgx in classic (SSLRequest) and direct (sslnegotiation=direct: ClientHello first with ALPN
// postgresql) modes, against PostgreSQL 15 which only knows the classic negotiation.
func (e *dbPG) testPgx(t *testing.T) {
	for _, mode := range []struct {
		name, negotiation string
		extra             []string
	}{
		{"classic", "postgres", nil},
		{"sslnegotiation=direct", "postgres-direct", []string{"sslnegotiation=direct"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			for _, pg := range e.servers() {
				t.Run(pg.Name, func(t *testing.T) {
					before := e.g.dbConns(t, "negotiation="+mode.negotiation, "outcome=ok")
					conn := e.pgx(t, pg, "", mode.extra...)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					var name string
					var ssl bool
					if err := conn.QueryRow(ctx, "SELECT name, ssl FROM instance, pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&name, &ssl); err != nil {
						t.Fatal(err)
					}
					if name != pg.Name || !ssl {
						t.Fatalf("reached %q (ssl %v), want %s over TLS", name, ssl, pg.Name)
					}
					tc, ok := conn.PgConn().Conn().(*tls.Conn)
					if !ok {
						t.Fatalf("pgx connection is a %T, want *tls.Conn", conn.PgConn().Conn())
					}
					st := tc.ConnectionState()
					if got := st.PeerCertificates[0].SerialNumber; got.Cmp(pg.Cert.Serial) != 0 {
						t.Fatalf("pgx saw certificate serial %X, want %s's %s", got, pg.Name, pg.Cert.SerialHex())
					}
					t.Logf("pgx %s: TLS %s, ALPN %q, serial %s", mode.name, tls.VersionName(st.Version), st.NegotiatedProtocol, pg.Cert.SerialHex())
					conn.Close(ctx)
					e.g.dbWaitConns(t, before+1, "negotiation="+mode.negotiation, "outcome=ok")
				})
			}
		})
	}
}

// The serial of the certificate a client gets through the gateway, by two more clients:
// testutil's SSLRequest + crypto/tls, and openssl s_client -starttls postgres.
func (e *dbPG) testSerials(t *testing.T) {
	for _, pg := range e.servers() {
		t.Run(pg.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cert, err := testutil.PeerCertPostgres(ctx, addr(e.port), pg.Name)
			if err != nil {
				t.Fatalf("PeerCertPostgres through the gateway: %v", err)
			}
			if cert.SerialNumber.Cmp(pg.Cert.Serial) != 0 {
				t.Fatalf("SSLRequest + TLS with SNI %s got serial %X, want %s", pg.Name, cert.SerialNumber, pg.Cert.SerialHex())
			}
			direct, err := testutil.PeerCertTLS(ctx, addr(e.port), pg.Name, "postgresql")
			if err != nil {
				t.Fatalf("PeerCertTLS (direct, ALPN postgresql) through the gateway: %v", err)
			}
			if direct.SerialNumber.Cmp(pg.Cert.Serial) != 0 {
				t.Fatalf("direct TLS with SNI %s got serial %X, want %s", pg.Name, direct.SerialNumber, pg.Cert.SerialHex())
			}
			out, code := sClient(t, e.port, "Verify return code", "-starttls", "postgres", "-servername", pg.Name,
				"-CAfile", e.ca.File, "-verify_hostname", pg.Name, "-verify_return_error")
			if !strings.Contains(out, "Verify return code: 0 (ok)") {
				t.Fatalf("s_client -starttls postgres did not verify %s (exit %d):\n%s", pg.Name, code, out)
			}
			if got := sClientPeerSerial(t, out); got.Cmp(pg.Cert.Serial) != 0 {
				t.Fatalf("s_client -starttls postgres saw serial %X, want %s", got, pg.Cert.SerialHex())
			}
		})
	}
}

// GSSENCRequest: the gateway answers 'N' itself (PostgreSQL 15 would answer 'G' even
// without Kerberos), then the SSLRequest on the same connection gets 'S', then a ClientHello
// with SNI reaches the named server, which asks for SCRAM inside TLS.
func (e *dbPG) testGSSENC(t *testing.T) {
	c := dbDialFrom(t, "127.0.0.1", e.port)
	c.SetDeadline(time.Now().Add(2 * ioTimeout))
	if _, err := c.Write(dbGSSENCRequest); err != nil {
		t.Fatal(err)
	}
	if b := dbReadByte(t, c); b != 'N' {
		t.Fatalf("GSSENCRequest answered %q, want 'N'", b)
	}
	if _, err := c.Write(dbSSLRequest); err != nil {
		t.Fatal(err)
	}
	if b := dbReadByte(t, c); b != 'S' {
		t.Fatalf("SSLRequest after GSSENCRequest answered %q, want 'S'", b)
	}
	c.SetDeadline(time.Now().Add(2 * ioTimeout))
	tc := tls.Client(c, e.ca.ClientConfig(dbPGB))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS after GSSENCRequest + SSLRequest: %v", err)
	}
	if got := tc.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(e.b.Cert.Serial) != 0 {
		t.Fatalf("serial %X, want %s's %s", got, dbPGB, e.b.Cert.SerialHex())
	}
	if _, err := tc.Write(dbStartupMessage(testutil.PGUser, testutil.PGDatabase)); err != nil {
		t.Fatal(err)
	}
	var hdr [9]byte
	if _, err := io.ReadFull(tc, hdr[:]); err != nil {
		t.Fatalf("reading the server's answer to StartupMessage: %v", err)
	}
	if hdr[0] != 'R' || binary.BigEndian.Uint32(hdr[5:]) != 10 {
		t.Fatalf("answer to StartupMessage % x, want AuthenticationSASL ('R', type 10)", hdr)
	}
	tc.Close()
}

// Plaintext startups (sslmode=disable, and sslmode=prefer falling back after a TLS attempt
// the gateway could not route) get an ErrorResponse the user reads.
func (e *dbPG) testPlaintext(t *testing.T) {
	for _, tc := range []struct {
		name, conn  string
		firstReject string // the reject reason of prefer's TLS attempt, if any
	}{
		{"sslmode=disable", e.requireConn(e.a, "sslmode=disable"), ""},
		{"sslmode=prefer without host name (no SNI)", e.noHostConn("prefer"), "no_sni"},
		{"sslmode=prefer with an unrouted host name", fmt.Sprintf("host=nope.db.test hostaddr=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=prefer connect_timeout=10",
			e.port, testutil.PGUser, testutil.PGPassword, testutil.PGDatabase), "unknown_sni"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused := e.g.rejected(t, "postgres_plaintext_refused")
			var first float64
			if tc.firstReject != "" {
				first = e.g.rejected(t, tc.firstReject)
			}
			r := dbPsql(t, tc.conn, "SELECT name FROM instance")
			if r.err == nil {
				t.Fatalf("psql %s succeeded through the gateway\n%s", tc.name, r)
			}
			msg := r.stderr
			if !strings.Contains(msg, "FATAL:") || !strings.Contains(msg, "TLS") || !strings.Contains(msg, "sslmode=require") {
				t.Fatalf("psql %s: want the gateway's FATAL message (TLS, sslmode=require)\n%s", tc.name, r)
			}
			t.Logf("psql %s printed:\n%s", tc.name, strings.TrimSpace(msg))
			e.g.waitRejected(t, "postgres_plaintext_refused", refused+1)
			if tc.firstReject != "" {
				e.g.waitRejected(t, tc.firstReject, first+1)
			}
		})
	}
}

// A client that sends no SNI gets nothing from any backend: psql with only hostaddr in
// sslmode=require fails, and a hand-made SSLRequest + ClientHello without SNI gets 'S' (the
// gateway's own answer) and then nothing but a close.
func (e *dbPG) testNoSNI(t *testing.T) {
	t.Run("psql with only hostaddr", func(t *testing.T) {
		before := e.g.dbConns(t, "negotiation=postgres", "outcome=no_sni")
		rej := e.g.rejected(t, "no_sni")
		conns := e.backendTCPConns(t)
		r := dbPsql(t, e.noHostConn("require"), "SELECT name FROM instance")
		if r.err == nil {
			t.Fatalf("psql without a host name succeeded through the gateway\n%s", r)
		}
		t.Logf("psql without SNI: %s", strings.TrimSpace(r.stderr))
		e.g.waitRejected(t, "no_sni", rej+1)
		e.g.dbWaitConns(t, before+1, "negotiation=postgres", "outcome=no_sni")
		if got := e.backendTCPConns(t); got != conns {
			t.Fatalf("the backends received %d TCP connections while psql without SNI ran, want none", got-conns)
		}
	})
	t.Run("SSLRequest and a ClientHello without SNI", func(t *testing.T) {
		rej := e.g.rejected(t, "no_sni")
		c := dbDialFrom(t, "127.0.0.1", e.port)
		c.SetDeadline(time.Now().Add(2 * ioTimeout))
		if _, err := c.Write(dbSSLRequest); err != nil {
			t.Fatal(err)
		}
		if b := dbReadByte(t, c); b != 'S' {
			t.Fatalf("SSLRequest answered %q, want 'S'", b)
		}
		dbTLSNoBytes(t, c, &tls.Config{InsecureSkipVerify: true})
		e.g.waitRejected(t, "no_sni", rej+1)
	})
}

// backendTCPConns counts the TCP connections both servers logged (log_connections=on logs
// every one, cancel requests included, before reading its first packet).
func (e *dbPG) backendTCPConns(t *testing.T) int {
	t.Helper()
	return dbCountFile(t, e.a.LogPath, "connection received: host=127.0.0.1") +
		dbCountFile(t, e.b.LogPath, "connection received: host=127.0.0.1")
}

// waitSleeping waits until the server runs `SELECT pg_sleep(30)` in an active backend and returns its
// pid.
func waitSleeping(t *testing.T, admin *pgx.Conn, wantPID uint32) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var pid int64
		err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active' AND ($1 = 0 OR pid = $1)", int64(wantPID)).Scan(&pid)
		if err == nil {
			return uint32(pid)
		}
		if !errors.Is(err, pgx.ErrNoRows) || ctx.Err() != nil {
			t.Fatalf("waiting for pg_sleep(30) to run: %v", err)
		}
		time.Sleep(pollEvery)
	}
}

// stillSleeping reports whether backend pid still runs the pg_sleep(30) query.
func stillSleeping(t *testing.T, admin *pgx.Conn, pid uint32) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = 'SELECT pg_sleep(30)' AND state = 'active'", int64(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// sleepAsync runs pg_sleep(30) on conn in the background; the result arrives on the channel.
// The query's context is cancelled in t.Cleanup, so nothing outlives the test.
func sleepAsync(t *testing.T, conn *pgx.Conn) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(30)")
		errc <- err
	}()
	t.Cleanup(cancel)
	return errc, cancel
}

// wantCancelled waits (bounded) for a query's result and checks it is 57014
// query_canceled, within bound of since.
func wantCancelled(t *testing.T, errc <-chan error, since time.Time, bound time.Duration, who string) {
	t.Helper()
	select {
	case err := <-errc:
		took := time.Since(since)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("%s: query ended with %v after %v, want SQLSTATE 57014 (canceled)", who, err, took)
		}
		if took > bound {
			t.Fatalf("%s: query cancelled after %v, want within %v", who, took, bound)
		}
		t.Logf("%s: cancelled after %v", who, took.Round(time.Millisecond))
	case <-time.After(45 * time.Second):
		t.Fatalf("%s: query still running 45 s later", who)
	}
}

func (e *dbPG) testCancel(t *testing.T) {
	admin := e.a.Admin(t)

	// psql 15 sends its CancelRequest on a new plaintext connection, without SNI: the
	// gateway forwards it to the backends this client address holds connections to.
	t.Run("psql SIGINT (plaintext CancelRequest)", func(t *testing.T) {
		fwd := e.g.dbConns(t, "negotiation=postgres-cancel", "outcome=postgres_cancel_forwarded")
		ctx, cancel := context.WithTimeout(context.Background(), dbCmdTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, dbPsqlBin(t), "-X", "-At", "-d", e.requireConn(e.a), "-c", "SELECT pg_sleep(30)")
		cmd.Env = append(testutil.CleanEnv(), "HOME="+t.TempDir())
		var stdout, stderr testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		pid := waitSleeping(t, admin, 0)
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(45 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("psql still running 45 s after SIGINT\nstderr:\n%s", stderr.String())
		}
		took := time.Since(start)
		if err == nil || !strings.Contains(stderr.String(), "canceling statement due to user request") {
			t.Fatalf("psql after SIGINT: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		if took > cancelBound {
			t.Fatalf("psql's query cancelled %v after SIGINT, want within %v", took, cancelBound)
		}
		t.Logf("psql cancelled after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
		if stillSleeping(t, admin, pid) {
			t.Fatalf("backend %d still runs pg_sleep after psql's cancel", pid)
		}
		e.g.dbWaitConns(t, fwd+1, "negotiation=postgres-cancel", "outcome=postgres_cancel_forwarded")
	})

	// pgx (testutil.PgxConfig) sends its CancelRequest after SSLRequest + TLS with SNI: routed
	// like any connection.
	for _, mode := range []struct {
		name, negotiation string
		extra             []string
	}{
		{"pgx context cancel", "postgres", nil},
		{"pgx context cancel, sslnegotiation=direct", "postgres-direct", []string{"sslnegotiation=direct"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			conn := e.pgx(t, e.a, "", mode.extra...)
			before := e.g.dbConns(t, "negotiation="+mode.negotiation, "outcome=ok")
			errc, cancel := sleepAsync(t, conn)
			waitSleeping(t, admin, conn.PgConn().PID())
			start := time.Now()
			cancel()
			wantCancelled(t, errc, start, cancelBound, mode.name)
			// The cancel connection was routed by SNI and counted like any other.
			e.g.dbWaitConns(t, before+1, "negotiation="+mode.negotiation, "outcome=ok")
		})
	}

	// A plaintext cancel from a client address that holds no connection through this port is
	// dropped: it reaches no server. The same packet from the session's own address then
	// cancels the query, which proves the pid and key were right.
	t.Run("cancel from an address without connections is dropped", func(t *testing.T) {
		conn := e.pgx(t, e.a, "")
		pid, key := conn.PgConn().PID(), conn.PgConn().SecretKey()
		if len(key) == 0 {
			t.Fatal("pgx knows no secret key for the session")
		}
		packet := dbCancelPacket(pid, key)
		errc, _ := sleepAsync(t, conn)
		waitSleeping(t, admin, pid)

		dropped := e.g.rejected(t, "postgres_cancel_dropped")
		droppedConns := e.g.dbConns(t, "negotiation=postgres-cancel", "outcome=postgres_cancel_dropped")
		conns := e.backendTCPConns(t)
		aConns := dbCountFile(t, e.a.LogPath, "connection received: host=127.0.0.1")
		if n := dbSendCancel(t, "127.0.0.2", e.port, packet); n != 0 {
			t.Fatalf("the gateway answered a cancel request with %d bytes", n)
		}
		e.g.waitRejected(t, "postgres_cancel_dropped", dropped+1)
		e.g.dbWaitConns(t, droppedConns+1, "negotiation=postgres-cancel", "outcome=postgres_cancel_dropped")
		time.Sleep(time.Second)
		if !stillSleeping(t, admin, pid) {
			t.Fatalf("the query of backend %d stopped after a cancel from 127.0.0.2, which holds no connection", pid)
		}
		select {
		case err := <-errc:
			t.Fatalf("the query ended after a cancel from 127.0.0.2: %v", err)
		default:
		}
		if got := e.backendTCPConns(t); got != conns {
			t.Fatalf("the backends received %d TCP connections after the dropped cancel, want none", got-conns)
		}
		e.g.waitLog(t, "with outcome postgres_cancel_dropped from 127.0.0.2", 1, func(rec map[string]any, _ string) bool {
			return dbLogField(rec, "outcome") == "postgres_cancel_dropped" && strings.HasPrefix(dbLogField(rec, "client"), "127.0.0.2:")
		})

		start := time.Now()
		if n := dbSendCancel(t, "127.0.0.1", e.port, packet); n != 0 {
			t.Fatalf("the gateway answered a cancel request with %d bytes", n)
		}
		wantCancelled(t, errc, start, cancelBound, "the same cancel from 127.0.0.1")
		// The log check above is not blind: a forwarded cancel shows up in pg-a's log.
		if got := dbCountFile(t, e.a.LogPath, "connection received: host=127.0.0.1"); got != aConns+1 {
			t.Fatalf("pg-a received %d TCP connections for the forwarded cancel, want 1", got-aConns)
		}
	})

	// Tenant isolation: 127.0.0.2 holds a connection to pg-b only. Its cancel for a pg-a
	// session goes to pg-b (which knows no such pid) and never to pg-a.
	t.Run("cancel from another tenant reaches only that tenant's server", func(t *testing.T) {
		other := e.pgx(t, e.b, "127.0.0.2")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var name string
		if err := other.QueryRow(ctx, "SELECT name FROM instance").Scan(&name); err != nil || name != dbPGB {
			t.Fatalf("tenant connection from 127.0.0.2: %q, %v", name, err)
		}
		conn := e.pgx(t, e.a, "")
		pid, key := conn.PgConn().PID(), conn.PgConn().SecretKey()
		errc, stop := sleepAsync(t, conn)
		waitSleeping(t, admin, pid)

		fwd := e.g.dbConns(t, "negotiation=postgres-cancel", "outcome=postgres_cancel_forwarded")
		aConns := dbCountFile(t, e.a.LogPath, "connection received: host=127.0.0.1")
		if n := dbSendCancel(t, "127.0.0.2", e.port, dbCancelPacket(pid, key)); n != 0 {
			t.Fatalf("the gateway answered a cancel request with %d bytes", n)
		}
		e.g.dbWaitConns(t, fwd+1, "negotiation=postgres-cancel", "outcome=postgres_cancel_forwarded")
		// pg-b got it and found no such backend.
		dbWaitFile(t, e.b.LogPath, fmt.Sprintf("PID %d in cancel request did not match any process", pid))
		time.Sleep(time.Second)
		if !stillSleeping(t, admin, pid) {
			t.Fatalf("pg-a's query stopped after a cancel from a client of pg-b only")
		}
		if got := dbCountFile(t, e.a.LogPath, "connection received: host=127.0.0.1"); got != aConns {
			t.Fatalf("pg-a received %d TCP connections after another tenant's cancel, want none", got-aConns)
		}
		start := time.Now()
		stop() // pgx's own cancel ends the query
		wantCancelled(t, errc, start, cancelBound, "pgx context cancel")
	})
}

// After the tests above, every PostgreSQL negotiation has its series in
// snigate_connections_total and its records in the access log.
func (e *dbPG) testNegotiationMetrics(t *testing.T) {
	for _, n := range []string{"postgres", "postgres-direct", "postgres-cancel", "postgres-plaintext"} {
		// A connection is counted when it ends, which may come after its client moved on.
		e.g.dbWaitConns(t, 1, "negotiation="+n)
		if c := e.g.countLog(dbMatchLog("negotiation", n)); c < 1 {
			t.Errorf("no access log record with negotiation %q", n)
		}
	}
	// Routed connections name their route and endpoint.
	for _, pg := range e.servers() {
		rec := e.g.waitLog(t, "routed to "+pg.Name, 1, dbMatchLog("negotiation", "postgres", "sni", pg.Name, "outcome", "ok"))
		if ep := dbLogField(rec, "endpoint"); ep != pg.Addr {
			t.Errorf("access log for sni %s: endpoint %q, want %s (%v)", pg.Name, ep, pg.Addr, rec)
		}
		t.Logf("access log: %v", rec)
	}
}
