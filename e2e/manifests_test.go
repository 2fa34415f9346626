package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// The YAML the tests write is plain Gateway API v1 and core Kubernetes objects, the same a
// user would apply to a cluster. Everything lives in namespace "default".

const (
	gatewayName = "gw"
	servicePort = 8443 // the Service port routes refer to; EndpointSlices carry the real one
)

// listener is one Gateway listener.
type listener = fixture.Listener

// passthrough and terminate are TLS listeners.
var (
	passthrough = fixture.Passthrough
	terminate   = fixture.Terminate
)

// gatewayYAML is the Gateway "gw" bound to 127.0.0.1 with the given listeners.
func gatewayYAML(ls ...listener) string { return namedGatewayYAML(gatewayName, ls...) }

// namedGatewayYAML is a Gateway bound to 127.0.0.1 with the given listeners.
func namedGatewayYAML(name string, ls ...listener) string {
	return fixture.GatewayYAML("default", name, ls...)
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
	r := fixture.TLSRoute{Namespace: "default", Name: name, Gateway: gatewayName, Section: section, Hostnames: hostnames}
	for _, be := range backends {
		ref := fixture.To(be.service, servicePort)
		if be.weight >= 0 {
			ref.Weight = &be.weight
		}
		r.Backends = append(r.Backends, ref)
	}
	return fixture.TLSRouteYAML(r)
}

// serviceYAML is a Service named name whose port servicePort targets port on 127.0.0.1,
// with its EndpointSlice holding one ready endpoint.
func serviceYAML(name string, port int) string {
	return fixture.ServiceYAML("default", name, servicePort, port, "127.0.0.1")
}

// secretYAML is a kubernetes.io/tls Secret holding c.
func secretYAML(name string, c *testutil.Cert) string {
	return fixture.TLSSecretYAML("default", name, c.Cert)
}

// docs joins YAML documents into one multi-document file.
var docs = fixture.Docs

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

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
