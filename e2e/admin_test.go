package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// The admin split, seen from another machine: a client in a network namespace of its own
// reaches the --metrics listener (on the host end of its link, as a Pod network would) for
// /metrics, /healthz and /readyz, gets 404 for /status and /debug/pprof there, and cannot
// connect to --admin at all, which stays on loopback where it serves everything.
func TestAdminSplitFromAnotherAddress(t *testing.T) {
	_, err := exec.LookPath("curl")
	testutil.Require(t, "curl", err)
	client := testutil.NetnsHost(t, "admin-client")
	dir := configDir(t)
	writeFile(t, dir, "gw.yaml", gatewayYAML(passthrough("tls", testutil.FreePort(t), "*.example.test")))
	metricsAddr := net.JoinHostPort(client.HostIP.String(), strconv.Itoa(testutil.FreePort(t)))
	g := startGateway(t, dir, "--bind", "127.0.0.1", "--metrics", metricsAddr)
	_, adminPort, _ := net.SplitHostPort(g.admin)

	// code is the HTTP status curl gets from inside the namespace ("000": no connection).
	code := func(url string) string {
		out, _ := client.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", url).Output()
		return strings.TrimSpace(string(out))
	}
	for path, want := range map[string]string{
		"/metrics": "200", "/healthz": "200", "/readyz": "200",
		"/status": "404", "/debug/pprof/": "404", "/debug/pprof/cmdline": "404",
	} {
		if got := code("http://" + metricsAddr + path); got != want {
			t.Errorf("from %s, GET %s on --metrics: %s, want %s", client.IP, path, got, want)
		}
	}
	// The full admin listener is not there for another address, whichever address it dials.
	for _, host := range []string{client.HostIP.String(), "127.0.0.1"} {
		if got := code("http://" + net.JoinHostPort(host, adminPort) + "/status"); got != "000" {
			t.Errorf("from %s, GET /status on %s:%s (--admin): %s, want no connection", client.IP, host, adminPort, got)
		}
	}
	// On loopback it serves what an operator needs.
	for _, path := range []string{"/status", "/debug/pprof/"} {
		if c, _, err := g.get(path); err != nil || c != 200 {
			t.Errorf("GET %s on --admin (loopback): %d, %v", path, c, err)
		}
	}
}

// --admin-auth=kubernetes on a real API server: `snigate controller`, as the install's
// ServiceAccount with the install's RBAC, serves --admin over TLS and asks the API server
// about every request. No token is 401, a ServiceAccount without the snigate-admin-reader
// ClusterRole is 403, one bound to it reads /status and /debug/pprof; --metrics needs no
// token.
func TestAdminAuthKubernetes(t *testing.T) {
	needBinary(t)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{})
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, nobody := token("reader"), token("nobody")
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader-snigate-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "snigate-admin-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, err := kc.Env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := kubetest.WriteKubeconfig(raw, kubetest.ControllerUser, kubeconfig); err != nil {
		t.Fatal(err)
	}
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	plain := &http.Client{Timeout: 5 * time.Second}
	cmd := exec.Command(snigateBin, "controller", "--kubeconfig", kubeconfig, "--leader-elect=false", "--proxy=false",
		"--admin", admin, "--admin-auth", "kubernetes", "--metrics", metrics)
	testutil.StartProcess(t, cmd, "snigate controller", func() error {
		resp, err := plain.Get("http://" + metrics + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("--metrics /readyz %d", resp.StatusCode)
		}
		return nil
	})
	// The certificate is made at start: nothing to pin, TLS only keeps the token private.
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+admin+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token, who string
		want             int
	}{
		{"/status", "", "no token", http.StatusUnauthorized},
		{"/status", "not-a-token", "a forged token", http.StatusUnauthorized},
		{"/status", nobody, "ServiceAccount nobody", http.StatusForbidden},
		{"/debug/pprof/", nobody, "ServiceAccount nobody", http.StatusForbidden},
		{"/status", reader, "ServiceAccount reader", http.StatusOK},
		{"/debug/pprof/", reader, "ServiceAccount reader", http.StatusOK},
		{"/status", reader, "ServiceAccount reader, from the cache", http.StatusOK},
	} {
		if got := get(c.path, c.token); got != c.want {
			t.Errorf("GET %s as %s: %d, want %d", c.path, c.who, got, c.want)
		}
	}
	// Plain HTTP on the protected listener gets no answer but TLS's.
	if resp, err := plain.Get("http://" + admin + "/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP /status on --admin-auth's listener: 200")
		}
	}
}

func ptr[T any](v T) *T { return &v }
