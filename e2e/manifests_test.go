package e2e

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

// The YAML the tests write is plain Gateway API v1 and core Kubernetes objects, the same a
// user would apply to a cluster. Everything lives in namespace "default".

const (
	gatewayName = "gw"
	servicePort = 8443 // the Service port routes refer to; EndpointSlices carry the real one
)

// listener is one Gateway listener of protocol TLS.
type listener struct {
	name     string
	port     int
	hostname string   // empty: no hostname
	mode     string   // "Passthrough" or "Terminate"
	certs    []string // Secret names, for Terminate
}

func passthrough(name string, port int, hostname string) listener {
	return listener{name: name, port: port, hostname: hostname, mode: "Passthrough"}
}

func terminate(name string, port int, hostname string, secrets ...string) listener {
	return listener{name: name, port: port, hostname: hostname, mode: "Terminate", certs: secrets}
}

// gatewayYAML is the Gateway "gw" bound to 127.0.0.1 with the given listeners.
func gatewayYAML(ls ...listener) string { return namedGatewayYAML(gatewayName, ls...) }

// namedGatewayYAML is a Gateway bound to 127.0.0.1 with the given listeners.
func namedGatewayYAML(name string, ls ...listener) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: %s
  namespace: default
spec:
  gatewayClassName: snigate
  addresses:
  - type: IPAddress
    value: 127.0.0.1
  listeners:
`, name)
	for _, l := range ls {
		fmt.Fprintf(&b, "  - name: %s\n    protocol: TLS\n    port: %d\n", l.name, l.port)
		if l.hostname != "" {
			fmt.Fprintf(&b, "    hostname: %q\n", l.hostname)
		}
		fmt.Fprintf(&b, "    tls:\n      mode: %s\n", l.mode)
		if len(l.certs) > 0 {
			b.WriteString("      certificateRefs:\n")
			for _, c := range l.certs {
				fmt.Fprintf(&b, "      - kind: Secret\n        group: \"\"\n        name: %s\n", c)
			}
		}
		b.WriteString("    allowedRoutes:\n      namespaces:\n        from: Same\n")
	}
	return b.String()
}

// backendRef points at Service service on servicePort; weight < 0 leaves the weight out.
type backendRef struct {
	service string
	weight  int
}

func to(service string) backendRef { return backendRef{service: service, weight: -1} }

// routeYAML is a TLSRoute attached to listener section of the Gateway (all listeners when
// section is empty).
func routeYAML(name, section string, hostnames []string, backends ...backendRef) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata:
  name: %s
  namespace: default
spec:
  parentRefs:
  - name: %s
`, name, gatewayName)
	if section != "" {
		fmt.Fprintf(&b, "    sectionName: %s\n", section)
	}
	b.WriteString("  hostnames:\n")
	for _, h := range hostnames {
		fmt.Fprintf(&b, "  - %q\n", h)
	}
	b.WriteString("  rules:\n  - backendRefs:\n")
	for _, r := range backends {
		fmt.Fprintf(&b, "    - name: %s\n      port: %d\n", r.service, servicePort)
		if r.weight >= 0 {
			fmt.Fprintf(&b, "      weight: %d\n", r.weight)
		}
	}
	return b.String()
}

// serviceYAML is a Service named name whose port servicePort targets port on 127.0.0.1,
// with its EndpointSlice holding one ready endpoint.
func serviceYAML(name string, port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  namespace: default
spec:
  ports:
  - name: tls
    protocol: TCP
    port: %[2]d
    targetPort: %[3]d
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  namespace: default
  labels:
    kubernetes.io/service-name: %[1]s
addressType: IPv4
ports:
- name: tls
  protocol: TCP
  port: %[3]d
endpoints:
- addresses:
  - 127.0.0.1
  conditions:
    ready: true
`, name, servicePort, port)
}

// secretYAML is a kubernetes.io/tls Secret holding c.
func secretYAML(name string, c *testutil.Cert) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %s
  namespace: default
type: kubernetes.io/tls
data:
  tls.crt: %s
  tls.key: %s
`, name, base64.StdEncoding.EncodeToString(c.CertPEM), base64.StdEncoding.EncodeToString(c.KeyPEM))
}

// docs joins YAML documents into one multi-document file.
func docs(ds ...string) string {
	return strings.Join(ds, "---\n")
}

// writeFile writes a file of the config folder atomically: a watcher sees the old content
// or the new, never a half-written file. The temporary file lives outside dir so a watcher
// never loads it.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(dir), ".e2e-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// configDir returns a fresh folder for one gateway's YAML, in a parent of its own so that
// writeFile's temporary files stay out of it.
func configDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// freePorts returns n distinct free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		p := testutil.FreePort(t)
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
		if len(seen) > 10*n {
			t.Fatalf("FreePort keeps returning the same ports: %v", ports)
		}
	}
	return ports
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
