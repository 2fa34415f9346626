// Package acmetest runs the real certificate machinery beside a test API server: Pebble (an
// ACME server) with its challenge test server as DNS, cert-manager's controller, and a
// stand-in kubelet that runs cert-manager's HTTP-01 solver Pods as local processes, each in
// a network namespace of its own, with their EndpointSlices written.
//
// The binaries come from scripts/install-cert-tools.sh (ToolsDir). A typical test:
//
//	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: ..., GarbageCollector: true})
//	dns := acmetest.StartChallSrv(t)          // every name resolves to what SetIPv4 says
//	pebble := acmetest.StartPebble(t, dns)    // validates HTTP-01 on port 80 of that address
//	acmetest.StartCertManager(t, env, dns)
//	acmetest.RunSolverPods(t, env.Config)
//
// Pebble serves its ACME directory over HTTPS with a certificate of a CA made for the test
// (Pebble.ServerCA, the Issuer's caBundle); the certificates it issues chain to Roots.
package acmetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil"
)

// ToolsDir is where scripts/install-cert-tools.sh leaves the binaries, unless
// SNIGATE_CERT_TOOLS says otherwise.
func ToolsDir() string {
	if d := os.Getenv("SNIGATE_CERT_TOOLS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "snigate", "cert-tools")
}

// RequireTools stops the test (skip, or fail under CI=true) unless every binary is there.
func RequireTools(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"controller", "acmesolver", "pebble", "pebble-challtestsrv"} {
		if _, err := os.Stat(filepath.Join(ToolsDir(), bin)); err != nil {
			testutil.Require(t, "cert-manager and Pebble in "+ToolsDir(),
				fmt.Errorf("%w (run scripts/install-cert-tools.sh)", err))
		}
	}
}

func tool(name string) string { return filepath.Join(ToolsDir(), name) }

// ChallSrv is Pebble's challenge test server used as the test's DNS: every A query gets the
// address SetIPv4 gave (none for AAAA), so test hostnames resolve to the Gateway.
type ChallSrv struct {
	// DNS is the HOST:PORT of its DNS server (UDP and TCP).
	DNS  string
	mgmt string
}

// StartChallSrv starts the challenge test server with only its DNS and management
// interfaces (its own HTTP-01/TLS-ALPN-01 servers off: the Gateway answers those).
func StartChallSrv(t testing.TB) *ChallSrv {
	t.Helper()
	RequireTools(t)
	ports := testutil.FreePorts(t, 2)
	c := &ChallSrv{DNS: addr(ports[0]), mgmt: addr(ports[1])}
	cmd := exec.Command(tool("pebble-challtestsrv"),
		"-dnsserver", c.DNS, "-management", c.mgmt,
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "",
		"-defaultIPv4", "127.0.0.1", "-defaultIPv6", "")
	testutil.StartProcess(t, cmd, "pebble-challtestsrv", func() error { return dialTCP(c.mgmt) })
	return c
}

// SetIPv4 makes every name resolve to ip.
func (c *ChallSrv) SetIPv4(t testing.TB, ip string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"ip": ip})
	resp, err := http.Post("http://"+c.mgmt+"/set-default-ipv4", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("challtestsrv set-default-ipv4: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("challtestsrv set-default-ipv4: %s", resp.Status)
	}
}

// Pebble is a running ACME server.
type Pebble struct {
	// Directory is the ACME directory URL (https).
	Directory string
	// ServerCA is the PEM of the CA of Pebble's own HTTPS certificate.
	ServerCA []byte
	mgmt     string
	client   *http.Client
}

// StartPebble starts Pebble resolving names through dns and validating HTTP-01 challenges
// on port 80 of the address they resolve to (the Gateway's http listener). Nonces are never
// rejected at random and validation does not sleep: a test waits for issuance, not for
// Pebble's production-like jitter.
func StartPebble(t testing.TB, dns *ChallSrv) *Pebble {
	t.Helper()
	RequireTools(t)
	dir := t.TempDir()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "127.0.0.1", "localhost").WriteFiles(t, dir)
	ports := testutil.FreePorts(t, 3)
	p := &Pebble{
		Directory: "https://" + addr(ports[0]) + "/dir",
		ServerCA:  ca.CertPEM,
		mgmt:      addr(ports[1]),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
		}},
	}
	cfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress":                  addr(ports[0]),
		"managementListenAddress":        p.mgmt,
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       80,
		"tlsPort":                        ports[2], // TLS-ALPN-01 is not used
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":                   "ecdsa",
		"profiles": map[string]any{
			"default": map[string]any{"description": "test", "validityPeriod": 7776000},
		},
	}})
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool("pebble"), "-config", cfgFile, "-dnsserver", dns.DNS)
	cmd.Env = append(testutil.CleanEnv(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	testutil.StartProcess(t, cmd, "pebble", func() error {
		resp, err := p.client.Get(p.Directory)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return p
}

// Roots is the PEM of the root that Pebble's issued certificates chain to (it makes a new
// one at every start, and serves it on its management interface).
func (p *Pebble) Roots(t testing.TB) []byte {
	t.Helper()
	resp, err := p.client.Get("https://" + p.mgmt + "/roots/0")
	if err != nil {
		t.Fatalf("pebble roots: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pebble roots: %s %v", resp.Status, err)
	}
	return b
}

// RootPool is Roots as a pool.
func (p *Pebble) RootPool(t testing.TB) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.Roots(t)) {
		t.Fatal("pebble roots: no certificate")
	}
	return pool
}

// ClusterResourceNamespace is where cert-manager looks for the Secrets of ClusterIssuers.
const ClusterResourceNamespace = "cert-manager"

// StartCertManager runs cert-manager's controller against env's API server as a
// system:masters user, its HTTP-01 self check resolving names through dns, Gateway API
// support on. Its cluster resource namespace is ClusterResourceNamespace (the test creates
// it when it uses a ClusterIssuer). It stops in t.Cleanup; its log is printed on failure.
func StartCertManager(t testing.TB, env *envtest.Environment, dns *ChallSrv) {
	t.Helper()
	RequireTools(t)
	user, err := env.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("cert-manager user: %v", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool("controller"), "--kubeconfig", path,
		"--cluster-resource-namespace", ClusterResourceNamespace,
		"--acme-http01-solver-nameservers", dns.DNS, "--dns01-recursive-nameservers", dns.DNS,
		"--check-retry-period", "1s", "--v", "2")
	cmd.Env = testutil.CleanEnv()
	testutil.StartProcess(t, cmd, "cert-manager controller", nil)
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func dialTCP(a string) error {
	c, err := net.DialTimeout("tcp", a, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// errNotYet marks a Pod that cannot run yet.
var errNotYet = errors.New("not yet")

// flagValue is the value of --name=value or --name value in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// pollContext is a context for one reconcile pass.
func pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 10*time.Second)
}
