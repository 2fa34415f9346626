package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/snigate/snigate/internal/pgwire"
	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/testutil"
)

// AccessPolicies through the real binary, with real clients on chosen source addresses:
// Go clients dial from loopback addresses of their own (127.0.0.5, 127.0.0.9: the whole of
// 127.0.0.0/8 is the host's), the command-line clients (psql, redis-cli, mariadb) run in a
// network namespace whose address is outside every allowed range, reaching the gateway on
// the host end of its link. A refused client gets zero bytes (after PostgreSQL's 'S'), is
// counted by reason and route, and its access log line names the policy.

// accessPolicyYAML is an AccessPolicy on one target (kind Gateway, ListenerSet, TLSRoute or
// TCPRoute; section: a listener), with body the rest of its spec (YAML, indented 2).
func accessPolicyYAML(name, kind, target, section, body string) string {
	sec := ""
	if section != "" {
		sec = ", sectionName: " + section
	}
	return fmt.Sprintf("apiVersion: snigate.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: %s, namespace: default}\n"+
		"spec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: %s, name: %s%s}]\n%s\n", name, kind, target, sec, body)
}

// twoAddressGateway is Gateway gw bound to 127.0.0.1 and to another address (a network
// namespace's host end), with listeners given as YAML (indented 2, each "- ...").
func twoAddressGateway(other netip.Addr, listeners string) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: snigate
  addresses: [{type: IPAddress, value: 127.0.0.1}, {type: IPAddress, value: %s}]
  listeners:
%s`, other, listeners)
}

// from is a dialer whose connections come from the loopback address src.
func from(src string) *net.Dialer {
	return &net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
}

// dbRunIn runs a client binary inside the network namespace h, as dbRun does.
func dbRunIn(t *testing.T, h *testutil.Host, bin string, args ...string) dbCmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbCmdTimeout)
	defer cancel()
	cmd := h.Command(bin, args...)
	cmd.Env = append(cmd.Env, "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s in %s: still running after %v", bin, h.Name, dbCmdTimeout)
	}
	return dbCmdResult{stdout: stdout.String(), stderr: stderr.String(), err: err, took: time.Since(start)}
}

// rejectedOn is snigate_rejected_connections_total for reason on route.
func (g *gateway) rejectedOn(t *testing.T, reason, route string) float64 {
	return g.dbMetric(t, "snigate_rejected_connections_total", "reason="+reason, "route="+route)
}

// waitRejectedOn waits until rejectedOn reaches want.
func (g *gateway) waitRejectedOn(t *testing.T, reason, route string, want float64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := g.rejectedOn(t, reason, route)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snigate_rejected_connections_total{reason=%q,route=%q} = %v, want %v", reason, route, got, want)
		}
		time.Sleep(pollEvery)
	}
}

// waitRefusalLogged waits for the access log line of a refusal of client (an address) with
// reason by policy on route.
func (g *gateway) waitRefusalLogged(t *testing.T, client, reason, policy, route string) {
	t.Helper()
	g.waitLog(t, fmt.Sprintf("the access log line of %s refused (%s by %s)", client, reason, policy), 1, func(rec map[string]any, _ string) bool {
		c, _ := rec["client"].(string)
		return rec["msg"] == "connection rejected" && rec["outcome"] == reason && rec["policy"] == policy && rec["route"] == route &&
			(strings.HasPrefix(c, client+":") || strings.HasPrefix(c, "["+client+"]:"))
	})
}

// PostgreSQL: psql verify-full from the host (127.0.0.1) and refused from a namespace's
// address; after the refusal the client has read 'S' and nothing more; pgx with direct TLS
// from 127.0.0.5 and refused from 127.0.0.9, which deniedRanges names inside sourceRanges.
func TestAccessPostgres(t *testing.T) {
	t.Parallel()
	needBinary(t)
	psql := dbPsqlBin(t)
	ca := testutil.NewCA(t)
	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "pg.acl.test"})
	h := testutil.NetnsHost(t, "acl-pg")
	port := testutil.FreePort(t)
	const route = "TLSRoute/default/pg"
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		twoAddressGateway(h.HostIP, fmt.Sprintf("  - {name: postgres, protocol: TLS, port: %d, tls: {mode: Passthrough}}\n", port)),
		routeYAML("pg", "postgres", []string{pg.Name}, to("svc-pg")),
		serviceYAML("svc-pg", pg.Port),
		accessPolicyYAML("pg-access", "TLSRoute", "pg", "", "  sourceRanges: [127.0.0.0/8]\n  deniedRanges: [127.0.0.9/32]"),
	))
	g := startGateway(t, dir)

	t.Run("psql verify-full from an allowed address", func(t *testing.T) {
		r := dbPsql(t, pg.ConnString("127.0.0.1", port), "SELECT name, ssl FROM instance, pg_stat_ssl WHERE pid = pg_backend_pid()")
		if r.err != nil || strings.TrimSpace(r.stdout) != pg.Name+"|t" {
			t.Fatalf("psql from 127.0.0.1: want %s|t\n%s", pg.Name, r)
		}
	})
	t.Run("psql verify-full from outside sourceRanges", func(t *testing.T) {
		before := g.rejectedOn(t, "client_not_allowed", route)
		r := dbRunIn(t, h, psql, "-X", "-At", "-d", pg.ConnString(h.HostIP.String(), port), "-c", "SELECT name FROM instance")
		if r.err == nil || strings.Contains(r.stdout, pg.Name) {
			t.Fatalf("psql from %s reached the database\n%s", h.IP, r)
		}
		t.Logf("psql from %s: %s", h.IP, strings.TrimSpace(r.stderr))
		g.waitRejectedOn(t, "client_not_allowed", route, before+1)
		g.waitRefusalLogged(t, h.IP.String(), "client_not_allowed", "default/pg-access", route)
	})
	t.Run("after 'S', zero bytes", func(t *testing.T) {
		c, err := from(h.HostIP.String()).Dial("tcp", addr(port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := c.Write([]byte(pgwire.SSLRequest)); err != nil {
			t.Fatal(err)
		}
		if b := dbReadByte(t, c); b != 'S' {
			t.Fatalf("SSLRequest answered %q, want 'S'", b)
		}
		dbTLSNoBytes(t, c, &tls.Config{ServerName: pg.Name, RootCAs: ca.Pool()})
	})
	pgxFrom := func(src string) (*pgx.Conn, error) {
		cfg := testutil.PgxConfig(t, pg.ConnString("127.0.0.1", port, "sslnegotiation=direct"), "127.0.0.1")
		cfg.DialFunc = from(src).DialContext
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return pgx.ConnectConfig(ctx, cfg)
	}
	t.Run("pgx direct TLS from 127.0.0.5", func(t *testing.T) {
		conn, err := pgxFrom("127.0.0.5")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var addr string
		if err := conn.QueryRow(context.Background(), "SELECT host(inet_client_addr())").Scan(&addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("pgx direct TLS from 127.0.0.9: deniedRanges wins over sourceRanges", func(t *testing.T) {
		before := g.rejectedOn(t, "client_not_allowed", route)
		conn, err := pgxFrom("127.0.0.9")
		if err == nil {
			conn.Close(context.Background())
			t.Fatal("pgx from the denied 127.0.0.9 connected")
		}
		g.waitRejectedOn(t, "client_not_allowed", route, before+1)
		g.waitRefusalLogged(t, "127.0.0.9", "client_not_allowed", "default/pg-access", route)
	})
}

// Redis on a TLS listener and MariaDB on a TCP listener: redis-cli and go-redis from allowed
// addresses, redis-cli and the mariadb client refused from the namespace.
func TestAccessRedisAndMariaDB(t *testing.T) {
	t.Parallel()
	needBinary(t)
	cli := testutil.Binary(t, "redis-cli", "/usr/bin")
	ca := testutil.NewCA(t)
	rd := testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: "redis.acl.test"})
	const mname = "mariadb.acl.test"
	m := testutil.StartMariaDB(t, testutil.MariaDBOptions{CA: ca, Cert: ca.Issue(t, mname, "127.0.0.1"), Name: mname})
	h := testutil.NetnsHost(t, "acl-rd")
	ports := testutil.FreePorts(t, 2)
	redisPort, mariaPort := ports[0], ports[1]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		twoAddressGateway(h.HostIP, fmt.Sprintf("  - {name: redis, protocol: TLS, port: %d, tls: {mode: Passthrough}}\n  - {name: mariadb, protocol: TCP, port: %d}\n", redisPort, mariaPort)),
		routeYAML("redis", "redis", []string{rd.Name}, to("svc-redis")),
		serviceYAML("svc-redis", rd.Port),
		fmt.Sprintf("apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\nmetadata: {name: mariadb, namespace: default}\n"+
			"spec:\n  parentRefs: [{name: gw, sectionName: mariadb}]\n  rules: [{backendRefs: [{name: svc-mariadb, port: %d}]}]\n", servicePort),
		serviceYAML("svc-mariadb", m.Port),
		accessPolicyYAML("redis", "TLSRoute", "redis", "", "  sourceRanges: [127.0.0.0/8]"),
		accessPolicyYAML("mariadb", "TCPRoute", "mariadb", "", "  sourceRanges: [127.0.0.1/32]"),
	))
	g := startGateway(t, dir)
	cliArgs := func(host string) []string {
		return []string{"--tls", "--sni", rd.Name, "--cacert", ca.File, "-h", host, "-p", strconv.Itoa(redisPort), "GET", "name"}
	}
	t.Run("redis-cli from 127.0.0.1", func(t *testing.T) {
		r := dbRun(t, cli, cliArgs("127.0.0.1")...)
		if r.err != nil || strings.TrimSpace(r.stdout) != rd.Name {
			t.Fatalf("redis-cli: want %s\n%s", rd.Name, r)
		}
	})
	t.Run("go-redis from 127.0.0.7", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr(redisPort), Dialer: func(ctx context.Context, network, a string) (net.Conn, error) {
			conn, err := from("127.0.0.7").DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			return tls.Client(conn, rd.TLSConfig()), nil
		}, MaxRetries: -1, PoolSize: 1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if got, err := c.Get(ctx, "name").Result(); err != nil || got != rd.Name {
			t.Fatalf("go-redis GET name: %q, %v", got, err)
		}
	})
	t.Run("redis-cli from outside", func(t *testing.T) {
		before := g.rejectedOn(t, "client_not_allowed", "TLSRoute/default/redis")
		r := dbRunIn(t, h, cli, cliArgs(h.HostIP.String())...)
		if strings.Contains(r.stdout, rd.Name) {
			t.Fatalf("redis-cli from %s reached the server\n%s", h.IP, r)
		}
		t.Logf("redis-cli from %s: %s", h.IP, strings.TrimSpace(r.stdout+r.stderr))
		g.waitRejectedOn(t, "client_not_allowed", "TLSRoute/default/redis", before+1)
	})
	t.Run("mariadb from 127.0.0.1 on the TCP listener", func(t *testing.T) {
		r := dbRun(t, m.Client, append(m.ClientArgs("127.0.0.1", mariaPort), "--ssl-verify-server-cert", "-e", "SELECT name FROM instance")...)
		if r.err != nil || strings.TrimSpace(r.stdout) != mname {
			t.Fatalf("mariadb: want %s\n%s", mname, r)
		}
	})
	t.Run("mariadb from outside on the TCP listener", func(t *testing.T) {
		before := g.rejectedOn(t, "client_not_allowed", "TCPRoute/default/mariadb")
		r := dbRunIn(t, h, m.Client, append(m.ClientArgs(h.HostIP.String(), mariaPort), "-e", "SELECT name FROM instance")...)
		if r.err == nil || strings.Contains(r.stdout, mname) {
			t.Fatalf("mariadb from %s reached the server\n%s", h.IP, r)
		}
		t.Logf("mariadb from %s: %s", h.IP, strings.TrimSpace(r.stderr))
		g.waitRejectedOn(t, "client_not_allowed", "TCPRoute/default/mariadb", before+1)
		g.waitRefusalLogged(t, h.IP.String(), "client_not_allowed", "default/mariadb", "TCPRoute/default/mariadb")
	})
}

// Listener-level policies on a TLS Terminate listener and an HTTPS listener (a Gateway's
// sectionName): the check comes before the handshake, so a refused client reads no
// certificate and no HTTP answer. curl picks its source address with --interface.
func TestAccessTerminateAndHTTPS(t *testing.T) {
	t.Parallel()
	needBinary(t)
	curl, err := exec.LookPath("curl")
	testutil.Require(t, "curl", err)
	ca := testutil.NewCA(t)
	termCert, webCert := ca.Issue(t, "term.acl.test"), ca.Issue(t, "web.acl.test")
	port := testutil.FreePort(t)
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: snigate
  addresses: [{type: IPAddress, value: 127.0.0.1}]
  listeners:
  - {name: term, protocol: TLS, port: %[1]d, hostname: term.acl.test, tls: {mode: Terminate, certificateRefs: [{name: term}]}}
  - {name: web, protocol: HTTPS, port: %[1]d, hostname: web.acl.test, tls: {certificateRefs: [{name: web}]}}
`, port),
		routeYAML("term", "term", []string{"term.acl.test"}, to("svc-echo")),
		`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: web}]
  rules: [{backendRefs: [{name: svc-web, port: 8443}]}]
`,
		secretYAML("term", termCert), secretYAML("web", webCert),
		serviceYAML("svc-echo", startEcho(t, "echo", nil)),
		serviceYAML("svc-web", startHTTPEcho(t, "web")),
		accessPolicyYAML("term", "Gateway", "gw", "term", "  sourceRanges: [127.0.0.5/32]"),
		accessPolicyYAML("web", "Gateway", "gw", "web", "  sourceRanges: [127.0.0.5/32]"),
	))
	g := startGateway(t, dir)
	t.Run("terminate from 127.0.0.5", func(t *testing.T) {
		c, err := tls.DialWithDialer(from("127.0.0.5"), "tcp", addr(port), &tls.Config{ServerName: "term.acl.test", RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(ioTimeout))
		line := make([]byte, 64)
		if n, err := c.Read(line); err != nil || !strings.Contains(string(line[:n]), "echo") {
			t.Fatalf("greeting %q, %v", line[:n], err)
		}
	})
	t.Run("terminate from 127.0.0.6: zero bytes, no certificate", func(t *testing.T) {
		before := g.rejectedOn(t, "client_not_allowed", "TLSRoute/default/term")
		c, err := from("127.0.0.6").Dial("tcp", addr(port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dbTLSNoBytes(t, c, &tls.Config{ServerName: "term.acl.test", RootCAs: ca.Pool()})
		g.waitRejectedOn(t, "client_not_allowed", "TLSRoute/default/term", before+1)
		g.waitRefusalLogged(t, "127.0.0.6", "client_not_allowed", "default/term", "TLSRoute/default/term")
	})
	curlFrom := func(src string) dbCmdResult {
		return dbRun(t, curl, "-sS", "--max-time", "10", "--interface", src, "--cacert", ca.File,
			"--resolve", fmt.Sprintf("web.acl.test:%d:127.0.0.1", port), fmt.Sprintf("https://web.acl.test:%d/hello", port))
	}
	t.Run("HTTPS from 127.0.0.5 (curl --interface)", func(t *testing.T) {
		r := curlFrom("127.0.0.5")
		if r.err != nil || !strings.Contains(r.stdout, `"/hello"`) {
			t.Fatalf("curl from 127.0.0.5:\n%s", r)
		}
	})
	t.Run("HTTPS from 127.0.0.6 (curl --interface)", func(t *testing.T) {
		before := g.rejectedOn(t, "client_not_allowed", "")
		r := curlFrom("127.0.0.6")
		if r.err == nil || strings.Contains(r.stdout, "hello") {
			t.Fatalf("curl from 127.0.0.6 got an answer:\n%s", r)
		}
		t.Logf("curl from 127.0.0.6: %s", strings.TrimSpace(r.stderr))
		g.waitRejectedOn(t, "client_not_allowed", "", before+1)
	})
}

// The client's address from a trusted load balancer's PROXY header: a ListenerPolicy trusts
// 127.0.0.0/8, the route allows 203.0.113.0/24 alone. A header naming a client in that range
// is admitted though the TCP peer (127.0.0.1) is not; a header naming another is refused;
// the peer's own connection without a header is refused.
func TestAccessProxyHeader(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	port := testutil.FreePort(t)
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("db", "tls", []string{"db.acl.test"}, to("svc-db")),
		serviceYAML("svc-db", startEcho(t, "db", ca.Issue(t, "db.acl.test"))),
		`apiVersion: snigate.dev/v1alpha1
kind: ListenerPolicy
metadata: {name: lb, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: tls}]
  proxyProtocol: {trustedRanges: [127.0.0.0/8]}
`,
		accessPolicyYAML("db", "TLSRoute", "db", "", "  sourceRanges: [203.0.113.0/24]"),
	))
	g := startGateway(t, dir)
	dial := func(src string) (*tls.Conn, error) {
		c, err := net.DialTimeout("tcp", addr(port), ioTimeout)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(ioTimeout))
		if src != "" {
			hdr, err := proxyproto.Header(2, netip.MustParseAddrPort(src), netip.MustParseAddrPort(addr(port)), proxyproto.TLVs{})
			if err != nil {
				t.Fatal(err)
			}
			c.Write(hdr)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "db.acl.test", RootCAs: ca.Pool()})
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
	if c, err := dial("203.0.113.7:40000"); err != nil {
		t.Fatalf("a header naming 203.0.113.7: %v", err)
	} else {
		c.Close()
	}
	before := g.rejectedOn(t, "client_not_allowed", "TLSRoute/default/db")
	if c, err := dial("198.51.100.7:40000"); err == nil {
		c.Close()
		t.Fatal("a header naming 198.51.100.7 was admitted")
	}
	g.waitRefusalLogged(t, "198.51.100.7", "client_not_allowed", "default/db", "TLSRoute/default/db")
	if c, err := dial(""); err == nil {
		c.Close()
		t.Fatal("the balancer's own address (no header) was admitted")
	}
	g.waitRejectedOn(t, "client_not_allowed", "TLSRoute/default/db", before+2)
}
