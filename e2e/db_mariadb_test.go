package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// dbMariaDBYAML is a Gateway with a TCP listener (a TCPRoute sends the whole port to the
// MariaDB Service) and a TLS Passthrough listener where a TLSRoute mistakenly sends the host
// name to the same MariaDB.
func dbMariaDBYAML(tcpPort, tlsPort, backendPort int, name string) string {
	return docs(gatewayYAML(listener{Name: "mariadb", Protocol: "TCP", Port: tcpPort}, passthrough("tls", tlsPort, "")),
		fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata:
  name: mariadb
  namespace: default
spec:
  parentRefs:
  - name: %s
    sectionName: mariadb
  rules:
  - backendRefs:
    - name: svc-mariadb
      port: %d
`, gatewayName, servicePort),
		routeYAML("mariadb-by-sni", "tls", []string{name}, to("svc-mariadb")),
		serviceYAML("svc-mariadb", backendPort),
	)
}

// MariaDB speaks first, so it cannot be routed by SNI: it gets its own port through a TCP
// listener and a TCPRoute. Put behind a TLSRoute by mistake, it fails loudly.
func TestDBMariaDB(t *testing.T) {
	t.Parallel()
	needBinary(t)
	const name = "mariadb.db.test"
	ca := testutil.NewCA(t)
	// The client verifies the certificate against the address it dials: name it too.
	cert := ca.Issue(t, name, "127.0.0.1")
	m := testutil.StartMariaDB(t, testutil.MariaDBOptions{CA: ca, Cert: cert, Name: name})
	ports := testutil.FreePorts(t, 2)
	tcpPort, tlsPort := ports[0], ports[1]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", dbMariaDBYAML(tcpPort, tlsPort, m.Port, name))
	const helloTimeout = 3 * time.Second
	g := startGateway(t, dir, "--hello-timeout", helloTimeout.String())

	t.Run("mariadb client through the TCPRoute", func(t *testing.T) {
		before := g.dbConns(t, "negotiation=tcp", "outcome=ok")
		args := append(m.ClientArgs("127.0.0.1", tcpPort), "--ssl-verify-server-cert",
			"-e", "SELECT name FROM instance; SHOW SESSION STATUS LIKE 'Ssl_version'")
		r := dbRun(t, m.Client, args...)
		if r.err != nil {
			t.Fatalf("mariadb --ssl through the TCP listener:\n%s", r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 2 || lines[0] != name || !strings.HasPrefix(lines[1], "Ssl_version\tTLSv1.") {
			t.Fatalf("mariadb output: want %q and a TLS version\n%s", name, r)
		}
		t.Logf("mariadb through the TCPRoute: %q", lines)
		g.dbWaitConns(t, before+1, "negotiation=tcp", "outcome=ok")

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		peer, err := testutil.PeerCertMySQL(ctx, addr(tcpPort), name)
		if err != nil {
			t.Fatalf("MySQL-protocol TLS through the TCP listener: %v", err)
		}
		if peer.SerialNumber.Cmp(cert.Serial) != 0 {
			t.Fatalf("serial %X through the TCP listener, want MariaDB's %s", peer.SerialNumber, cert.SerialHex())
		}
	})

	// The mariadb client waits for the server's greeting, the gateway for a ClientHello:
	// the gateway gives up after its hello timeout and closes; the client reports it.
	t.Run("mariadb client on the passthrough listener fails", func(t *testing.T) {
		before := g.rejected(t, "hello_timeout")
		r := dbRun(t, m.Client, m.ClientArgs("127.0.0.1", tlsPort)...)
		if r.err == nil {
			t.Fatalf("mariadb through a TLS passthrough listener succeeded\n%s", r)
		}
		if r.took > helloTimeout+10*time.Second {
			t.Fatalf("mariadb failed only after %v, want about the %v hello timeout", r.took, helloTimeout)
		}
		t.Logf("mariadb on the passthrough port, after %v: %s", r.took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		g.waitRejected(t, "hello_timeout", before+1)
	})

	// A TLS client that does send the routed name reaches MariaDB, whose greeting is not a
	// TLS record: the gateway closes before passing a byte on, and says why.
	t.Run("TLSRoute to MariaDB: backend_not_tls", func(t *testing.T) {
		before := g.dbConns(t, "negotiation=tls", "outcome=backend_not_tls")
		expectRejectedTLS(t, tlsPort, ca.ClientConfig(name))
		g.dbWaitConns(t, before+1, "negotiation=tls", "outcome=backend_not_tls")
		rec := g.waitLog(t, "saying the backend did not answer with TLS", 1, func(rec map[string]any, _ string) bool {
			return strings.Contains(dbLogField(rec, "msg"), "TCP listener") && dbLogField(rec, "route") == "TLSRoute/default/mariadb-by-sni"
		})
		t.Logf("log: %v", rec)
		g.waitLog(t, "with outcome backend_not_tls", 1, dbMatchLog("outcome", "backend_not_tls", "sni", name))

		out, code := sClient(t, tlsPort, "", "-servername", name)
		if n := sClientBytesRead(t, out); n != 0 || code == 0 {
			t.Errorf("s_client -servername %s read %d bytes, exit %d; want 0 bytes and a failure:\n%s", name, n, code, out)
		}
		g.dbWaitConns(t, before+2, "negotiation=tls", "outcome=backend_not_tls")
	})
}
