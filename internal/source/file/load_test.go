package file

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/resources"
)

const gateway = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
spec:
  gatewayClassName: snigate
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls:
      mode: Passthrough
`

func TestDecodeKinds(t *testing.T) {
	in := `# leading comment
---
` + gateway + `---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: snigate
  namespace: ignored
spec:
  controllerName: snigate.dev/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata:
  name: db
  namespace: apps
  generation: 4
spec:
  parentRefs: [{name: gw, namespace: default}]
  hostnames: [db.example.com]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: tcp}
spec:
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec: {}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: backends}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: apps}]
  to: [{group: "", kind: Service}]
---
# only a comment
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: db}
  spec:
    ports: [{port: 5432}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: db-1
    labels: {kubernetes.io/service-name: db}
  addressType: IPv4
  endpoints: [{addresses: [10.0.0.1]}]
---
apiVersion: v1
kind: Secret
metadata: {name: cert}
type: kubernetes.io/tls
data:
  tls.crt: b2xk
  tls.key: a2V5
stringData:
  tls.crt: new
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: a}}
`
	res, err := Decode("in.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Gateways) != 1 || len(res.GatewayClasses) != 1 || len(res.TLSRoutes) != 1 || len(res.TCPRoutes) != 1 ||
		len(res.HTTPRoutes) != 1 || len(res.ReferenceGrants) != 1 || len(res.Services) != 1 ||
		len(res.EndpointSlices) != 1 || len(res.Secrets) != 1 || len(res.Namespaces) != 1 {
		t.Fatalf("decoded %+v", res)
	}
	gw := res.Gateways[0]
	if gw.Namespace != "default" || gw.Generation != 1 || gw.Spec.Listeners[0].Port != 443 {
		t.Errorf("gateway %+v", gw.ObjectMeta)
	}
	if c := res.GatewayClasses[0]; c.Namespace != "" {
		t.Errorf("cluster-scoped GatewayClass kept namespace %q", c.Namespace)
	}
	if r := res.TLSRoutes[0]; r.Namespace != "apps" || r.Generation != 4 {
		t.Errorf("route %+v", r.ObjectMeta)
	}
	s := res.Secrets[0]
	if string(s.Data["tls.crt"]) != "new" || string(s.Data["tls.key"]) != "key" || s.StringData != nil {
		t.Errorf("secret data %q, stringData %v", s.Data, s.StringData)
	}
	// Document numbers count from the first "---" after a comment-only preamble.
	for key, want := range map[string]string{
		resources.OriginKey("Gateway", "default", "gw"):         "in.yaml#1",
		resources.OriginKey("GatewayClass", "", "snigate"):      "in.yaml#2",
		resources.OriginKey("TLSRoute", "apps", "db"):           "in.yaml#3",
		resources.OriginKey("ReferenceGrant", "backends", "g"):  "in.yaml#6",
		resources.OriginKey("Service", "default", "db"):         "in.yaml#8/items[0]",
		resources.OriginKey("EndpointSlice", "default", "db-1"): "in.yaml#8/items[1]",
		resources.OriginKey("Secret", "default", "cert"):        "in.yaml#9",
		resources.OriginKey("Namespace", "", "apps"):            "in.yaml#10",
	} {
		if got := res.Origins[key]; got != want {
			t.Errorf("origin of %s = %q, want %q", key, got, want)
		}
	}
	if got := resources.DescribeOrigin("in.yaml#8/items[1]"); got != "in.yaml: document 8, items[1]" {
		t.Errorf("DescribeOrigin = %q", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"unknown field": {
			in:   strings.Replace(gateway, "    port: 443", "    port: 443\n    prot: 1", 1),
			want: `x.yaml: document 1 (Gateway default/gw): unknown field "spec.listeners[0].prot"`,
		},
		"wrong type": {
			in:   strings.Replace(gateway, "port: 443", "port: \"443\"", 1),
			want: `x.yaml: document 1 (Gateway default/gw): json: cannot unmarshal string into Go struct field`,
		},
		"duplicate key": {
			in:   "# comment\n---\n" + strings.Replace(gateway, "  name: gw\n", "  name: gw\n  name: gw2\n", 1),
			want: `line 7: key "name" already set in map`,
		},
		"unknown kind": {
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
			want: `x.yaml: document 1: unsupported kind v1 ConfigMap`,
		},
		"old version": {
			in:   "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {name: c}\n",
			want: `x.yaml: document 1: apiVersion gateway.networking.k8s.io/v1alpha2: unsupported version for TLSRoute, use gateway.networking.k8s.io/v1`,
		},
		"no name": {
			in:   "apiVersion: v1\nkind: Service\nmetadata: {namespace: a}\n",
			want: `x.yaml: document 1 (Service): metadata.name: required`,
		},
		"no kind": {
			in:   "apiVersion: v1\nmetadata: {name: a}\n",
			want: `x.yaml: document 1: apiVersion and kind are required`,
		},
		"duplicate object": {
			in:   gateway + "---\n" + gateway,
			want: `x.yaml: document 2 (Gateway default/gw): duplicate object: already defined at x.yaml: document 1`,
		},
		"duplicate across versions": {
			in: "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {name: g}\nspec: {from: [], to: []}\n---\n" +
				"apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: g}\nspec: {from: [], to: []}\n",
			want: `x.yaml: document 2 (ReferenceGrant default/g): duplicate object`,
		},
		"scalar": {
			in:   "just a string\n",
			want: `x.yaml: document 1: not an object`,
		},
		"bad base64": {
			in:   "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {tls.crt: '!!!'}\n",
			want: `x.yaml: document 1 (Secret default/s):`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode("x.yaml", []byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestDecodeReportsEveryError(t *testing.T) {
	in := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n"
	_, err := Decode("x.yaml", []byte(in))
	if err == nil || !strings.Contains(err.Error(), "document 1") || !strings.Contains(err.Error(), "document 2") {
		t.Errorf("error = %v", err)
	}
}

func TestLoadFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", gateway)
	write("a.yml", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n")
	write("c.json", `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}`)
	write(".hidden.yaml", "garbage: [")
	write("notes.txt", "garbage: [")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("sub/x.yaml", "garbage: [")

	res, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Gateways) != 1 || len(res.Services) != 1 || len(res.Namespaces) != 1 {
		t.Fatalf("decoded %+v", res)
	}
	// Size counts the files Load read, and only those.
	readBytes := len(gateway) + len("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n") +
		len(`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}`)
	if got := Size(dir); got != int64(readBytes) {
		t.Errorf("Size(folder) = %d, want %d", got, readBytes)
	}
	if got := Size(filepath.Join(dir, "notes.txt"), dir, filepath.Join(dir, "missing.yaml")); got != int64(readBytes+len("garbage: [")) {
		t.Errorf("Size(file, folder, missing) = %d, want %d", got, readBytes+len("garbage: ["))
	}
	if got := res.Origins[resources.OriginKey("Service", "default", "a")]; got != filepath.Join(dir, "a.yml")+"#1" {
		t.Errorf("origin %q", got)
	}

	// A file given directly is read whatever its name; errors name it.
	write("bad.txt", "apiVersion: v1\nkind: Service\nmetadata: {name: a, bogus: 1}\n")
	_, err = Load(filepath.Join(dir, "bad.txt"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "bad.txt")+": document 1 (Service default/a): unknown field \"metadata.bogus\"") {
		t.Errorf("error = %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing path must be an error")
	}
	if _, err := Load(); err == nil {
		t.Error("no path must be an error")
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("an empty folder must be an error")
	}
}

func TestSplitDocuments(t *testing.T) {
	for in, want := range map[string]int{
		"":                        0,
		"a: 1\n":                  1,
		"---\na: 1\n":             1,
		"# c\n---\na: 1\n":        1,
		"a: 1\n---\nb: 2\n":       2,
		"a: 1\n---\n---\nb: 2\n":  3, // the empty document counts
		"a: 1\r\n---\r\nb: 2\r\n": 2,
		"a: '---'\n--- # x\nb: 1": 2,
		"a: |\n  ---x\n":          1,
	} {
		if got := len(splitDocuments([]byte(in))); got != want {
			t.Errorf("splitDocuments(%q) = %d documents, want %d", in, got, want)
		}
	}
	docs := splitDocuments([]byte("# c\n---\na: 1\n\n--- # x\nb: 2\nc: 3"))
	if len(docs) != 2 || string(docs[0].data) != "a: 1\n\n" || docs[0].line != 3 ||
		string(docs[1].data) != "b: 2\nc: 3" || docs[1].line != 6 {
		t.Errorf("splitDocuments: %+v", docs)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(gateway))
	f.Add([]byte("---\napiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {a: b}}]\n"))
	f.Add([]byte("a: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Decode("f.yaml", data)
		if err == nil && res == nil {
			t.Fatal("nil resources without error")
		}
	})
}
