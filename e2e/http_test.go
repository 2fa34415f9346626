package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/echo"
	"github.com/snigate/snigate/internal/testutil"
)

// startHTTPEcho runs an in-process `snigate echo --http` backend and returns its port.
func startHTTPEcho(t *testing.T, name string) int {
	t.Helper()
	ln := testutil.Listen(t)
	srv := &http.Server{Handler: echo.HTTPHandler(name)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// httpClient connects every request to the gateway port, whatever the URL's host, and
// verifies TLS against ca (nil: plain HTTP only). It does not follow redirects.
func httpClient(port int, ca *testutil.CA, h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: ioTimeout}).DialContext(ctx, network, addr(port))
		},
		ForceAttemptHTTP2: h2,
	}
	if ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool()}
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: ioTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type httpResult struct {
	code  int
	proto string
	reply echo.HTTPReply
	resp  *http.Response
}

func doGet(t *testing.T, c *http.Client, url string) httpResult {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := httpResult{code: resp.StatusCode, proto: resp.Proto, resp: resp}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(body, &r.reply); err != nil {
			t.Fatalf("GET %s: reply %q: %v", url, body, err)
		}
	}
	return r
}

// HTTP and HTTPS listeners next to a passthrough listener: plain HTTP by host and path, a
// redirect to https, HTTPS with the right certificate per SNI over HTTP/1.1 and h2, a
// WebSocket echo, and on the same port a passthrough SNI that reaches the backend's own TLS.
func TestHTTPAndHTTPS(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	wild, exact := ca.Issue(t, "*.web.test"), ca.Issue(t, "app.web.test")
	dbCert := ca.Issue(t, "db.web.test")
	ports := testutil.FreePorts(t, 2)
	httpPort, tlsPort := ports[0], ports[1]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: snigate
  addresses: [{type: IPAddress, value: 127.0.0.1}]
  listeners:
  - {name: http, protocol: HTTP, port: %[1]d}
  - name: https
    protocol: HTTPS
    port: %[2]d
    hostname: "*.web.test"
    tls: {certificateRefs: [{name: wild}, {name: exact}]}
  - {name: db, protocol: TLS, port: %[2]d, hostname: db.web.test, tls: {mode: Passthrough}}
`, httpPort, tlsPort),
		`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: site, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  hostnames: [www.web.test]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: api, port: 8443}]
  - backendRefs: [{name: web, port: 8443}]
`,
		`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: to-https, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  hostnames: [app.web.test]
  rules:
  - filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 301}}]
`,
		`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: https}]
  hostnames: [app.web.test, other.web.test]
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Via, value: snigate}]}
    - type: ResponseHeaderModifier
      responseHeaderModifier: {set: [{name: Strict-Transport-Security, value: max-age=60}]}
    backendRefs: [{name: web, port: 8443}]
`,
		routeYAML("db", "db", []string{"db.web.test"}, to("db")),
		secretYAML("wild", wild), secretYAML("exact", exact),
		serviceYAML("web", startHTTPEcho(t, "web")),
		serviceYAML("api", startHTTPEcho(t, "api")),
		serviceYAML("db", startEcho(t, "echo-db", dbCert)),
	))
	g := startGateway(t, dir)

	plain := httpClient(httpPort, nil, false)
	t.Run("plain HTTP by host and path", func(t *testing.T) {
		for _, tc := range []struct{ url, backend, path string }{
			{"http://www.web.test/api/users?id=1", "api", "/api/users"},
			{"http://www.web.test/apix", "web", "/apix"},
			{"http://WWW.web.test:" + strconv.Itoa(httpPort) + "/", "web", "/"},
		} {
			r := doGet(t, plain, tc.url)
			if r.code != 200 || r.reply.Name != tc.backend || r.reply.Path != tc.path {
				t.Errorf("GET %s: %d from %q path %q, want 200 from %s path %s", tc.url, r.code, r.reply.Name, r.reply.Path, tc.backend, tc.path)
			}
			h := http.Header(r.reply.Headers)
			if h.Get("X-Forwarded-For") != "127.0.0.1" || h.Get("X-Forwarded-Proto") != "http" || h.Get("X-Forwarded-Host") == "" {
				t.Errorf("GET %s: X-Forwarded headers %v", tc.url, h)
			}
		}
		if r := doGet(t, plain, "http://unknown.web.test/"); r.code != 404 {
			t.Errorf("unknown host: %d, want 404", r.code)
		}
	})

	t.Run("redirect to https", func(t *testing.T) {
		r := doGet(t, plain, "http://app.web.test/login?next=%2F")
		if loc := r.resp.Header.Get("Location"); r.code != 301 || loc != "https://app.web.test/login?next=%2F" {
			t.Errorf("got %d Location %q, want 301 https://app.web.test/login?next=%%2F", r.code, loc)
		}
	})

	t.Run("HTTPS certificate per SNI, HTTP/1.1 and h2", func(t *testing.T) {
		for _, h2 := range []bool{false, true} {
			c := httpClient(tlsPort, ca, h2)
			for host, cert := range map[string]*testutil.Cert{"app.web.test": exact, "other.web.test": wild} {
				r := doGet(t, c, "https://"+host+"/x")
				if r.code != 200 || r.reply.Name != "web" {
					t.Fatalf("https://%s: %d %+v", host, r.code, r.reply)
				}
				if got := r.resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(cert.Serial) != 0 {
					t.Errorf("https://%s: certificate serial %v, want %v", host, got, cert.Serial)
				}
				want := "HTTP/1.1"
				if h2 {
					want = "HTTP/2.0"
				}
				if r.proto != want {
					t.Errorf("https://%s: proto %s, want %s", host, r.proto, want)
				}
				h := http.Header(r.reply.Headers)
				if h.Get("X-Via") != "snigate" || h.Get("X-Forwarded-Proto") != "https" {
					t.Errorf("https://%s: backend saw headers %v", host, h)
				}
				if r.resp.Header.Get("Strict-Transport-Security") != "max-age=60" {
					t.Errorf("https://%s: response header modifier not applied: %v", host, r.resp.Header)
				}
			}
		}
	})

	t.Run("passthrough on the same port", func(t *testing.T) {
		s := dialTLS(t, tlsPort, ca.ClientConfig("db.web.test"))
		if got := s.peerSerial(); got.Cmp(dbCert.Serial) != 0 {
			t.Errorf("passthrough serial %v, want the backend's %v", got, dbCert.Serial)
		}
		wantHello(t, s.hello, "echo-db", "db.web.test", "1.3")
		s.roundTrip("ping\n")
		s.finish()
		expectRejectedTLS(t, tlsPort, ca.ClientConfig("db.other.test"))
	})

	t.Run("WebSocket echo over HTTPS", func(t *testing.T) {
		cfg := ca.ClientConfig("app.web.test")
		cfg.NextProtos = []string{"http/1.1"}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", addr(tlsPort), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(ioTimeout))
		key := "dGhlIHNhbXBsZSBub25jZQ=="
		fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: app.web.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != echo.WebSocketAccept(key) {
			t.Fatalf("handshake: %d %v", resp.StatusCode, resp.Header)
		}
		for _, msg := range []string{"hello", strings.Repeat("x", 70000)} {
			if err := echo.WriteFrame(c, 0x1, []byte(msg), true); err != nil {
				t.Fatal(err)
			}
			op, got, err := echo.ReadFrame(br)
			if err != nil || op != 0x1 || string(got) != msg {
				t.Fatalf("echo of %d bytes: op %d, %d bytes, %v", len(msg), op, len(got), err)
			}
		}
	})

	t.Run("curl", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			testutil.Require(t, "curl", err)
			return
		}
		caFile := ca.WriteFile(t, t.TempDir())
		out, err := exec.Command(curl, "-sS", "--max-time", "10", "--resolve", fmt.Sprintf("www.web.test:%d:127.0.0.1", httpPort),
			fmt.Sprintf("http://www.web.test:%d/api/v1", httpPort)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"name":"api"`) {
			t.Errorf("curl http: %v\n%s", err, out)
		}
		out, err = exec.Command(curl, "-sS", "--max-time", "10", "--http2", "--cacert", caFile,
			"--resolve", fmt.Sprintf("app.web.test:%d:127.0.0.1", tlsPort),
			"-o", "/dev/null", "-w", "%{http_code} %{http_version}",
			fmt.Sprintf("https://app.web.test:%d/", tlsPort)).CombinedOutput()
		if err != nil || string(out) != "200 2" {
			t.Errorf("curl https --http2: %v, got %q, want \"200 2\"", err, out)
		}
	})

	t.Run("metrics and access log", func(t *testing.T) {
		_, body, err := g.get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		n, err := sumMetric(string(body), "snigate_http_requests_total", "route", "HTTPRoute/default/app")
		if err != nil || n < 4 {
			t.Errorf("snigate_http_requests_total{route=HTTPRoute/default/app} = %v (%v), want >= 4", n, err)
		}
		g.waitLog(t, "http request log line", 1, func(rec map[string]any, _ string) bool {
			return rec["msg"] == "http request" && rec["route"] == "HTTPRoute/default/site" && rec["status"] == float64(200)
		})
	})
}
