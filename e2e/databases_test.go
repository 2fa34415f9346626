package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// databasesAddr is the loopback address the DatabaseExposure test binds (its Gateway has the
// fixed ports 80 and 443, which no other test may share).
const databasesAddr = "127.0.0.45"

// DatabaseExposures from files, rendered and served by the real binary in front of two real
// PostgreSQL servers and a Redis: each database by both of its names with verify-full,
// pgx's direct TLS too, the serial the client sees equal to the database's own, no SNI
// closed with zero bytes on every engine port, *.<apex> on 443 (terminate) and on 5432
// (passthrough) each reaching only its own port's backend, plaintext clients refused with
// nothing reaching the database, and removing exposures: the other database keeps working
// (an open session survives), the last one takes its port away.
func TestDatabaseExposureStandalone(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (the TenantGateway binds ports 80 and 443)", errors.New("not root"))
	}
	dbPsqlBin(t)
	redisCLI := testutil.Binary(t, "redis-cli", "/usr/bin")
	ca := testutil.NewCA(t)
	wildcard := ca.Issue(t, "example.test", "*.example.test")
	// orders' server itself would take plaintext logins (pg_hba host): through snigate it
	// still gets TLS only.
	orders := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "orders.postgres.example.test",
		Cert: ca.Issue(t, "orders.postgres.example.test", "orders.example.test"), AcceptPlaintext: true})
	billing := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "billing.postgres.example.test",
		Cert: ca.Issue(t, "billing.postgres.example.test", "billing.example.test")})
	cache := testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: "cache.redis.example.test",
		Cert: ca.Issue(t, "cache.redis.example.test", "cache.example.test")})
	// MariaDB's client verifies the certificate against the address it dials: name it too.
	legacy := testutil.StartMariaDB(t, testutil.MariaDBOptions{CA: ca, Name: "legacy.mariadb.example.test",
		Cert: ca.Issue(t, "legacy.mariadb.example.test", databasesAddr)})
	// Backends whose certificates a client would refuse, for the certificate probe: one
	// lacking the external names, one serving plaintext, one expired.
	wrongNames := startEcho(t, "wrong", ca.Issue(t, "somewhere.else.test"))
	plaintext := startEcho(t, "plain", nil)
	expired := startEcho(t, "expired", ca.IssueValid(t, time.Now().Add(-72*time.Hour), time.Now().Add(-24*time.Hour),
		"expired.redis.example.test", "expired.example.test"))
	appPort := startHTTPEcho(t, "app")
	ports := testutil.FreePorts(t, 3)
	pgPort, redisPort, mariaPort := ports[0], ports[1], ports[2]

	exposure := func(name, engine string, port int) string {
		return fmt.Sprintf(`apiVersion: snigate.dev/v1alpha1
kind: DatabaseExposure
metadata: {name: %s, namespace: acme}
spec:
  engine: %s
  backendRef: {name: %s, port: %d}
`, name, engine, name, port)
	}
	manifests := func(exposures ...string) string {
		return fixture.Docs(append([]string{`apiVersion: v1
kind: Namespace
metadata: {name: acme}
---
apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: acme, namespace: acme}
spec:
  apex: example.test
  certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: acme}
spec:
  parentRefs: [{name: acme}]
  hostnames: [app.example.test]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
`,
			fixture.ServiceYAML("acme", "app", 8080, appPort, "127.0.0.1"),
			fixture.ServiceYAML("acme", "orders", 5432, orders.Port, "127.0.0.1"),
			fixture.ServiceYAML("acme", "billing", 5432, billing.Port, "127.0.0.1"),
			fixture.ServiceYAML("acme", "cache", 6379, cache.Port, "127.0.0.1"),
			fixture.ServiceYAML("acme", "legacy", 3306, legacy.Port, "127.0.0.1"),
			fixture.ServiceYAML("acme", "wrongnames", 6379, wrongNames, "127.0.0.1"),
			fixture.ServiceYAML("acme", "plaintext", 6379, plaintext, "127.0.0.1"),
			fixture.ServiceYAML("acme", "expired", 6379, expired, "127.0.0.1"),
			fixture.TLSSecretYAML("acme", "wildcard", wildcard.Cert),
		}, exposures...)...)
	}
	all := []string{exposure("orders", "postgres", 5432), exposure("billing", "postgres", 5432), exposure("cache", "redis", 6379),
		exposure("legacy", "mariadb", 3306) + fmt.Sprintf("  port: %d\n", mariaPort),
		exposure("wrongnames", "redis", 6379), exposure("plaintext", "redis", 6379), exposure("expired", "redis", 6379)}
	dir := configDir(t)
	writeFile(t, dir, "tenant.yaml", manifests(all...))
	// The engines' native ports are bound elsewhere (--bind-port): a PostgreSQL or Redis of
	// the machine may hold 5432 or 6379; the Gateway, its status and routing are unchanged.
	g := startGateway(t, dir, "--bind", databasesAddr,
		"--bind-port", "5432="+strconv.Itoa(pgPort), "--bind-port", "6379="+strconv.Itoa(redisPort))
	flat := func(pg *testutil.Postgres, name string) string {
		return strings.Replace(pg.ConnString(databasesAddr, pgPort), "host="+pg.Name, "host="+name, 1)
	}

	t.Run("status", func(t *testing.T) {
		type exposureStatus struct {
			Name   string `json:"name"`
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
				Listener   string                                           `json:"listener"`
				Port       int                                              `json:"port"`
				Connect    string                                           `json:"connect"`
				Server     *struct {
					Serial          string `json:"serial"`
					CoversHostnames bool   `json:"coversHostnames"`
				} `json:"serverCertificate"`
			} `json:"status"`
		}
		condition := func(x exposureStatus, typ string) (status, reason, message string) {
			for _, c := range x.Status.Conditions {
				if c.Type == typ {
					return c.Status, c.Reason, c.Message
				}
			}
			return "", "", ""
		}
		want := map[string]struct {
			reason, inMessage, serial string
		}{
			"orders":     {"Verified", "", orders.Cert.SerialHex()},
			"billing":    {"Verified", "", billing.Cert.SerialHex()},
			"cache":      {"Verified", "", cache.Cert.SerialHex()},
			"legacy":     {"Verified", "", legacy.Cert.SerialHex()},
			"wrongnames": {"MissingDNSNames", "wrongnames.redis.example.test, wrongnames.example.test", ""},
			"plaintext":  {"NotTLS", "", ""},
			"expired":    {"Expired", "", ""},
		}
		// The probes run at once after the load; their verdicts come with the next render.
		var last []byte
		deadline := time.Now().Add(waitTimeout)
		for {
			_, body, err := g.get("/status")
			if err != nil {
				t.Fatal(err)
			}
			last = body
			var st struct {
				DatabaseExposures []exposureStatus `json:"databaseExposures"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatal(err)
			}
			var problems []string
			for _, x := range st.DatabaseExposures {
				w, ok := want[x.Name]
				if !ok {
					problems = append(problems, "unexpected exposure "+x.Name)
					continue
				}
				if status, _, _ := condition(x, "Programmed"); status != "True" || x.Status.Listener == "" || x.Status.Connect == "" {
					problems = append(problems, x.Name+" not Programmed")
				}
				_, reason, message := condition(x, "CertificateVerified")
				switch {
				case reason != w.reason:
					problems = append(problems, fmt.Sprintf("%s: CertificateVerified %s (%s), want %s", x.Name, reason, message, w.reason))
				case !strings.Contains(message, w.inMessage):
					problems = append(problems, fmt.Sprintf("%s: message %q does not name %q", x.Name, message, w.inMessage))
				case w.serial != "" && (x.Status.Server == nil || x.Status.Server.Serial != w.serial || !x.Status.Server.CoversHostnames):
					problems = append(problems, fmt.Sprintf("%s: serverCertificate %+v, want serial %s covering the names", x.Name, x.Status.Server, w.serial))
				}
			}
			if len(st.DatabaseExposures) != len(want) {
				problems = append(problems, fmt.Sprintf("%d exposures, want %d", len(st.DatabaseExposures), len(want)))
			}
			if len(problems) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/status: %s\n%s", strings.Join(problems, "; "), last)
			}
			time.Sleep(pollEvery)
		}
		// The expiry metric of a probed certificate is its notAfter.
		if got := g.dbMetric(t, "snigate_backend_certificate_expiry_timestamp_seconds", "namespace=acme", "name=orders"); int64(got) != orders.Cert.Leaf.NotAfter.Unix() {
			t.Errorf("expiry metric of orders %v, want %d", got, orders.Cert.Leaf.NotAfter.Unix())
		}
	})

	t.Run("psql verify-full by both names", func(t *testing.T) {
		for _, c := range []struct {
			pg   *testutil.Postgres
			conn string
		}{
			{orders, orders.ConnString(databasesAddr, pgPort)},
			{orders, flat(orders, "orders.example.test")},
			{billing, billing.ConnString(databasesAddr, pgPort)},
			{billing, flat(billing, "billing.example.test")},
		} {
			r := dbPsql(t, c.conn, "select name from instance")
			if r.err != nil || strings.TrimSpace(r.stdout) != c.pg.Name {
				t.Errorf("psql %s: want %s: %v", c.conn, c.pg.Name, r)
			}
		}
	})

	t.Run("pgx with sslnegotiation=direct", func(t *testing.T) {
		for _, pg := range []*testutil.Postgres{orders, billing} {
			cfg := testutil.PgxConfig(t, pg.ConnString(databasesAddr, pgPort, "sslnegotiation=direct"), databasesAddr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			conn, err := pgxConnect(ctx, cfg)
			if err != nil {
				cancel()
				t.Fatalf("pgx direct to %s: %v", pg.Name, err)
			}
			var name string
			err = conn.QueryRow(ctx, "select name from instance").Scan(&name)
			conn.Close(ctx)
			cancel()
			if err != nil || name != pg.Name {
				t.Errorf("pgx direct to %s: %q, %v", pg.Name, name, err)
			}
		}
	})

	t.Run("redis-cli --tls --sni by both names", func(t *testing.T) {
		for _, name := range []string{"cache.redis.example.test", "cache.example.test"} {
			r := dbRun(t, redisCLI, "--tls", "--sni", name, "--cacert", ca.File, "-h", databasesAddr, "-p", strconv.Itoa(redisPort), "GET", "name")
			if r.err != nil || strings.TrimSpace(r.stdout) != cache.Name {
				t.Errorf("redis-cli --sni %s: %v", name, r)
			}
		}
	})

	t.Run("the serial seen is the database's own, read from its certificate file", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, c := range []struct {
			name, file string
			peer       func() (serial string, err error)
		}{
			{orders.Name, orders.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertPostgres(ctx, net.JoinHostPort(databasesAddr, strconv.Itoa(pgPort)), orders.Name)
				if err != nil {
					return "", err
				}
				return fixture.SerialHex(crt.SerialNumber), nil
			}},
			{billing.Name, billing.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertPostgres(ctx, net.JoinHostPort(databasesAddr, strconv.Itoa(pgPort)), "billing.example.test")
				if err != nil {
					return "", err
				}
				return fixture.SerialHex(crt.SerialNumber), nil
			}},
			{cache.Name, cache.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertTLS(ctx, net.JoinHostPort(databasesAddr, strconv.Itoa(redisPort)), cache.Name)
				if err != nil {
					return "", err
				}
				return fixture.SerialHex(crt.SerialNumber), nil
			}},
		} {
			want := certFileSerial(t, c.file)
			got, err := c.peer()
			if err != nil || got != want {
				t.Errorf("%s: serial seen %s (%v), in %s %s", c.name, got, err, c.file, want)
			}
		}
	})

	t.Run("no SNI is closed with zero bytes on every engine port", func(t *testing.T) {
		for _, port := range []int{pgPort, redisPort, 443} {
			addrRejectedTLS(t, databasesAddr, port, &tls.Config{InsecureSkipVerify: true})
		}
	})

	t.Run("*.example.test on 443 and on 5432 each reach only their own port's backend", func(t *testing.T) {
		// The database's flat name on 443 is the HTTPS listener's: the wildcard certificate,
		// never PostgreSQL's.
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(databasesAddr, "443"),
			&tls.Config{ServerName: "orders.example.test", RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		got := conn.ConnectionState().PeerCertificates[0].SerialNumber
		conn.Close()
		if got.Cmp(wildcard.Serial) != 0 {
			t.Errorf("orders.example.test on 443: serial %X, want the wildcard's %X", got, wildcard.Serial)
		}
		// The app's name on the PostgreSQL and Redis ports: nothing.
		addrRejectedTLS(t, databasesAddr, pgPort, &tls.Config{ServerName: "app.example.test", RootCAs: ca.Pool()})
		addrRejectedTLS(t, databasesAddr, redisPort, &tls.Config{ServerName: "orders.example.test", RootCAs: ca.Pool()})
		// And the app on 443 is served.
		resp, err := addrHTTPClient(databasesAddr, ca, nil).Get("https://app.example.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the app on 443: %d", resp.StatusCode)
		}
	})

	t.Run("MariaDB through tcp-legacy on the same address, its own TLS upgrade untouched", func(t *testing.T) {
		args := append(legacy.ClientArgs(databasesAddr, mariaPort), "--ssl-verify-server-cert",
			"-e", "SELECT name FROM instance; SHOW SESSION STATUS LIKE 'Ssl_version'")
		r := dbRun(t, legacy.Client, args...)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.err != nil || len(lines) != 2 || lines[0] != legacy.Name || !strings.HasPrefix(lines[1], "Ssl_version\tTLSv1.") {
			t.Fatalf("mariadb --ssl through tcp-legacy: %v", r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		peer, err := testutil.PeerCertMySQL(ctx, net.JoinHostPort(databasesAddr, strconv.Itoa(mariaPort)), legacy.Name)
		if err != nil || peer.SerialNumber.Cmp(legacy.Cert.Serial) != 0 {
			t.Errorf("MySQL-protocol TLS through tcp-legacy: %v, serial %v want %X", err, peer, legacy.Cert.Serial)
		}
	})

	t.Run("plaintext clients are refused and nothing reaches the database", func(t *testing.T) {
		before := redisConnections(t, cache)
		disable := func(conn string) string { return strings.Replace(conn, "sslmode=verify-full", "sslmode=disable", 1) }
		if r := dbPsql(t, disable(orders.DirectConnString()), "select 1"); r.err != nil {
			t.Fatalf("orders' server itself refused a plaintext login (the test needs one that accepts it): %v", r)
		}
		dials := g.dbMetric(t, "snigate_backend_dial_seconds_count")
		if dials == 0 {
			t.Fatal("no backend dial counted yet: the metric this check reads is not there")
		}
		r := dbPsql(t, disable(orders.ConnString(databasesAddr, pgPort)), "select 1")
		if r.err == nil || !strings.Contains(r.stderr, "only over TLS") {
			t.Errorf("psql sslmode=disable: want a refusal saying TLS is required: %v", r)
		}
		p := dbRun(t, redisCLI, "-h", databasesAddr, "-p", strconv.Itoa(redisPort), "PING")
		if strings.Contains(p.stdout, "PONG") {
			t.Errorf("plaintext redis-cli got an answer: %v", p)
		}
		// One more: the second query's own connection.
		if after := redisConnections(t, cache); after != before+1 {
			t.Errorf("Redis accepted %d connections during the plaintext attempts", after-before-1)
		}
		// snigate dialled no backend for either.
		if after := g.dbMetric(t, "snigate_backend_dial_seconds_count"); after != dials {
			t.Errorf("snigate dialled %v backends for plaintext clients", after-dials)
		}
	})

	t.Run("removing exposures", func(t *testing.T) {
		// An open session to orders, which must survive billing's removal.
		cfg := testutil.PgxConfig(t, orders.ConnString(databasesAddr, pgPort), databasesAddr)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		session, err := pgxConnect(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close(ctx)

		gen := g.generation(t)
		writeFile(t, dir, "tenant.yaml", manifests(all[0], all[2]))
		g.waitGeneration(t, gen)
		if r := dbPsql(t, billing.ConnString(databasesAddr, pgPort), "select 1"); r.err == nil {
			t.Errorf("billing still reachable after its exposure went: %v", r)
		}
		addrRejectedTLS(t, databasesAddr, pgPort, &tls.Config{ServerName: billing.Name, RootCAs: ca.Pool()})
		var name string
		if err := session.QueryRow(ctx, "select name from instance").Scan(&name); err != nil || name != orders.Name {
			t.Errorf("the open session to orders: %q, %v", name, err)
		}
		if r := dbPsql(t, orders.ConnString(databasesAddr, pgPort), "select name from instance"); r.err != nil {
			t.Errorf("a new connection to orders: %v", r)
		}

		gen = g.generation(t)
		writeFile(t, dir, "tenant.yaml", manifests(all[2]))
		g.waitGeneration(t, gen)
		// The last PostgreSQL exposure gone: the listener and its port are gone.
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(databasesAddr, strconv.Itoa(pgPort)), ioTimeout); err == nil {
			c.Close()
			t.Errorf("port %d still open after the last PostgreSQL exposure went", pgPort)
		}
		r := dbRun(t, redisCLI, "--tls", "--sni", cache.Name, "--cacert", ca.File, "-h", databasesAddr, "-p", strconv.Itoa(redisPort), "GET", "name")
		if r.err != nil || strings.TrimSpace(r.stdout) != cache.Name {
			t.Errorf("Redis after the PostgreSQL exposures went: %v", r)
		}
	})
}

func pgxConnect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, cfg)
}

// certFileSerial is the serial of the certificate in a PEM file, as openssl prints it.
func certFileSerial(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", file)
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return fixture.SerialHex(crt.SerialNumber)
}

// redisConnections is the number of connections the Redis server has accepted, this
// query's own included.
func redisConnections(t *testing.T, r *testutil.Redis) int64 {
	t.Helper()
	c := r.Client(r.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no total_connections_received in INFO stats:\n%s", info)
	return 0
}
