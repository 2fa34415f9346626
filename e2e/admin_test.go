package e2e

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
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
