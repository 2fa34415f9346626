package v1alpha1_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

const repoRoot = "../.."

// validationCases are TenantGateway specs and the field an error must name ("" when the CRD
// accepts the spec). Each runs through the real API server (schema and CEL) and through
// Validate: both must refuse it, each with a message naming the field.
var validationCases = []struct {
	name  string
	spec  string
	field string
}{
	{"minimal", `apex: acme.example.com`, ""},
	{"everything", `
apex: acme.example.com
gatewayClassName: snigate
certificates: {mode: dns01, dns01: {rfc2136: {nameserver: "192.0.2.53"}}}
tlsPassthroughServices: [vault, argocd]
tlsPassthroughListeners:
- {name: pg, port: 5432, hostname: "*.pg.acme.example.com"}
- {name: redis, port: 6379, hostname: redis.acme.example.com}
- {name: apex, port: 9000, hostname: acme.example.com}
attachedNamespaces: [monitoring]`, ""},
	{"apex missing", `gatewayClassName: snigate`, "spec.apex"},
	{"apex upper case", `apex: Acme.example.com`, "spec.apex"},
	{"apex wildcard", `apex: "*.example.com"`, "spec.apex"},
	{"listener name not a label", `
apex: a.example.com
tlsPassthroughListeners: [{name: Pg, port: 5432, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].name"},
	{"listener names duplicate", `
apex: a.example.com
tlsPassthroughListeners:
- {name: pg, port: 5432, hostname: pg.a.example.com}
- {name: pg, port: 5433, hostname: pg2.a.example.com}`, "spec.tlsPassthroughListeners[1]"},
	{"listener name equals a service", `
apex: a.example.com
tlsPassthroughServices: [pg]
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners"},
	{"port 0", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 0, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port"},
	{"port 65536", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 65536, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port"},
	{"port 443", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 443, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port"},
	{"port 80", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 80, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port"},
	{"ports duplicate", `
apex: a.example.com
tlsPassthroughListeners:
- {name: pg, port: 5432, hostname: pg.a.example.com}
- {name: pg2, port: 5432, hostname: pg2.a.example.com}`, "spec.tlsPassthroughListeners"},
	{"hostname outside the apex", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: pg.b.example.com}]`, "spec.tlsPassthroughListeners"},
	{"hostname a suffix but not under the apex", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: pga.example.com}]`, "spec.tlsPassthroughListeners"},
	{"hostname wildcard in the middle", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: "pg.*.a.example.com"}]`, "spec.tlsPassthroughListeners[0].hostname"},
	{"service not a label", `
apex: a.example.com
tlsPassthroughServices: [vault.x]`, "spec.tlsPassthroughServices[0]"},
	{"services duplicate", `
apex: a.example.com
tlsPassthroughServices: [vault, vault]`, "spec.tlsPassthroughServices[1]"},
	{"attached namespace not a label", `
apex: a.example.com
attachedNamespaces: [Monitoring]`, "spec.attachedNamespaces[0]"},
	{"existingSecret without secret", `
apex: a.example.com
certificates: {mode: existingSecret}`, "spec.certificates.wildcardSecretRef"},
	{"existingSecret", `
apex: a.example.com
certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard}}`, ""},
	{"dns01 without solver or issuer", `
apex: a.example.com
certificates: {mode: dns01}`, "spec.certificates.dns01"},
	{"dns01 with an issuer", `
apex: a.example.com
certificates: {mode: dns01, issuerRef: {name: letsencrypt, kind: ClusterIssuer}}`, ""},
	{"acme and issuerRef", `
apex: a.example.com
certificates: {acme: {server: "https://acme.example/dir"}, issuerRef: {name: x}}`, "spec.certificates.acme"},
	{"acme server not https", `
apex: a.example.com
certificates: {acme: {server: "http://acme.example/dir"}}`, "spec.certificates.acme.server"},
	{"acme", `
apex: a.example.com
certificates: {acme: {server: "https://acme.example/dir", email: ops@example.com}}`, ""},
	{"unknown mode", `
apex: a.example.com
certificates: {mode: selfSigned}`, "spec.certificates.mode"},
}

func tenantGatewayYAML(name, spec string) string {
	return fmt.Sprintf("apiVersion: snigate.dev/v1alpha1\nkind: TenantGateway\nmetadata: {name: %s, namespace: default}\nspec:\n%s\n",
		name, indent(spec))
}

func indent(s string) string {
	var b bytes.Buffer
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n")) {
		b.WriteString("  ")
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// goValid decodes a case strictly (as the file loader does) and runs Default and Validate.
func goValid(t *testing.T, doc string) (bool, string) {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var tg v1alpha1.TenantGateway
	if strict, err := kjson.UnmarshalStrict(js, &tg); err != nil || len(strict) > 0 {
		return false, fmt.Sprint(err, strict)
	}
	tg.Default()
	errs := tg.Validate()
	if len(errs) > 0 {
		return false, errs.ToAggregate().Error()
	}
	return true, ""
}

// The Go rules alone, without an API server: every case as the table says.
func TestValidate(t *testing.T) {
	for _, c := range validationCases {
		t.Run(c.name, func(t *testing.T) {
			ok, msg := goValid(t, tenantGatewayYAML("x", c.spec))
			if ok != (c.field == "") {
				t.Errorf("Validate: valid=%v (%s), want an error naming %q", ok, msg, c.field)
			}
			if !ok && !strings.Contains(msg, c.field+":") {
				t.Errorf("Validate: %s\nwant it to name %s", msg, c.field)
			}
		})
	}
}

// The CRD's schema and CEL rules on the real API server say the same as Validate for every
// case.
func TestValidationAgreesWithCRD(t *testing.T) {
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: []string{filepath.Join(repoRoot, "config", "crd", "snigate", "snigate.dev_tenantgateways.yaml")}})
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range validationCases {
		t.Run(c.name, func(t *testing.T) {
			doc := tenantGatewayYAML(fmt.Sprintf("case-%d", i), c.spec)
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			apiErr := cl.Create(context.Background(), &u, client.DryRunAll)
			goOK, goMsg := goValid(t, doc)
			if (apiErr == nil) != (c.field == "") {
				t.Errorf("API server: error %v, want an error naming %q", apiErr, c.field)
			}
			if apiErr != nil && !strings.Contains(apiErr.Error(), c.field+":") {
				t.Errorf("API server: %v\nwant it to name %s", apiErr, c.field)
			}
			if goOK != (apiErr == nil) {
				t.Errorf("Go and the CRD disagree: API server error %v; Validate valid=%v (%s)", apiErr, goOK, goMsg)
			}
		})
	}
}

// The committed CRDs are what controller-gen makes of the types.
func TestCRDsAreGenerated(t *testing.T) {
	testutil.SkipShort(t, "building controller-gen")
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Require(t, "the go command", err)
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "generate.sh"))
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/generate.sh: %v\n%s", err, b)
	}
	gen, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	committed, _ := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "snigate", "*.yaml"))
	if len(gen) == 0 || len(gen) != len(committed) {
		t.Fatalf("generated %d CRDs, committed %d", len(gen), len(committed))
	}
	for _, g := range gen {
		want, err := os.ReadFile(filepath.Join(repoRoot, "config", "crd", "snigate", filepath.Base(g)))
		if err != nil {
			t.Fatalf("%v (run scripts/generate.sh)", err)
		}
		got, _ := os.ReadFile(g)
		if !bytes.Equal(want, got) {
			t.Errorf("config/crd/snigate/%s differs from the generated CRD: run scripts/generate.sh", filepath.Base(g))
		}
	}
}
