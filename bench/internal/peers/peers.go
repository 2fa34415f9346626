// Package peers turns one route list into equivalent SNI-routing configurations for
// snigate (Gateway API YAML), HAProxy, nginx and sniproxy, and the command lines that run
// them in the foreground.
//
// Every configuration does the same: on Spec.Pass, read the ClientHello, route its SNI
// (exact names, and "*.suffix" wildcards matching one or more labels) to a backend and copy
// bytes both ways; reject unknown names. On Spec.Term (not sniproxy) terminate TLS with
// one ECDSA P-256 certificate and forward plaintext. On Spec.Forward (HAProxy and nginx
// only) forward every connection to Spec.ForwardTo without reading it.
package peers

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/snigate/snigate/internal/testutil/fixture"
)

// Kinds are the proxies the harness knows, in report order.
var Kinds = []string{"snigate", "haproxy", "nginx", "sniproxy"}

// Route sends Host ("a.example" or "*.example") to Backend ("127.0.0.1:port").
type Route struct {
	Host    string
	Backend string
}

// Spec is one proxy configuration.
type Spec struct {
	Dir        string // config files go here
	Pass       string // passthrough listener, 127.0.0.1:port
	Routes     []Route
	Term       string // terminate listener; empty: none
	TermRoutes []Route
	TermCert   *fixture.Cert
	// Forward is a plain TCP listener that forwards every connection, unread, to ForwardTo;
	// empty: none. HAProxy and nginx only: it is how they carry a PostgreSQL session, whose
	// SSLRequest comes before the ClientHello and which they can therefore not route by SNI.
	Forward, ForwardTo string
	Admin              string // snigate's admin listener
	// HostsPerRoute is how many hostnames one TLSRoute carries (Gateway API allows 16).
	HostsPerRoute int
	// Snigate's extra serve flags.
	SnigateFlags []string
	// AccessLog turns on each proxy's access log, one line per connection, written the way
	// each proxy writes it by default: snigate's JSON lines and HAProxy's tcplog lines to
	// standard output, which the harness sends to a file, nginx's to access.log in Dir.
	// sniproxy: not supported.
	AccessLog bool
	// Access, snigate only, is the body (YAML, at the level of spec) of an AccessPolicy put
	// on every route: what a platform pays per connection for a per-database allow-list and
	// limits. Empty: none.
	Access string
}

// BenchAccess is an AccessPolicy body as a platform would give every database: a few allowed
// ranges (the load generator's among them), a denied address, a cap on the route and a
// per-client cap and rate high enough never to refuse the benchmark's own connections, so
// that every connection takes every check and every count.
const BenchAccess = `sourceRanges: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 127.0.0.0/8]
deniedRanges: [127.0.0.254/32]
maxConnections: 1000000
perClient: {maxConnections: 1000000, connectionsPerMinute: 100000000}`

// Write writes the configuration of kind into s.Dir and returns the command line that
// runs it in the foreground (binary is the executable; empty: the name on PATH).
func Write(kind, binary string, s Spec) ([]string, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	if binary == "" {
		binary = kind
	}
	switch kind {
	case "snigate":
		return writeSnigate(binary, s)
	case "haproxy":
		return writeHAProxy(binary, s)
	case "nginx":
		return writeNginx(binary, s)
	case "sniproxy":
		return writeSniproxy(binary, s)
	}
	return nil, fmt.Errorf("unknown proxy %q", kind)
}

type fileWriter struct {
	f   *os.File
	w   *bufio.Writer
	err error
}

func create(path string) *fileWriter {
	f, err := os.Create(path)
	if err != nil {
		return &fileWriter{err: err}
	}
	return &fileWriter{f: f, w: bufio.NewWriterSize(f, 1<<20)}
}

func (w *fileWriter) printf(format string, a ...any) {
	if w.err == nil {
		_, w.err = fmt.Fprintf(w.w, format, a...)
	}
}

func (w *fileWriter) close() error {
	if w.f == nil {
		return w.err
	}
	if err := w.w.Flush(); w.err == nil {
		w.err = err
	}
	if err := w.f.Close(); w.err == nil {
		w.err = err
	}
	return w.err
}

// backends lists the distinct backends of routes, sorted.
func backends(routes ...[]Route) []string {
	var out []string
	for _, rs := range routes {
		for _, r := range rs {
			if !slices.Contains(out, r.Backend) {
				out = append(out, r.Backend)
			}
		}
	}
	slices.Sort(out)
	return out
}

func beName(addr string) string {
	return "be-" + strings.NewReplacer(".", "-", ":", "-").Replace(addr)
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// port is the port of addr ("127.0.0.1:port"), 0 when it has none.
func port(addr string) int {
	_, p := splitAddr(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// --- snigate -------------------------------------------------------------------------------

func writeSnigate(binary string, s Spec) ([]string, error) {
	if s.Forward != "" {
		return nil, fmt.Errorf("snigate: the benchmark has no plain forwarding listener for it (the PostgreSQL test uses its SSLRequest bridge)")
	}
	per := s.HostsPerRoute
	if per <= 0 {
		per = 16
	}
	listeners := []fixture.Listener{fixture.Passthrough("pass", port(s.Pass), "")}
	if s.Term != "" {
		listeners = append(listeners, fixture.Terminate("term", port(s.Term), "", "term-cert"))
	}
	g := create(filepath.Join(s.Dir, "gateway.yaml"))
	g.printf("%s", fixture.GatewayYAML("default", "bench", listeners...))
	if err := g.close(); err != nil {
		return nil, err
	}

	b := create(filepath.Join(s.Dir, "backends.yaml"))
	for i, be := range backends(s.Routes, s.TermRoutes) {
		host, _ := splitAddr(be)
		if i > 0 {
			b.printf("---\n")
		}
		b.printf("%s", fixture.ServiceYAML("default", beName(be), 443, port(be), host))
	}
	if err := b.close(); err != nil {
		return nil, err
	}

	n, err := writeTLSRoutes(filepath.Join(s.Dir, "routes.yaml"), "r", "pass", s.Routes, per)
	if err != nil {
		return nil, err
	}
	if s.Access != "" {
		a := create(filepath.Join(s.Dir, "access.yaml"))
		body := "  " + strings.ReplaceAll(strings.TrimSpace(s.Access), "\n", "\n  ")
		for i := range n {
			if i > 0 {
				a.printf("---\n")
			}
			a.printf("apiVersion: snigate.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: r-%d, namespace: default}\n"+
				"spec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: r-%d}]\n%s\n", i, i, body)
		}
		if err := a.close(); err != nil {
			return nil, err
		}
	}
	if s.Term != "" {
		if _, err := writeTLSRoutes(filepath.Join(s.Dir, "term-routes.yaml"), "t", "term", s.TermRoutes, per); err != nil {
			return nil, err
		}
		sec := create(filepath.Join(s.Dir, "secret.yaml"))
		sec.printf("%s", fixture.TLSSecretYAML("default", "term-cert", s.TermCert))
		if err := sec.close(); err != nil {
			return nil, err
		}
	}
	argv := []string{binary, "serve", "-f", s.Dir, "--admin", s.Admin, "--log-format", "json"}
	if !s.AccessLog {
		argv = append(argv, "--access-log=false")
	}
	return append(argv, s.SnigateFlags...), nil
}

// WriteSnigateRoutes writes routes as TLSRoutes (named prefix-N, attached to the Gateway's
// listener section) into path: the one-route change of the route-scale test.
func WriteSnigateRoutes(path, prefix, section string, routes []Route) error {
	_, err := writeTLSRoutes(path, prefix, section, routes, 16)
	return err
}

// writeTLSRoutes writes routes as TLSRoutes named prefix-N and returns how many.
func writeTLSRoutes(path, prefix, section string, routes []Route, per int) (int, error) {
	w := create(path)
	// Group by backend, then cut into routes of at most per hostnames.
	by := map[string][]string{}
	for _, r := range routes {
		by[r.Backend] = append(by[r.Backend], r.Host)
	}
	n := 0
	for _, be := range backends(routes) {
		hosts := by[be]
		for i := 0; i < len(hosts); i += per {
			chunk := hosts[i:min(i+per, len(hosts))]
			if n > 0 {
				w.printf("---\n")
			}
			w.printf("%s", fixture.TLSRouteYAML(fixture.TLSRoute{
				Namespace: "default", Name: fmt.Sprintf("%s-%d", prefix, n), Gateway: "bench", Section: section,
				Hostnames: chunk, Backends: []fixture.BackendRef{fixture.To(beName(be), 443)},
			}))
			n++
		}
	}
	return n, w.close()
}

// --- HAProxy -------------------------------------------------------------------------------

func writeHAProxy(binary string, s Spec) ([]string, error) {
	exact := filepath.Join(s.Dir, "exact.map")
	wild := filepath.Join(s.Dir, "wild.map")
	em, wm := create(exact), create(wild)
	for _, r := range s.Routes {
		if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
			wm.printf("%s %s\n", suffix, beName(r.Backend)) // map_end: ".example" suffix
		} else {
			em.printf("%s %s\n", r.Host, beName(r.Backend))
		}
	}
	if err := em.close(); err != nil {
		return nil, err
	}
	if err := wm.close(); err != nil {
		return nil, err
	}
	cfg := filepath.Join(s.Dir, "haproxy.cfg")
	w := create(cfg)
	logGlobal, logDefaults := "", ""
	if s.AccessLog {
		logGlobal, logDefaults = "  log stdout format raw local0\n", "  log global\n  option tcplog\n"
	}
	w.printf(`global
  maxconn 9950
  nbthread 1
  pidfile %s/haproxy.pid
%s
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
%s
frontend pass
  bind %s
  tcp-request inspect-delay 5s
  tcp-request content reject unless { req.ssl_hello_type 1 }
  acl exact req.ssl_sni,lower,map(%s) -m found
  acl wild req.ssl_sni,lower,map_end(%s) -m found
  tcp-request content reject unless exact or wild
  use_backend %%[req.ssl_sni,lower,map(%s)] if exact
  use_backend %%[req.ssl_sni,lower,map_end(%s)] if wild
`, s.Dir, logGlobal, logDefaults, s.Pass, exact, wild, exact, wild)
	if s.Term != "" {
		tm := filepath.Join(s.Dir, "term.map")
		t := create(tm)
		for _, r := range s.TermRoutes {
			t.printf("%s %s\n", r.Host, beName(r.Backend))
		}
		if err := t.close(); err != nil {
			return nil, err
		}
		// HAProxy's crt takes the certificate and its key in one file.
		bundle := filepath.Join(s.Dir, "term-bundle.pem")
		if err := os.WriteFile(bundle, append(append([]byte{}, s.TermCert.CertPEM...), s.TermCert.KeyPEM...), 0o644); err != nil {
			return nil, err
		}
		w.printf(`
frontend term
  bind %s ssl crt %s
  tcp-request content reject unless { ssl_fc_sni,lower,map(%s) -m found }
  use_backend %%[ssl_fc_sni,lower,map(%s)]
`, s.Term, bundle, tm, tm)
	}
	if s.Forward != "" {
		w.printf("\nlisten forward\n  bind %s\n  server s %s\n", s.Forward, s.ForwardTo)
	}
	for _, be := range backends(s.Routes, s.TermRoutes) {
		w.printf("\nbackend %s\n  server s %s\n", beName(be), be)
	}
	if err := w.close(); err != nil {
		return nil, err
	}
	return []string{binary, "-W", "-db", "-f", cfg}, nil
}

// --- nginx ---------------------------------------------------------------------------------

func writeNginx(binary string, s Spec) ([]string, error) {
	cfg := filepath.Join(s.Dir, "nginx.conf")
	w := create(cfg)
	accessLog := "access_log off; "
	if s.AccessLog {
		// The stream module has no default format: this one carries what snigate's line does.
		accessLog = "access_log " + filepath.Join(s.Dir, "access.log") + " conn; "
	}
	w.printf(`load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 8000; }
stream {
  map_hash_max_size 262144;
  map_hash_bucket_size 128;
  log_format conn '$remote_addr [$time_iso8601] $protocol $status $bytes_received $bytes_sent '
                  '$session_time "$ssl_preread_server_name" "$upstream_addr"';
  map $ssl_preread_server_name $up {
    hostnames;
`, s.Dir)
	for _, r := range s.Routes {
		w.printf("    %s %s;\n", r.Host, r.Backend)
	}
	w.printf(`    default unix:%[1]s/reject.sock;
  }
  server { listen %[2]s; ssl_preread on; proxy_pass $up; proxy_half_close on; %[3]s}
  server { listen unix:%[1]s/reject.sock; return ""; }
`, s.Dir, s.Pass, accessLog)
	if s.Term != "" {
		w.printf("  map $ssl_server_name $termup {\n    hostnames;\n")
		for _, r := range s.TermRoutes {
			w.printf("    %s %s;\n", r.Host, r.Backend)
		}
		// Readable by everyone: the workers read them after dropping privileges.
		certFile, keyFile, err := s.TermCert.WriteFiles(s.Dir, "term", 0o644)
		if err != nil {
			return nil, err
		}
		w.printf(`    default unix:%[1]s/reject.sock;
  }
  server {
    listen %[2]s ssl;
    ssl_certificate %[3]s;
    ssl_certificate_key %[4]s;
    ssl_protocols TLSv1.2 TLSv1.3;
    proxy_pass $termup;
  }
`, s.Dir, s.Term, certFile, keyFile)
	}
	if s.Forward != "" {
		w.printf("  server { listen %s; proxy_pass %s; proxy_half_close on; }\n", s.Forward, s.ForwardTo)
	}
	w.printf("}\n")
	if err := w.close(); err != nil {
		return nil, err
	}
	return []string{binary, "-p", s.Dir, "-e", filepath.Join(s.Dir, "error.log"), "-c", cfg}, nil
}

// --- sniproxy ------------------------------------------------------------------------------

func writeSniproxy(binary string, s Spec) ([]string, error) {
	if s.Forward != "" {
		return nil, fmt.Errorf("sniproxy: no plain forwarding listener")
	}
	if s.AccessLog {
		return nil, fmt.Errorf("sniproxy: the benchmark does not measure its access log")
	}
	cfg := filepath.Join(s.Dir, "sniproxy.conf")
	w := create(cfg)
	host, port := splitAddr(s.Pass)
	w.printf(`pidfile %[1]s/sniproxy.pid
error_log {
  filename %[1]s/error.log
  priority notice
}
listener %[2]s:%[3]s {
  protocol tls
  table t
}
table t {
`, s.Dir, host, port)
	for _, r := range s.Routes {
		var re string
		if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
			re = "^.+" + regexp.QuoteMeta(suffix) + "$"
		} else {
			re = "^" + regexp.QuoteMeta(r.Host) + "$"
		}
		bh, bp := splitAddr(r.Backend)
		w.printf("  %s %s:%s\n", re, bh, bp)
	}
	w.printf("}\n")
	if err := w.close(); err != nil {
		return nil, err
	}
	return []string{binary, "-f", "-c", cfg}, nil
}
