package testutil

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestPostgres starts two instances from one CA and talks to each directly with psql and
// pgx: this proves the harness that the gateway's end-to-end tests stand on.
func TestPostgres(t *testing.T) {
	t.Parallel()
	ca := NewCA(t)
	alpha := StartPostgres(t, PGOptions{CA: ca, Name: "alpha.db.test"})
	beta := StartPostgres(t, PGOptions{CA: ca, Name: "beta.db.test"})
	psql := Binary(t, "psql", alpha.BinDir)
	if alpha.Port == beta.Port || alpha.Cert.Serial.Cmp(beta.Cert.Serial) == 0 {
		t.Fatal("instances share a port or a serial")
	}

	for _, p := range []*Postgres{alpha, beta} {
		t.Run(p.Name, func(t *testing.T) {
			t.Run("psql verify-full", func(t *testing.T) {
				out, errOut, err := run(t, 20*time.Second, nil, psql, "-X", "-At", "-d", p.DirectConnString(),
					"-c", "SELECT name FROM instance", "-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
				if err != nil || out != p.Name+"\nt" {
					t.Fatalf("psql: %v %q %s", err, out, errOut)
				}
			})
			t.Run("psql channel_binding=require", func(t *testing.T) {
				out, errOut, err := run(t, 20*time.Second, nil, psql, "-X", "-At", "-d", p.DirectConnString("channel_binding=require"),
					"-c", "SELECT name FROM instance")
				if err != nil || out != p.Name {
					t.Fatalf("psql: %v %q %s", err, out, errOut)
				}
			})
			t.Run("psql refused without TLS", func(t *testing.T) {
				_, errOut, err := run(t, 20*time.Second, nil, psql, "-X", "-At", "-d", p.DirectConnString("sslmode=disable"), "-c", "SELECT 1")
				if err == nil || !strings.Contains(errOut, "no encryption") {
					t.Fatalf("sslmode=disable: %v %s", err, errOut)
				}
			})
			t.Run("psql without host name", func(t *testing.T) {
				// hostaddr alone: libpq sends no SNI. verify-full refuses before it connects;
				// require works against the server itself (a gateway cannot route it).
				cs := strings.Replace(p.DirectConnString(), "host="+p.Name+" ", "", 1)
				_, errOut, err := run(t, 20*time.Second, nil, psql, "-X", "-At", "-d", cs, "-c", "SELECT 1")
				if err == nil || !strings.Contains(errOut, "host name must be specified") {
					t.Fatalf("verify-full: %v %s", err, errOut)
				}
				out, errOut, err := run(t, 20*time.Second, nil, psql, "-X", "-At", "-d", cs+" sslmode=require", "-c", "SELECT name FROM instance")
				if err != nil || out != p.Name {
					t.Fatalf("require: %v %q %s", err, out, errOut)
				}
			})
			t.Run("served certificate", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				cert, err := PeerCertPostgres(ctx, p.Addr, p.Name)
				checkSerial(t, "PeerCertPostgres", cert, err, p.Cert)
				if got := opensslSerial(t, p.Addr, p.Name, "-starttls", "postgres"); got != p.Cert.SerialHex() {
					t.Fatalf("openssl s_client -starttls postgres: serial %s, want %s", got, p.Cert.SerialHex())
				}
			})
			t.Run("pgx", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				conn, err := pgx.ConnectConfig(ctx, PgxConfig(t, p.DirectConnString("channel_binding=require"), "127.0.0.1"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(context.Background())
				var name string
				if err := conn.QueryRow(ctx, "SELECT name FROM instance").Scan(&name); err != nil || name != p.Name {
					t.Fatalf("name %q, %v", name, err)
				}
				tc, ok := conn.PgConn().Conn().(*tls.Conn)
				if !ok {
					t.Fatalf("pgx connection is %T, not TLS", conn.PgConn().Conn())
				}
				st := tc.ConnectionState()
				checkSerial(t, "pgx", st.PeerCertificates[0], nil, p.Cert)
				if st.ServerName != p.Name {
					t.Fatalf("SNI %q", st.ServerName)
				}

				// A query cancelled by context: pgx sends its CancelRequest over a new TLS
				// connection (SSLRequest first), and the server cancels within a moment.
				qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer qcancel()
				start := time.Now()
				_, err = conn.Exec(qctx, "SELECT pg_sleep(30)")
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "57014" || time.Since(start) > 5*time.Second {
					t.Fatalf("cancel: %v after %v", err, time.Since(start))
				}
			})
			t.Run("pgx direct TLS", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cfg := PgxConfig(t, p.DirectConnString("sslmode=require", "sslnegotiation=direct"), "127.0.0.1")
				conn, err := pgx.ConnectConfig(ctx, cfg)
				if p.Version < 17 {
					// A server ≤ 16 knows no direct TLS: it reads the ClientHello as a startup
					// packet. This is what the gateway's SSLRequest toward the backend fixes.
					if err == nil {
						conn.Close(ctx)
						t.Fatalf("PostgreSQL %d accepted a direct TLS connection", p.Version)
					}
					t.Logf("PostgreSQL %d refuses direct TLS, as expected: %v", p.Version, err)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				st := conn.PgConn().Conn().(*tls.Conn).ConnectionState()
				checkSerial(t, "pgx direct", st.PeerCertificates[0], nil, p.Cert)
				if st.NegotiatedProtocol != "postgresql" {
					t.Fatalf("ALPN %q", st.NegotiatedProtocol)
				}
			})
		})
	}
}

// TestPostgresPsqlCancel: psql cancels a running query on SIGINT (with PostgreSQL 15's libpq,
// on a new plaintext connection; see internal/pgwire's wire tests).
func TestPostgresPsqlCancel(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t, PGOptions{Name: "cancel.db.test"})
	psql := Binary(t, "psql", p.BinDir)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := command(nil, "", psql, "-X", "-At", "-d", p.DirectConnString(), "-c", "SELECT pg_sleep(30)")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait until the query runs, then interrupt psql.
	admin := p.Admin(t)
	for {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("query never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := cmd.Process.Signal(interruptSignal); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(stderr.String(), "canceling statement due to user request") {
			t.Fatalf("psql: %v %s", err, stderr.String())
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("cancel took %v", d)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("psql did not cancel within 10 s")
	}
}

// An instance in a network namespace listens on the namespace's address only and takes TLS
// from the host across the veth pair, while Admin still uses the unix socket.
func TestPostgresInNetns(t *testing.T) {
	h := NetnsHost(t, "pgtest")
	p := StartPostgres(t, PGOptions{Name: "netns.db.test", Netns: h})
	if want := h.IP.String() + ":"; !strings.HasPrefix(p.Addr, want) {
		t.Fatalf("Addr %s, want on %s", p.Addr, h.IP)
	}
	psql := Binary(t, "psql", p.BinDir)
	out, errOut, err := run(t, 20*time.Second, nil, psql, "-X", "-At", "-d", p.DirectConnString(), "-c", "SELECT name FROM instance")
	if err != nil || out != p.Name {
		t.Fatalf("psql from the host: %v %q %s", err, out, errOut)
	}
	var addr string
	if err := p.Admin(t).QueryRow(context.Background(), "SELECT current_setting('listen_addresses')").Scan(&addr); err != nil || addr != h.IP.String() {
		t.Fatalf("listen_addresses %q (%v), want %s", addr, err, h.IP)
	}
}
