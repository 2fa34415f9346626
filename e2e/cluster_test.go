package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// In cluster mode the runner's metrics move like in standalone mode: `snigate controller`
// against a real API server exports snigate_config_generation, snigate_route_hostnames and
// snigate_config_loads_total, and a route created in the cluster moves them.
func TestClusterModeMetrics(t *testing.T) {
	needBinary(t)
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: kubetest.StandardCRDs(t)})
	kubeconfig := writeKubeconfig(t, env)
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	apply(t, cl, fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: apps}
spec:
  gatewayClassName: snigate
  listeners:
  - {name: tls, protocol: TLS, port: %d, hostname: "*.example.test", tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: a, namespace: apps}
spec:
  parentRefs: [{name: edge}]
  hostnames: [a.example.test]
  rules: [{backendRefs: [{name: a, port: 443}]}]
`, port))

	g := startSnigate(t, "", "controller", "--kubeconfig", kubeconfig, "--gateway", "apps/edge",
		"--leader-elect=false", "--bind", "127.0.0.1")
	first := g.waitGauges(t, "the first translation", func(m map[string]float64) bool {
		return m["snigate_config_generation"] >= 1 && m["snigate_route_hostnames"] == 1 && m[loadsApplied] >= 1
	})

	apply(t, cl, `
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: b, namespace: apps}
spec:
  parentRefs: [{name: edge}]
  hostnames: [b.example.test]
  rules: [{backendRefs: [{name: b, port: 443}]}]
`)
	// The runner sets the gauges as it publishes a configuration and counts the load after,
	// and a scrape reads each series on its own: all three are waited for, as a dashboard
	// would see them settle.
	after := g.waitGauges(t, "the route change", func(m map[string]float64) bool {
		return m["snigate_config_generation"] > first["snigate_config_generation"] &&
			m["snigate_route_hostnames"] == 2 && m[loadsApplied] > first[loadsApplied]
	})
	if gen := g.generation(t); float64(gen) != after["snigate_config_generation"] {
		t.Errorf("/status generation %d, /metrics snigate_config_generation %v", gen, after["snigate_config_generation"])
	}
}

// loadsApplied is the series of configuration loads applied.
const loadsApplied = `snigate_config_loads_total{result="applied"}`

// waitGauges polls /metrics until ok holds for its samples (by series, as written:
// `name` or `name{labels}`) and returns them.
func (g *gateway) waitGauges(t *testing.T, what string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // an API server on a loaded machine is slow to start watches
	var last map[string]float64
	for {
		if code, body, err := g.get("/metrics"); err == nil && code == 200 {
			last = samples(string(body))
			if ok(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /metrics never showed it; last: generation %v, route hostnames %v, loads applied %v\n%s", what,
				last["snigate_config_generation"], last["snigate_route_hostnames"],
				last[loadsApplied], g.logText())
		}
		time.Sleep(pollEvery)
	}
}

// samples parses the Prometheus text format's sample lines into series → value.
func samples(text string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// writeKubeconfig writes a kubeconfig of a cluster admin of env for the binary.
func writeKubeconfig(t *testing.T, env *envtest.Environment) string {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientcmd.Load(kc); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// apply creates the objects of a YAML text in the API server.
func apply(t *testing.T, cl client.Client, yaml string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	kubetest.ApplyFile(t, cl, path)
}
