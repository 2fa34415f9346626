package translate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snigate/snigate/internal/engine"
)

// A TLS port whose routes are all DatabaseExposures of an engine whose servers may speak
// first (engine.Label) carries that engine's fix for the data plane's log; a port with a
// route of another engine, or none, carries nothing.
func TestSpeaksFirstHint(t *testing.T) {
	const in = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
spec:
  gatewayClassName: snigate
  listeners:
  - {name: nats, protocol: TLS, port: 4222, tls: {mode: Passthrough}}
  - {name: mixed, protocol: TLS, port: 6379, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: a, namespace: default, labels: {snigate.dev/engine: nats}}
spec:
  parentRefs: [{name: edge, sectionName: nats}]
  hostnames: [a.nats.example.test]
  rules: [{backendRefs: [{name: a, port: 4222}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: b, namespace: default, labels: {snigate.dev/engine: nats}}
spec:
  parentRefs: [{name: edge, sectionName: nats}]
  hostnames: [b.nats.example.test]
  rules: [{backendRefs: [{name: b, port: 4222}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: c, namespace: default, labels: {snigate.dev/engine: nats}}
spec:
  parentRefs: [{name: edge, sectionName: mixed}]
  hostnames: [c.example.test]
  rules: [{backendRefs: [{name: c, port: 4222}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: d, namespace: default, labels: {snigate.dev/engine: redis}}
spec:
  parentRefs: [{name: edge, sectionName: mixed}]
  hostnames: [d.example.test]
  rules: [{backendRefs: [{name: d, port: 6379}]}]
`
	path := filepath.Join(t.TempDir(), "hint.yaml")
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	r := translateFile(t, path)
	nats, _ := engine.Lookup("nats")
	got := map[int32]string{}
	for _, p := range r.Snapshot.Ports {
		got[p.Port] = p.SpeaksFirstHint
	}
	if got[4222] != nats.SpeaksFirstFix || nats.SpeaksFirstFix == "" {
		t.Errorf("port 4222 (NATS routes only): hint %q, want NATS's fix", got[4222])
	}
	if h, ok := got[6379]; !ok || h != "" {
		t.Errorf("port 6379 (NATS and Redis routes): hint %q (present %v), want none", h, ok)
	}
}
