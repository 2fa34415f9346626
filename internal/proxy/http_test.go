//go:build linux

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// httpBackend starts a plain HTTP backend that answers "name method host path" and the
// request headers it saw, and echoes an Upgrade: echo connection.
func httpBackend(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	ln, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.Flush()
			io.Copy(c, brw)
			return
		}
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Drop-Me", "1")
		fmt.Fprintf(w, "%s %s %s %s xff=%s xfp=%s xfh=%s x-added=%s\n", name, r.Method, r.Host, r.URL.Path,
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Added"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func httpTable(hosts map[string][]*snapshot.HTTPMatch) *snapshot.HTTPTable {
	tbl := &snapshot.HTTPTable{}
	for h, ms := range hosts {
		tbl.Hosts.Add(h, &snapshot.HTTPHost{Matches: ms})
	}
	return tbl
}

func prefix(p string, rule *snapshot.HTTPRule) *snapshot.HTTPMatch {
	return &snapshot.HTTPMatch{PathType: snapshot.PathPrefix, Path: p, Rule: rule}
}

func toBackend(name string, ep netip.AddrPort) *snapshot.HTTPRule {
	return &snapshot.HTTPRule{Route: "HTTPRoute/default/" + name, Backends: route(name, ep)}
}

func TestHTTPSAndPassthroughShareAPort(t *testing.T) {
	p := newProxy(t)
	web := httpBackend(t, "web")
	dbCert := selfSigned(t, "db.example.com")
	db := backend(t, "db", &dbCert)
	gwCert := selfSigned(t, "*.example.com")
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{gwCert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}

	addr := freeAddr(t)
	rule := toBackend("web", web)
	rule.RequestHeaders = &snapshot.HeaderModifier{Set: []snapshot.NameValue{{Name: "X-Added", Value: "yes"}}}
	rule.ResponseHeaders = &snapshot.HeaderModifier{Remove: []string{"X-Drop-Me"}}
	https := &snapshot.Listener{Name: "default/gw/https", Mode: snapshot.ModeTerminate, TLS: tlsCfg,
		HTTP: httpTable(map[string][]*snapshot.HTTPMatch{"*.example.com": {prefix("/app", rule)}})}
	port := tlsPort(addr, map[string]*snapshot.Listener{
		"*.example.com":  https,
		"db.example.com": passthrough("default/gw/db", map[string]*snapshot.Route{"db.example.com": route("db", db)}),
	})
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}

	// Passthrough: the backend's certificate and its greeting.
	c, line, err := dialTLS(t, addr, "db.example.com")
	if err != nil || line != "db" {
		t.Fatalf("passthrough: %q %v", line, err)
	}
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(dbCert.Leaf.SerialNumber) != 0 {
		t.Errorf("passthrough client saw serial %v, want the backend's", got)
	}
	c.Close()

	// HTTPS with HTTP/2 and HTTP/1.1: the listener's certificate, filters, X-Forwarded-*.
	for _, h2 := range []bool{true, false} {
		cl := clientTo(addr, h2)
		resp, err := cl.Get("https://www.example.com/app/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantProto := "HTTP/1.1"
		if h2 {
			wantProto = "HTTP/2.0"
		}
		if resp.Proto != wantProto {
			t.Errorf("proto %s, want %s", resp.Proto, wantProto)
		}
		if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(gwCert.Leaf.SerialNumber) != 0 {
			t.Errorf("HTTPS client saw serial %v, want the listener's", got)
		}
		want := "web GET www.example.com /app/x xff=127.0.0.1 xfp=https xfh=www.example.com x-added=yes\n"
		if resp.StatusCode != 200 || string(body) != want {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
		if resp.Header.Get("X-Drop-Me") != "" || resp.Header.Get("X-Backend") != "web" {
			t.Errorf("response headers not modified as asked: %v", resp.Header)
		}
		resp, err = cl.Get("https://www.example.com/other")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("no match: got %d, want 404", resp.StatusCode)
		}
		// A Host of the passthrough listener on a connection set up for www: 421.
		req, _ := http.NewRequest("GET", "https://www.example.com/app", nil)
		req.Host = "db.example.com"
		resp, err = cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("misdirected: got %d, want 421", resp.StatusCode)
		}
	}

	// Upgrade over HTTPS/1.1.
	tc, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "www.example.com", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(tc, "GET /app/ws HTTP/1.1\r\nHost: www.example.com\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(tc, "ping\n")
	if line, err := br.ReadString('\n'); line != "ping\n" {
		t.Fatalf("upgraded echo: %q %v", line, err)
	}

	// Unknown SNI on the shared port: closed without a byte.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tls.Client(raw, &tls.Config{ServerName: "nope.example.org", InsecureSkipVerify: true}).Handshake()
}

// clientTo returns an HTTP client that connects to addr whatever the URL says.
func clientTo(addr string, h2 bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestPlainHTTPPortRoutesByHostAndRedirects(t *testing.T) {
	p := newProxy(t)
	web := httpBackend(t, "web")
	api := httpBackend(t, "api")
	addr := freeAddr(t)
	redirect := &snapshot.HTTPRule{Route: "HTTPRoute/default/redirect", Redirect: &snapshot.Redirect{Scheme: "https", StatusCode: 301}}
	l := &snapshot.Listener{Name: "default/gw/http", HTTP: httpTable(map[string][]*snapshot.HTTPMatch{
		"www.example.com": {{PathType: snapshot.PathExact, Path: "/login", Rule: redirect}, prefix("/api", toBackend("api", api)), prefix("/", toBackend("web", web))},
		"idle.example.com": {prefix("/", &snapshot.HTTPRule{Route: "HTTPRoute/default/idle",
			Backends: snapshot.NewRoute("idle", []snapshot.Backend{{Name: "idle", Weight: 1, Reason: "NoReadyEndpoints"}})})},
		"bad.example.com": {prefix("/", &snapshot.HTTPRule{Route: "HTTPRoute/default/bad",
			Backends: snapshot.NewRoute("bad", []snapshot.Backend{{Name: "bad", Weight: 1, Reason: "BackendNotFound"}})})},
	})}
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolHTTP}
	port.Listeners.Add("", l)
	if err := p.Apply(snapshot.New(1, []*snapshot.Port{port})); err != nil {
		t.Fatal(err)
	}
	cl := clientTo(addr, false)
	get := func(url string) (int, string, http.Header) {
		t.Helper()
		resp, err := cl.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	if code, body, _ := get("http://www.example.com/api/v1"); code != 200 || !strings.HasPrefix(body, "api GET www.example.com /api/v1 xff=127.0.0.1 xfp=http") {
		t.Errorf("api: %d %q", code, body)
	}
	if code, body, _ := get("http://WWW.example.com:8080/apix"); code != 200 || !strings.HasPrefix(body, "web ") {
		t.Errorf("prefix by segments: %d %q", code, body)
	}
	if code, _, h := get("http://www.example.com/login?next=1"); code != 301 || h.Get("Location") != "https://www.example.com/login?next=1" {
		t.Errorf("redirect: %d %q", code, h.Get("Location"))
	}
	if code, _, _ := get("http://other.example.com/"); code != 404 {
		t.Errorf("unknown host: %d", code)
	}
	if code, _, _ := get("http://idle.example.com/"); code != 503 {
		t.Errorf("no ready endpoints: %d, want 503", code)
	}
	if code, _, _ := get("http://bad.example.com/"); code != 500 {
		t.Errorf("invalid backend: %d, want 500", code)
	}

	// A reload applies to the next request on a kept-alive connection.
	l2 := &snapshot.Listener{Name: "default/gw/http", HTTP: httpTable(map[string][]*snapshot.HTTPMatch{
		"www.example.com": {prefix("/", toBackend("api", api))}})}
	port2 := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolHTTP}
	port2.Listeners.Add("", l2)
	if err := p.Apply(snapshot.New(2, []*snapshot.Port{port2})); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get("http://www.example.com/login"); code != 200 || !strings.HasPrefix(body, "api ") {
		t.Errorf("after reload: %d %q", code, body)
	}
}
