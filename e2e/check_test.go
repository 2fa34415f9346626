package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

// runCheck runs `snigate check -f path` and returns its output and exit code.
func runCheck(t *testing.T, path string) (string, int) {
	t.Helper()
	out, err := exec.Command(snigateBin, "check", "-f", path).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("snigate check: %v", err)
	return "", -1
}

func TestCheckQuickstart(t *testing.T) {
	needBinary(t)
	_, file, _, _ := runtime.Caller(0)
	out, code := runCheck(t, filepath.Join(filepath.Dir(file), "..", "examples", "quickstart"))
	if code != 0 {
		t.Fatalf("check of the quickstart exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"Gateway default/demo",
		"Accepted=True (Accepted)",
		"attachedRoutes=2",
		"127.0.0.1:8443 TLS",
		"alpha.demo.test -> TLSRoute/default/alpha",
		"default/alpha:9443 weight=1 [127.0.0.1:9101]",
		"web.demo.test listener default/demo/web Terminate certificates=[web.demo.test]",
		"PathPrefix /api -> HTTPRoute/default/web rules[0]",
		"127.0.0.1:8080 HTTP",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// The README's database example must stay valid.
func TestCheckPostgresExample(t *testing.T) {
	needBinary(t)
	_, file, _, _ := runtime.Caller(0)
	out, code := runCheck(t, filepath.Join(filepath.Dir(file), "..", "examples", "postgres"))
	if code != 0 {
		t.Fatalf("check of examples/postgres exited %d:\n%s", code, out)
	}
	for _, want := range []string{"orders.db.example.com -> TLSRoute/default/orders", "billing.db.example.com -> TLSRoute/default/billing"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckReportsProblems(t *testing.T) {
	needBinary(t)
	ports := testutil.FreePorts(t, 1)
	dir := configDir(t)
	// A route to a Service that does not exist: accepted, but ResolvedRefs=False.
	writeFile(t, dir, "gw.yaml", docs(gatewayYAML(passthrough("tls", ports[0], "")),
		routeYAML("route-a", "tls", []string{"a.test"}, to("missing"))))
	out, code := runCheck(t, dir)
	if code != 1 {
		t.Fatalf("check exited %d, want 1:\n%s", code, out)
	}
	if !strings.Contains(out, "ResolvedRefs=False (BackendNotFound)") {
		t.Errorf("check output does not show the unresolved backend:\n%s", out)
	}

	// Invalid input: the error names the file, the object and the field.
	writeFile(t, dir, "gw.yaml", docs(gatewayYAML(passthrough("tls", ports[0], "")),
		routeYAML("route-a", "tls", []string{"not a hostname!"}, to("missing"))))
	out, code = runCheck(t, dir)
	if code != 1 {
		t.Fatalf("check of invalid input exited %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"gw.yaml", "TLSRoute default/route-a", "spec.hostnames[0]"} {
		if !strings.Contains(out, want) {
			t.Errorf("check error lacks %q:\n%s", want, out)
		}
	}
}

// The tenant example renders, is Ready, and `snigate render` prints the same objects every
// time: the Gateway with its five listeners and the redirect, nothing for cert-manager.
func TestCheckAndRenderTenantExample(t *testing.T) {
	needBinary(t)
	example := filepath.Join(repoRootDir(t), "examples", "tenant")
	out, code := runCheck(t, example)
	if code != 0 {
		t.Fatalf("snigate check -f examples/tenant: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"TenantGateway acme/acme  apex: acme.test  certificates: existingSecret  listeners: 5 of 64",
		"Accepted=True (Accepted)  Ready=True (Ready)  ListenerBudget=True (WithinBudget)",
		"listener tls-vault  :443  vault.acme.test  routes: 1  ready",
		"listener tls-pg  :5432  *.pg.acme.test  routes: 1  ready",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	render := func() string {
		b, err := exec.Command(snigateBin, "render", "-f", example).Output()
		if err != nil {
			t.Fatalf("snigate render: %v", err)
		}
		return string(b)
	}
	first := render()
	if again := render(); again != first {
		t.Error("snigate render printed different output for the same input")
	}
	if n := strings.Count(first, "\n---\n"); n != 1 || !strings.Contains(first, "kind: Gateway") ||
		!strings.Contains(first, "name: acme-http-redirect") || strings.Contains(first, "kind: Certificate") {
		t.Errorf("render: want the Gateway and the redirect only (%d separators):\n%s", n, first)
	}
}

// repoRootDir is the module root, two folders above this file.
func repoRootDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the e2e source file")
	}
	return filepath.Dir(filepath.Dir(file))
}

// `snigate check` of examples/databases shows each exposure's listener, hostnames,
// conditions and client command, cache's members, and the TrustAnchor's published CA;
// `snigate render` prints one TLSRoute per exposure and per member.
func TestCheckAndRenderDatabasesExample(t *testing.T) {
	needBinary(t)
	example := filepath.Join(repoRootDir(t), "examples", "databases")
	out, code := runCheck(t, example)
	if code != 0 {
		t.Fatalf("snigate check -f examples/databases: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"listener tls-postgres  :5432  *.db.demo.test  routes: 2  ready",
		"DatabaseExposure demo/orders  engine: postgres  listener tls-postgres :5432  hostnames: orders.postgres.db.demo.test, orders.db.demo.test",
		"Accepted=True (Accepted)  Programmed=True (Programmed)",
		`connect: psql "host=orders.postgres.db.demo.test port=5432 dbname=postgres sslmode=verify-full sslrootcert=demo.tenant-ca.crt"`,
		"connect: redis-cli -h cache.redis.db.demo.test -p 6379 --tls --sni cache.redis.db.demo.test --cacert demo.tenant-ca.crt PING",
		"member r1  Accepted  route cache.r1  hostnames: r1.cache.redis.db.demo.test, r1.cache.db.demo.test",
		"TrustAnchor demo/demo-ca  publishes: Secret demo.tenant-ca",
		"Ready=True (Published)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	b, err := exec.Command(snigateBin, "render", "-f", example).Output()
	if err != nil {
		t.Fatalf("snigate render: %v", err)
	}
	if n := strings.Count(string(b), "\nkind: TLSRoute\n"); n != 5 {
		t.Errorf("render: %d TLSRoutes, want one per exposure (3) and per member (2):\n%s", n, b)
	}
}
