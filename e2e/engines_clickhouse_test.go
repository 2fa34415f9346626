package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// ClickHouse's HTTPS interface through a DatabaseExposure on port 8443 (not the engine's
// native 9440: Debian 12's clickhouse-client 18.16 sends no SNI, and clickhouse-go cannot
// query an 18.16 server, so the native protocol has no client here that works even
// directly; docs/engines.md). curl, which sends the URL's host as SNI and verifies the
// certificate by it, creates a table, inserts and selects by both names; the rows are then
// read straight from the server.
func TestEngineClickHouse(t *testing.T) {
	t.Parallel()
	needBinary(t)
	curl := testutil.Binary(t, "curl", "/usr/bin")
	ca := testutil.NewCA(t)
	names := engineHostnames("metrics", "clickhouse")
	srv := testutil.StartClickHouse(t, testutil.ClickHouseOptions{CA: ca, Name: names[0], Cert: ca.Issue(t, names...)})
	e := startEngineTenant(t, ca, 8443,
		exposureYAML("metrics", "clickhouse", 8443)+"  port: 8443\n",
		fixture.ServiceYAML("acme", "metrics", 8443, srv.Port, "127.0.0.1"))
	gw := strconv.Itoa(e.port)

	// query runs one statement with curl against host:port, reached at address:port
	// (--resolve: the name resolves there, as DNS would make it), verifying the certificate
	// by host against the CA.
	query := func(t *testing.T, host, address, port, sql string) dbCmdResult {
		t.Helper()
		return dbRun(t, curl, "--silent", "--show-error", "--fail", "--max-time", "20",
			"--cacert", ca.File, "--resolve", host+":"+port+":"+address,
			"--data-binary", sql, "https://"+host+":"+port+"/")
	}

	t.Run("status", func(t *testing.T) {
		st := e.waitVerified(t, map[string][]*testutil.Cert{"metrics": {srv.Cert}})
		t.Logf("connect: %s", st["metrics"].Status.Connect)
	})

	if r := query(t, names[0], "127.0.0.1", gw, "CREATE TABLE events (via String, n UInt32) ENGINE = Memory"); r.err != nil {
		t.Fatalf("create table through snigate: %v", r)
	}
	for i, name := range names {
		t.Run("curl insert and select by "+name, func(t *testing.T) {
			if r := query(t, name, "127.0.0.1", gw, "INSERT INTO events VALUES ('"+name+"', "+strconv.Itoa(i)+")"); r.err != nil {
				t.Fatalf("insert by %s: %v", name, r)
			}
			r := query(t, name, "127.0.0.1", gw, "SELECT via FROM events WHERE n = "+strconv.Itoa(i)+" FORMAT TabSeparated")
			if r.err != nil || strings.TrimSpace(r.stdout) != name {
				t.Fatalf("select by %s: want %q: %v", name, name, r)
			}
		})
	}

	t.Run("the rows are on the server itself", func(t *testing.T) {
		r := query(t, names[0], "127.0.0.1", strconv.Itoa(srv.Port), "SELECT via FROM events ORDER BY n FORMAT TabSeparated")
		if r.err != nil || strings.Fields(r.stdout) == nil || strings.Join(strings.Fields(r.stdout), " ") != strings.Join(names, " ") {
			t.Fatalf("straight to the server: want %q: %v", names, r)
		}
	})

	t.Run("curl refuses a certificate that does not name the host", func(t *testing.T) {
		// That curl verifies by name at all: the same server, asked for by a name its
		// certificate lacks, is refused.
		r := query(t, "other.example.test", "127.0.0.1", strconv.Itoa(srv.Port), "SELECT 1")
		if r.err == nil || !strings.Contains(r.stderr, "certificate") {
			t.Fatalf("curl accepted the certificate for a name it lacks: %v", r)
		}
	})

	t.Run("the certificate is the server's own", func(t *testing.T) {
		e.checkServed(t, srv.Cert, names...)
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		e.checkNoSNI(t, func() error {
			// By the address curl sends no SNI (-k: the refusal must not be a certificate
			// error).
			r := dbRun(t, curl, "--silent", "--show-error", "--max-time", "20", "-k",
				"--data-binary", "SELECT 1", "https://"+e.addr()+"/")
			if r.err == nil {
				return nil
			}
			return fmt.Errorf("curl: %v: %s", r.err, strings.TrimSpace(r.stderr))
		})
	})
}
