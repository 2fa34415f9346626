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
	}
}
