package peers

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

func spec(t *testing.T, dir string) Spec {
	leaf := testutil.NewCA(t).Issue(t, "term.test").Cert
	return Spec{
		Dir: filepath.Join(dir, "cfg"), Pass: "127.0.0.1:18443", Term: "127.0.0.1:18444", Admin: "127.0.0.1:18445",
		Routes: []Route{
			{Host: "a.test", Backend: "127.0.0.1:19001"},
			{Host: "b.test", Backend: "127.0.0.1:19002"},
			{Host: "*.w.test", Backend: "127.0.0.1:19001"},
		},
		TermRoutes: []Route{{Host: "term.test", Backend: "127.0.0.1:19003"}},
		TermCert:   leaf,
	}
}

// Every generator writes a configuration (with the plain forwarding listener where the
// peer has one); where the peer is installed, the peer accepts it.
func TestConfigsAreAccepted(t *testing.T) {
	for _, c := range []struct {
		kind      string
		accessLog bool
	}{{"snigate", false}, {"haproxy", false}, {"nginx", false}, {"sniproxy", false},
		{"snigate", true}, {"haproxy", true}, {"nginx", true}} {
		kind := c.kind
		name := kind
		if c.accessLog {
			name += "-access-log"
		}
		t.Run(name, func(t *testing.T) {
			s := spec(t, t.TempDir())
			s.AccessLog = c.accessLog
			if kind == "sniproxy" {
				s.Term = ""
			}
			s.Forward, s.ForwardTo = "127.0.0.1:18446", "127.0.0.1:19004"
			if _, err := Write(kind, "", s); (err == nil) != (kind == "haproxy" || kind == "nginx") {
				t.Fatalf("with a forwarding listener: %v", err)
			}
			if kind != "haproxy" && kind != "nginx" {
				s.Forward, s.ForwardTo = "", ""
			}
			argv, err := Write(kind, "", s)
			if err != nil {
				t.Fatal(err)
			}
			var check []string
			switch kind {
			case "haproxy":
				check = append([]string{"haproxy", "-c"}, argv[1:]...)
			case "nginx":
				check = append([]string{"nginx", "-t"}, argv[1:]...)
			case "snigate":
				if slices.Contains(argv, "--access-log=false") == c.accessLog {
					t.Fatalf("access log %v: %v", c.accessLog, argv)
				}
				b, _ := os.ReadFile(filepath.Join(s.Dir, "routes.yaml"))
				if strings.Count(string(b), "kind: TLSRoute") != 2 || !strings.Contains(string(b), `"*.w.test"`) {
					t.Fatalf("routes.yaml:\n%s", b)
				}
				return
			default:
				return // sniproxy has no check mode
			}
			_, err = exec.LookPath(check[0])
			testutil.Require(t, check[0]+" (scripts/install-test-deps.sh)", err)
			if os.Getuid() != 0 {
				testutil.Require(t, "root", errors.New(check[0]+" checks its config as root"))
			}
			if out, err := exec.Command(check[0], check[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", check, err, out)
			}
		})
	}
}

func TestRoutesCutIntoSixteens(t *testing.T) {
	dir := t.TempDir()
	var rs []Route
	for i := range 40 {
		rs = append(rs, Route{Host: "h" + string(rune('a'+i%26)) + ".test", Backend: "127.0.0.1:1"})
	}
	p := filepath.Join(dir, "r.yaml")
	if err := WriteSnigateRoutes(p, "x", "pass", rs); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if n := strings.Count(string(b), "kind: TLSRoute"); n != 3 {
		t.Fatalf("%d routes for 40 names, want 3", n)
	}
}
