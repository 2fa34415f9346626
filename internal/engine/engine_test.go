package engine

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/snigate/snigate/api/v1alpha1"
)

// The table has exactly the CRD's engines, in its order, each with a client command that
// names the host, the port and the CA file.
func TestTableCoversTheEnum(t *testing.T) {
	var names []v1alpha1.Engine
	for _, e := range All() {
		names = append(names, e.Name)
		cmd := e.Connect("db.example.test", 15432, "/tmp/ca.crt")
		for _, want := range []string{"db.example.test", "15432", "/tmp/ca.crt"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s: command %q lacks %q", e.Name, cmd, want)
			}
		}
		if e.Name != v1alpha1.EngineCustom && e.Port == 0 {
			t.Errorf("%s: no native port", e.Name)
		}
	}
	if !slices.Equal(names, v1alpha1.Engines) {
		t.Errorf("engines %v, want the CRD's %v", names, v1alpha1.Engines)
	}
	if e, _ := Lookup(v1alpha1.EngineMariaDB); e.SNIRouted() {
		t.Error("MariaDB's server speaks first: SNI cannot route it")
	}
	if e, _ := Lookup(v1alpha1.EnginePostgres); e.Listener() != "tls-postgres" || e.Start != PostgresSSLRequest || !strings.Contains(e.Connect("h", 1, "c"), "sslmode=verify-full") {
		t.Errorf("postgres: %+v", e)
	}
}

// docs/engines.md shows, for every engine, the row of this table and the client command the
// status's connect field gives: the documentation cannot drift from what snigate prints.
func TestEnginesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/engines.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range All() {
		port := e.Port
		if port == 0 {
			port = 7000
		}
		listener := e.Listener()
		if !e.SNIRouted() {
			listener = "tcp-<release>"
		}
		row := fmt.Sprintf("| `%s` | %d | `%s` | %s | `%s` |", e.Name, e.Port, listener, e.Start,
			e.Connect("<release>.<engine>.<apex>", port, "ca.crt"))
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/engines.md lacks the row\n%s", row)
		}
		for _, p := range e.Protocols {
			row := fmt.Sprintf("| `%s` | %d | %s | `%s` |", e.Name, p.Port, p.Name, p.Connect("<release>.<engine>.<apex>", p.Port, "ca.crt"))
			if !strings.Contains(string(doc), row) {
				t.Errorf("docs/engines.md lacks the row\n%s", row)
			}
		}
	}
}

// The client command follows the protocol of the exposure's port, not the engine's native
// one: ClickHouse on 8443 (listener or backend) is HTTPS, given curl; an unknown port of an
// engine of several protocols gets openssl, which verifies whatever the protocol; an engine
// of one protocol (PostgreSQL) keeps its client on any port.
func TestConnectFollowsThePort(t *testing.T) {
	ch, _ := Lookup(v1alpha1.EngineClickHouse)
	for _, tc := range []struct {
		e                 v1alpha1.Engine
		port, backendPort int32
		want              string
	}{
		{v1alpha1.EngineClickHouse, 9440, 9440, "clickhouse-client --host h --port 9440 --secure"},
		{v1alpha1.EngineClickHouse, 8443, 8443, `curl --cacert ca.crt "https://h:8443/?query=SELECT%201"`},
		{v1alpha1.EngineClickHouse, 18443, 8443, `curl --cacert ca.crt "https://h:18443/?query=SELECT%201"`},
		{v1alpha1.EngineClickHouse, 19440, 9440, "clickhouse-client --host h --port 19440 --secure"},
		{v1alpha1.EngineClickHouse, 7000, 7001, "openssl s_client -connect h:7000"},
		{v1alpha1.EngineRabbitMQ, 15671, 15671, "curl --cacert ca.crt https://h:15671/"},
		{v1alpha1.EnginePostgres, 15432, 15432, `psql "host=h port=15432`},
	} {
		e, _ := Lookup(tc.e)
		if got := e.ConnectFor("h", tc.port, tc.backendPort, "ca.crt"); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s on %d (backend %d): %q, want %q…", tc.e, tc.port, tc.backendPort, got, tc.want)
		}
	}
	if got := ch.Connect("h", 9440, "ca.crt"); !strings.HasPrefix(got, "clickhouse-client") {
		t.Errorf("native: %q", got)
	}
	mongo, _ := Lookup(v1alpha1.EngineMongoDB)
	if got := mongo.ConnectCluster("rs.mongodb.a", []string{"m0.rs.mongodb.a", "m1.rs.mongodb.a"}, 27017, 27017, "ca.crt"); got !=
		`mongosh "mongodb://m0.rs.mongodb.a:27017,m1.rs.mongodb.a:27017/?tls=true&tlsCAFile=ca.crt"` {
		t.Errorf("mongodb with members: %q", got)
	}
}

// Greeting recognises the servers that speak first, and nothing that begins a TLS record.
func TestGreeting(t *testing.T) {
	if e, ok := Greeting([]byte("INFO {\"server_id\":\"x\"}\r\n")); !ok || e.Name != v1alpha1.EngineNATS || e.SpeaksFirstFix == "" {
		t.Errorf("NATS INFO: %v %v", e.Name, ok)
	}
	mysql := append([]byte{0x4a, 0, 0, 0, 10}, "10.11.6-MariaDB"...)
	if e, ok := Greeting(mysql); !ok || e.SpeaksFirstFix == "" {
		t.Errorf("MySQL greeting: %v %v", e.Name, ok)
	}
	for _, b := range [][]byte{{0x16, 3, 3, 0, 0x7a}, []byte("-ERR"), nil, {0, 0, 0, 0, 10}} {
		if e, ok := Greeting(b); ok {
			t.Errorf("% x taken for %s", b, e.Name)
		}
	}
}
