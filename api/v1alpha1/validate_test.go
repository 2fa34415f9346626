package v1alpha1_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
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
type validationCase struct {
	name  string
	spec  string
	field string
	kind  string // "" is TenantGateway
}

var validationCases = slices.Concat(tenantGatewayCases, crossNamespaceCases, databaseExposureCases, trustAnchorCases, policyCases, accessCases)

var tenantGatewayCases = []validationCase{
	{"minimal", `apex: acme.example.com`, "", ""},
	{"everything", `
apex: acme.example.com
gatewayClassName: snigate
certificates: {mode: dns01, dns01: {rfc2136: {nameserver: "192.0.2.53"}}}
tlsPassthroughServices: [vault, argocd]
tlsPassthroughListeners:
- {name: pg, port: 5432, hostname: "*.pg.acme.example.com"}
- {name: redis, port: 6379, hostname: redis.acme.example.com}
- {name: apex, port: 9000, hostname: acme.example.com}
attachedNamespaces: [monitoring]`, "", ""},
	{"apex missing", `gatewayClassName: snigate`, "spec.apex", ""},
	{"apex upper case", `apex: Acme.example.com`, "spec.apex", ""},
	{"apex wildcard", `apex: "*.example.com"`, "spec.apex", ""},
	{"listener name not a label", `
apex: a.example.com
tlsPassthroughListeners: [{name: Pg, port: 5432, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].name", ""},
	{"listener names duplicate", `
apex: a.example.com
tlsPassthroughListeners:
- {name: pg, port: 5432, hostname: pg.a.example.com}
- {name: pg, port: 5433, hostname: pg2.a.example.com}`, "spec.tlsPassthroughListeners[1]", ""},
	{"listener name equals a service", `
apex: a.example.com
tlsPassthroughServices: [pg]
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners", ""},
	{"port 0", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 0, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port", ""},
	{"port 65536", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 65536, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port", ""},
	{"port 443", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 443, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port", ""},
	{"port 80", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 80, hostname: pg.a.example.com}]`, "spec.tlsPassthroughListeners[0].port", ""},
	{"ports duplicate", `
apex: a.example.com
tlsPassthroughListeners:
- {name: pg, port: 5432, hostname: pg.a.example.com}
- {name: pg2, port: 5432, hostname: pg2.a.example.com}`, "spec.tlsPassthroughListeners", ""},
	{"hostname outside the apex", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: pg.b.example.com}]`, "spec.tlsPassthroughListeners", ""},
	{"hostname a suffix but not under the apex", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: pga.example.com}]`, "spec.tlsPassthroughListeners", ""},
	{"hostname wildcard in the middle", `
apex: a.example.com
tlsPassthroughListeners: [{name: pg, port: 5432, hostname: "pg.*.a.example.com"}]`, "spec.tlsPassthroughListeners[0].hostname", ""},
	{"service not a label", `
apex: a.example.com
tlsPassthroughServices: [vault.x]`, "spec.tlsPassthroughServices[0]", ""},
	{"services duplicate", `
apex: a.example.com
tlsPassthroughServices: [vault, vault]`, "spec.tlsPassthroughServices[1]", ""},
	{"attached namespace not a label", `
apex: a.example.com
attachedNamespaces: [Monitoring]`, "spec.attachedNamespaces[0]", ""},
	{"existingSecret without secret", `
apex: a.example.com
certificates: {mode: existingSecret}`, "spec.certificates.wildcardSecretRef", ""},
	{"existingSecret", `
apex: a.example.com
certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard}}`, "", ""},
	{"dns01 without solver or issuer", `
apex: a.example.com
certificates: {mode: dns01}`, "spec.certificates.dns01", ""},
	{"dns01 with an issuer", `
apex: a.example.com
certificates: {mode: dns01, issuerRef: {name: letsencrypt, kind: ClusterIssuer}}`, "", ""},
	{"acme and issuerRef", `
apex: a.example.com
certificates: {acme: {server: "https://acme.example/dir"}, issuerRef: {name: x}}`, "spec.certificates.acme", ""},
	{"acme server not https", `
apex: a.example.com
certificates: {acme: {server: "http://acme.example/dir"}}`, "spec.certificates.acme.server", ""},
	{"acme", `
apex: a.example.com
certificates: {acme: {server: "https://acme.example/dir", email: ops@example.com}}`, "", ""},
	{"unknown mode", `
apex: a.example.com
certificates: {mode: selfSigned}`, "spec.certificates.mode", ""},
}

var crossNamespaceCases = []validationCase{
	{"existingSecret in another namespace", `
apex: a.example.com
certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard, namespace: platform}}`, "", ""},
	{"existingSecret namespace not a label", `
apex: a.example.com
certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard, namespace: Platform}}`, "spec.certificates.wildcardSecretRef.namespace", ""},
}

var databaseExposureCases = []validationCase{
	{"dbx minimal", `
engine: postgres
backendRef: {name: orders, port: 5432}`, "", "DatabaseExposure"},
	{"dbx everything", `
engine: redis
release: cache
backendRef: {name: cache, port: 6379}
tls: {enabled: true}
port: 6380
trustAnchorRef: {name: ca}
tenantGatewayRef: {name: acme, namespace: acme}`, "", "DatabaseExposure"},
	{"dbx tls disabled", `
engine: postgres
backendRef: {name: orders, port: 5432}
tls: {enabled: false}`, "spec.tls.enabled", "DatabaseExposure"},
	{"dbx unknown engine", `
engine: oracle
backendRef: {name: orders, port: 1521}`, "spec.engine", "DatabaseExposure"},
	{"dbx engine missing", `
backendRef: {name: orders, port: 5432}`, "spec.engine", "DatabaseExposure"},
	{"dbx custom without port", `
engine: custom
backendRef: {name: x, port: 7000}`, "spec.port", "DatabaseExposure"},
	{"dbx custom with port", `
engine: custom
port: 7000
backendRef: {name: x, port: 7000}`, "", "DatabaseExposure"},
	{"dbx release with a dot", `
engine: postgres
release: orders.eu
backendRef: {name: orders, port: 5432}`, "spec.release", "DatabaseExposure"},
	{"dbx release starting with a digit", `
engine: postgres
release: 1orders
backendRef: {name: orders, port: 5432}`, "spec.release", "DatabaseExposure"},
	{"dbx port 443", `
engine: postgres
port: 443
backendRef: {name: orders, port: 5432}`, "spec.port", "DatabaseExposure"},
	{"dbx backend port 0", `
engine: postgres
backendRef: {name: orders, port: 0}`, "spec.backendRef.port", "DatabaseExposure"},
	{"dbx backend name upper case", `
engine: postgres
backendRef: {name: Orders, port: 5432}`, "spec.backendRef.name", "DatabaseExposure"},
	{"dbx members", `
engine: kafka
backendRef: {name: events-bootstrap, port: 9093}
members:
- {name: broker-0, backendRef: {name: events-0, port: 9093}}
- {name: broker-1, backendRef: {name: events-1, port: 9093}}`, "", "DatabaseExposure"},
	{"dbx members on a server-first engine pass the CRD (the render refuses them)", `
engine: mariadb
port: 13306
backendRef: {name: db, port: 3306}
members: [{name: replica, backendRef: {name: db-1, port: 3306}}]`, "", "DatabaseExposure"},
	{"dbx member name with a dot", `
engine: kafka
backendRef: {name: events, port: 9093}
members: [{name: broker.0, backendRef: {name: events-0, port: 9093}}]`, "spec.members[0].name", "DatabaseExposure"},
	{"dbx member name starting with a digit", `
engine: mongodb
backendRef: {name: rs, port: 27017}
members: [{name: 0rs, backendRef: {name: rs-0, port: 27017}}]`, "spec.members[0].name", "DatabaseExposure"},
	{"dbx member names duplicate", `
engine: kafka
backendRef: {name: events, port: 9093}
members:
- {name: broker, backendRef: {name: events-0, port: 9093}}
- {name: broker, backendRef: {name: events-1, port: 9093}}`, "spec.members[1]", "DatabaseExposure"},
	{"dbx member backend port 0", `
engine: kafka
backendRef: {name: events, port: 9093}
members: [{name: b0, backendRef: {name: events-0, port: 0}}]`, "spec.members[0].backendRef.port", "DatabaseExposure"},
	{"dbx 129 members", "engine: kafka\nbackendRef: {name: events, port: 9093}\nmembers:\n" + manyMembers(129), "spec.members", "DatabaseExposure"},
	{"dbx 128 members", "engine: kafka\nbackendRef: {name: events, port: 9093}\nmembers:\n" + manyMembers(128), "", "DatabaseExposure"},
	{"dbx member backend name upper case", `
engine: kafka
backendRef: {name: events, port: 9093}
members: [{name: b0, backendRef: {name: Events-0, port: 9093}}]`, "spec.members[0].backendRef.name", "DatabaseExposure"},
}

var trustAnchorCases = []validationCase{
	{"ta minimal", `sourceSecretRef: {name: db-ca}`, "", "TrustAnchor"},
	{"ta everything", `
release: orders
sourceSecretRef: {name: db-ca, key: tls.crt}
readers: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}, {kind: ServiceAccount, name: app, namespace: acme}]`, "", "TrustAnchor"},
	{"ta source missing", `release: orders`, "spec.sourceSecretRef", "TrustAnchor"},
	{"ta release with a dot", `
release: a.b
sourceSecretRef: {name: db-ca}`, "spec.release", "TrustAnchor"},
	{"ta reader without name", `
sourceSecretRef: {name: db-ca}
readers: [{kind: User}]`, "spec.readers[0].name", "TrustAnchor"},
}

// manyMembers is n members b0, b1, … as YAML list entries.
func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "- {name: b%d, backendRef: {name: events-%d, port: 9093}}\n", i, i)
	}
	return b.String()
}

func (c validationCase) yaml(name string) string {
	kind := c.kind
	if kind == "" {
		kind = "TenantGateway"
	}
	return objectYAML(kind, name, c.spec)
}

func objectYAML(kind, name, spec string) string {
	return fmt.Sprintf("apiVersion: snigate.dev/v1alpha1\nkind: %s\nmetadata: {name: %s, namespace: default}\nspec:\n%s\n",
		kind, name, indent(spec))
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
	var meta struct{ Kind string }
	if err := yaml.Unmarshal(js, &meta); err != nil {
		t.Fatal(err)
	}
	var obj interface {
		Default()
		Validate() field.ErrorList
	}
	switch meta.Kind {
	case "TenantGateway":
		obj = &v1alpha1.TenantGateway{}
	case "DatabaseExposure":
		obj = &v1alpha1.DatabaseExposure{}
	case "TrustAnchor":
		obj = &v1alpha1.TrustAnchor{}
	case "BackendPolicy":
		obj = &v1alpha1.BackendPolicy{}
	case "ListenerPolicy":
		obj = &v1alpha1.ListenerPolicy{}
	case "AccessPolicy":
		obj = &v1alpha1.AccessPolicy{}
	default:
		t.Fatalf("kind %q", meta.Kind)
	}
	if strict, err := kjson.UnmarshalStrict(js, obj); err != nil || len(strict) > 0 {
		return false, fmt.Sprint(err, strict)
	}
	obj.Default()
	errs := obj.Validate()
	if len(errs) > 0 {
		return false, errs.ToAggregate().Error()
	}
	return true, ""
}

// The Go rules alone, without an API server: every case as the table says.
func TestValidate(t *testing.T) {
	for _, c := range validationCases {
		t.Run(c.name, func(t *testing.T) {
			ok, msg := goValid(t, c.yaml("x"))
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
	crds, _ := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "snigate", "*.yaml"))
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: crds})
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range validationCases {
		t.Run(c.name, func(t *testing.T) {
			doc := c.yaml(fmt.Sprintf("case-%d", i))
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

var policyCases = []validationCase{
	{"backend policy v1", `
targetRefs: [{group: "", kind: Service, name: pg}]
proxyProtocol: {version: v1}`, "", "BackendPolicy"},
	{"backend policy v2 with TLVs", `
targetRefs: [{group: "", kind: Service, name: pg}, {group: "", kind: Service, name: nats}]
proxyProtocol: {version: v2, tlvs: [authority, alpn]}`, "", "BackendPolicy"},
	{"backend policy TLVs on v1", `
targetRefs: [{group: "", kind: Service, name: pg}]
proxyProtocol: {version: v1, tlvs: [authority]}`, "spec.proxyProtocol", "BackendPolicy"},
	{"backend policy version v3", `
targetRefs: [{group: "", kind: Service, name: pg}]
proxyProtocol: {version: v3}`, "spec.proxyProtocol.version", "BackendPolicy"},
	{"backend policy unknown TLV", `
targetRefs: [{group: "", kind: Service, name: pg}]
proxyProtocol: {version: v2, tlvs: [sni]}`, "spec.proxyProtocol.tlvs[0]", "BackendPolicy"},
	{"backend policy on a Gateway", `
targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
proxyProtocol: {version: v2}`, "spec.targetRefs", "BackendPolicy"},
	{"backend policy without targets", `
targetRefs: []
proxyProtocol: {version: v2}`, "spec.targetRefs", "BackendPolicy"},
	{"listener policy", `
targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: tls}]
proxyProtocol: {trustedRanges: [10.0.0.0/8, "2001:db8::/32", 192.0.2.7/32], required: true}`, "", "ListenerPolicy"},
	{"listener policy range not a CIDR", `
targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
proxyProtocol: {trustedRanges: [10.0.0.1]}`, "spec.proxyProtocol.trustedRanges", "ListenerPolicy"},
	{"listener policy no ranges", `
targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
proxyProtocol: {trustedRanges: []}`, "spec.proxyProtocol.trustedRanges", "ListenerPolicy"},
	{"listener policy on a Service", `
targetRefs: [{group: "", kind: Service, name: gw}]
proxyProtocol: {trustedRanges: [10.0.0.0/8]}`, "spec.targetRefs", "ListenerPolicy"},
	{"listener policy section not a name", `
targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: "TLS_1"}]
proxyProtocol: {trustedRanges: [10.0.0.0/8]}`, "spec.targetRefs[0].sectionName", "ListenerPolicy"},
}

// manyRanges is a YAML flow list of n distinct /32 ranges.
func manyRanges(n int) string {
	rs := make([]string, n)
	for i := range rs {
		rs[i] = fmt.Sprintf("10.%d.%d.0/24", i/250, i%250)
	}
	return "[" + strings.Join(rs, ", ") + "]"
}

var accessCases = []validationCase{
	{"access policy, everything", `
targetRefs:
- {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: tls}
- {group: gateway.networking.k8s.io, kind: ListenerSet, name: tenant}
- {group: gateway.networking.k8s.io, kind: TLSRoute, name: db}
- {group: gateway.networking.k8s.io, kind: TCPRoute, name: maria}
sourceRanges: [203.0.113.0/24, "2001:db8::/48", 192.0.2.7/32]
deniedRanges: [198.51.100.0/24]
maxConnections: 100
perClient: {maxConnections: 10, connectionsPerMinute: 60, burst: 20, ipv6PrefixLength: 56}`, "", "AccessPolicy"},
	{"access policy, nothing restricted", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]`, "", "AccessPolicy"},
	{"access policy, 256 ranges", "targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]\nsourceRanges: " + manyRanges(256), "", "AccessPolicy"},
	{"access policy, 257 ranges", "targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]\nsourceRanges: " + manyRanges(257), "spec.sourceRanges", "AccessPolicy"},
	{"access policy, source not a CIDR", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
sourceRanges: [10.0.0.1]`, "spec.sourceRanges", "AccessPolicy"},
	{"access policy, denied not a CIDR", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
deniedRanges: [not-a-range/8]`, "spec.deniedRanges", "AccessPolicy"},
	{"access policy, duplicate range", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
sourceRanges: [10.0.0.0/8, 10.0.0.0/8]`, "spec.sourceRanges[1]", "AccessPolicy"},
	{"access policy, maxConnections 0", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
maxConnections: 0`, "spec.maxConnections", "AccessPolicy"},
	{"access policy, per-client rate 0", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
perClient: {connectionsPerMinute: 0}`, "spec.perClient.connectionsPerMinute", "AccessPolicy"},
	{"access policy, per-client empty", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
perClient: {ipv6PrefixLength: 64}`, "spec.perClient", "AccessPolicy"},
	{"access policy, burst without a rate", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
perClient: {maxConnections: 5, burst: 5}`, "spec.perClient", "AccessPolicy"},
	{"access policy, IPv6 prefix 129", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db}]
perClient: {maxConnections: 5, ipv6PrefixLength: 129}`, "spec.perClient.ipv6PrefixLength", "AccessPolicy"},
	{"access policy on a Service", `
targetRefs: [{group: "", kind: Service, name: db}]`, "spec.targetRefs", "AccessPolicy"},
	{"access policy on an HTTPRoute", `
targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]`, "spec.targetRefs", "AccessPolicy"},
	{"access policy, section on a route", `
targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db, sectionName: rule}]`, "spec.targetRefs", "AccessPolicy"},
	{"access policy, no targets", `
targetRefs: []
maxConnections: 5`, "spec.targetRefs", "AccessPolicy"},
	{"exposure access", `
engine: postgres
backendRef: {name: pg, port: 5432}
access: {sourceRanges: [203.0.113.0/24], maxConnections: 50, perClient: {maxConnections: 5}}`, "", "DatabaseExposure"},
	{"exposure access, range not a CIDR", `
engine: postgres
backendRef: {name: pg, port: 5432}
access: {sourceRanges: [203.0.113.0/33]}`, "spec.access.sourceRanges", "DatabaseExposure"},
	{"exposure access, per-client burst 0", `
engine: postgres
backendRef: {name: pg, port: 5432}
access: {perClient: {connectionsPerMinute: 10, burst: 0}}`, "spec.access.perClient.burst", "DatabaseExposure"},
	{"tenant access", `
apex: acme.example.com
access: {deniedRanges: [198.51.100.0/24], maxConnections: 1000}`, "", ""},
	{"tenant access, maxConnections -1", `
apex: acme.example.com
access: {maxConnections: -1}`, "spec.access.maxConnections", ""},
}
