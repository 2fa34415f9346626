package translate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/source/file"
)

func TestIntersect(t *testing.T) {
	for _, tc := range []struct {
		listener, route, want string
		ok                    bool
	}{
		{"", "a.example.com", "a.example.com", true},
		{"", "*.example.com", "*.example.com", true},
		{"a.example.com", "a.example.com", "a.example.com", true},
		{"a.example.com", "b.example.com", "", false},
		{"*.example.com", "a.example.com", "a.example.com", true},
		{"*.example.com", "a.b.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", "", false},
		{"*.example.com", "aexample.com", "", false},
		{"a.example.com", "*.example.com", "a.example.com", true},
		{"a.b.example.com", "*.example.com", "a.b.example.com", true},
		{"example.com", "*.example.com", "", false},
		{"*.example.com", "*.com", "*.example.com", true},
		{"*.com", "*.example.com", "*.example.com", true},
		{"*.example.com", "*.example.com", "*.example.com", true},
		{"*.example.com", "*.example.org", "", false},
		{"*.b.example.com", "*.example.com", "*.b.example.com", true},
	} {
		got, ok := intersect(tc.listener, tc.route)
		if got != tc.want || ok != tc.ok {
			t.Errorf("intersect(%q, %q) = %q, %v; want %q, %v", tc.listener, tc.route, got, ok, tc.want, tc.ok)
		}
	}
}

// The effective hostnames of a route on a listener: each intersection once, in the
// route's order; the route's own list when nothing changes.
func TestEffectiveHostnames(t *testing.T) {
	for _, tc := range []struct {
		listener string
		route    []string
		want     []string
		shared   bool
	}{
		{"", []string{"a.example.com", "*.b.example.com"}, []string{"a.example.com", "*.b.example.com"}, true},
		{"*.example.com", []string{"a.example.com", "b.example.com"}, []string{"a.example.com", "b.example.com"}, true},
		{"", []string{"a.example.com", "a.example.com", "b.example.com"}, []string{"a.example.com", "b.example.com"}, false},
		{"a.example.com", []string{"*.example.com", "a.example.com"}, []string{"a.example.com"}, false},
		{"*.example.com", []string{"a.example.com", "a.other.com", "b.example.com"}, []string{"a.example.com", "b.example.com"}, false},
		{"*.example.com", []string{"a.other.com", "b.example.com"}, []string{"b.example.com"}, false},
		{"a.example.com", []string{"b.example.com"}, []string{}, false},
		{"", nil, nil, true},
	} {
		got := effectiveHostnames(tc.listener, tc.route)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") || len(got) != len(tc.want) {
			t.Errorf("effectiveHostnames(%q, %q) = %q, want %q", tc.listener, tc.route, got, tc.want)
		}
		if shared := len(got) > 0 && &got[0] == &tc.route[0]; shared != (tc.shared && len(got) > 0) {
			t.Errorf("effectiveHostnames(%q, %q): shares the route's list: %v, want %v", tc.listener, tc.route, shared, tc.shared)
		}
	}
}

func TestHostnameProblem(t *testing.T) {
	for h, ok := range map[string]bool{
		"example.com":                    true,
		"*.example.com":                  true,
		"a-b.example.com":                true,
		"xn--bcher-kva.example":          true,
		"localhost":                      true,
		"":                               false,
		"Example.com":                    false,
		"*":                              false,
		"*example.com":                   false,
		"a.*.example.com":                false,
		"-a.example.com":                 false,
		"a_b.example.com":                false,
		"example.com.":                   false,
		strings.Repeat("a.", 127) + "aa": false, // 256 characters
	} {
		if got := hostnameProblem(h, true) == ""; got != ok {
			t.Errorf("hostnameProblem(%q) valid = %v, want %v", h, got, ok)
		}
	}
	if hostnameProblem("10.0.0.1", true) == "" {
		t.Error("an IP must be refused in a TLSRoute hostname")
	}
	if hostnameProblem("10.0.0.1", false) != "" {
		t.Error("the Hostname pattern alone admits an IP-like listener hostname, as the CRD does")
	}
}

// TestInvalidInputNamesFileObjectField checks that a rejected configuration says where.
func TestInvalidInputNamesFileObjectField(t *testing.T) {
	res, err := file.Load("testdata/invalid-input.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := Translate(res, testOptions())
	if r.Snapshot != nil || r.Status != nil {
		t.Fatal("invalid input must give no snapshot and no status")
	}
	var found bool
	for _, err := range r.Errors {
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Fatalf("%v is not an *InputError", err)
		}
		if ie.Kind == "TLSRoute" && ie.Name == "db" && ie.Field == "spec.hostnames[1]" {
			found = true
			want := `testdata/invalid-input.in.yaml: document 3 (TLSRoute default/db): spec.hostnames[1]: "10.0.0.1" must not be an IP address`
			if err.Error() != want {
				t.Errorf("error = %q\nwant    %q", err, want)
			}
		}
	}
	if !found {
		t.Errorf("no error for spec.hostnames[1] of TLSRoute default/db in %v", r.Errors)
	}
}

func TestInputErrorWithoutOrigin(t *testing.T) {
	res := &resources.Resources{TLSRoutes: []*gwv1.TLSRoute{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
		Spec: gwv1.TLSRouteSpec{
			Hostnames: []gwv1.Hostname{"ok.example.com"},
			Rules:     []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Port: ptr[int32](0)}}}}},
		},
	}}}
	r := Translate(res, testOptions())
	if len(r.Errors) != 1 || r.Errors[0].Error() != "TLSRoute ns/r: spec.rules[0].backendRefs[0].port: port 0 out of range 1-65535" {
		t.Fatalf("errors = %v", r.Errors)
	}
}

// TestPortBoundary looks up the golden snapshot the way the proxy does: a hostname routed
// on the 5432 listener finds no route on 443.
func TestPortBoundary(t *testing.T) {
	r := translateFile(t, "testdata/section-port-binding.in.yaml")
	lookup := func(addr, sni string) string {
		p := r.Snapshot.Port(addr)
		if p == nil {
			t.Fatalf("no port %s", addr)
		}
		_, rt := p.Lookup([]byte(sni))
		if rt == nil {
			return ""
		}
		return rt.Name
	}
	if got := lookup("0.0.0.0:5432", "db.example.com"); got != "TLSRoute/default/by-section" {
		t.Errorf("5432 db.example.com -> %q", got)
	}
	if got := lookup("0.0.0.0:443", "db.example.com"); got != "" {
		t.Errorf("443 db.example.com -> %q, want nothing", got)
	}
	if got := lookup("0.0.0.0:443", "web.example.com"); got != "TLSRoute/default/by-port" {
		t.Errorf("443 web.example.com -> %q", got)
	}
}

func TestPrecedenceLookup(t *testing.T) {
	r := translateFile(t, "testdata/precedence.in.yaml")
	p := r.Snapshot.Port("0.0.0.0:443")
	for sni, want := range map[string]string{
		"a.example.com":      "default/gw/exact TLSRoute/default/spread",
		"x.b.example.com":    "default/gw/wild-b TLSRoute/default/spread",
		"y.b.example.com":    "default/gw/wild-b ",
		"shared.example.com": "default/gw/wild TLSRoute/default/old",
		"tie.example.com":    "default/gw/wild TLSRoute/alpha/zzz",
		"tie-ab.example.com": "default/gw/wild TLSRoute/default/tie-a",
		"other.example.com":  "default/gw/wild TLSRoute/default/wild-route",
		"example.com":        "default/gw/any ",
		"other.org":          "default/gw/any TLSRoute/default/spread",
	} {
		l, rt := p.Lookup([]byte(sni))
		got := ""
		if l != nil {
			got = l.Name + " "
		}
		if rt != nil {
			got += rt.Name
		}
		if got != want {
			t.Errorf("%s -> %q, want %q", sni, got, want)
		}
	}
}

func TestWeightsPick(t *testing.T) {
	r := translateFile(t, "testdata/weights.in.yaml")
	_, rt := r.Snapshot.Port("0.0.0.0:443").Lookup([]byte("split.example.com"))
	if rt == nil {
		t.Fatal("no route")
	}
	// 90 main + 10 canary + 0 drained + 1 default + 5 missing + 3 not-ready.
	if rt.TotalWeight != 109 {
		t.Fatalf("TotalWeight = %d", rt.TotalWeight)
	}
	count := map[string]int{}
	for n := range rt.TotalWeight {
		b := rt.Pick(n)
		name := "rejected"
		if b != nil {
			name = b.Name
		}
		count[name]++
	}
	want := map[string]int{"default/main:443": 90, "default/canary:443": 10, "default/default-weight:443": 1, "rejected": 8}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("%s picked %d times, want %d (all: %v)", k, count[k], v, count)
		}
	}
}

// TestTerminateCertificateBySNI runs real handshakes against the Terminate listener of the
// mixed-modes golden: with two certificates, the exact name beats the wildcard listed first.
func TestTerminateCertificateBySNI(t *testing.T) {
	r := translateFile(t, "testdata/mixed-modes.in.yaml")
	l, _ := r.Snapshot.Port("0.0.0.0:443").Lookup([]byte("a.example.com"))
	if l == nil || l.Mode != snapshot.ModeTerminate || l.TLS == nil {
		t.Fatalf("listener %+v", l)
	}
	if l.TLS.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %x", l.TLS.MinVersion)
	}
	for sni, want := range map[string]string{
		"a.example.com":   "a.example.com",
		"A.Example.COM":   "a.example.com",
		"b.example.com":   "*.example.com",
		"x.y.example.com": "*.example.com", // no certificate matches: the best guess
	} {
		if got := servedName(t, l.TLS, sni); got != want {
			t.Errorf("SNI %s: served %s, want %s", sni, got, want)
		}
	}
	// The passthrough listener has no TLS configuration.
	if l, _ := r.Snapshot.Port("0.0.0.0:443").Lookup([]byte("db.example.net")); l == nil || l.TLS != nil || l.Mode != snapshot.ModePassthrough {
		t.Errorf("passthrough listener %+v", l)
	}
}

func servedName(t *testing.T, cfg *tls.Config, sni string) string {
	t.Helper()
	c, s := net.Pipe()
	// Close the raw pipes, not the TLS conns: net.Pipe is unbuffered and the server may be
	// writing session tickets nobody reads.
	defer c.Close()
	defer s.Close()
	go func() { _ = tls.Server(s, cfg).Handshake() }()
	cl := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	if err := cl.Handshake(); err != nil {
		t.Fatalf("handshake %s: %v", sni, err)
	}
	return cl.ConnectionState().PeerCertificates[0].DNSNames[0]
}

func TestNameScore(t *testing.T) {
	pemBytes, err := os.ReadFile("testdata/certs/wild.crt")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pemBytes, mustRead(t, "testdata/certs/wild.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	for sni, want := range map[string]int{"a.example.com": 1, "example.com": 0, "a.b.example.com": 0, "": 0} {
		if got := nameScore(leaf, sni); got != want {
			t.Errorf("nameScore(*.example.com, %q) = %d, want %d", sni, got, want)
		}
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRequireGatewayClass(t *testing.T) {
	res, err := file.Load("testdata/gateways.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.RequireGatewayClass = true
	r := Translate(res, opts)
	if r.Status.Gateway("default", "classless") != nil {
		t.Error("with RequireGatewayClass, a Gateway whose class is absent is not ours")
	}
	if r.Snapshot.Port("127.0.0.10:443") != nil {
		t.Error("the classless Gateway must not be served")
	}
	if r.Status.Gateway("default", "two-addresses") == nil {
		t.Error("a Gateway of our class must still be ours")
	}
}

func TestOptions(t *testing.T) {
	r := Translate(nil, Options{DefaultBindAddress: "not-an-ip"})
	if len(r.Errors) != 1 {
		t.Fatalf("errors = %v", r.Errors)
	}
	res := &resources.Resources{Gateways: []*gwv1.Gateway{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gw", Generation: 3},
		Spec: gwv1.GatewaySpec{GatewayClassName: "x", Listeners: []gwv1.Listener{
			{Name: "tcp", Port: 5432, Protocol: gwv1.TCPProtocolType},
		}},
	}}}
	r = Translate(res, Options{ControllerName: "example.com/c", DefaultBindAddress: "::", Generation: 42})
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	if r.Snapshot.Generation != 42 || r.Snapshot.Port("[::]:5432") == nil {
		t.Errorf("snapshot %+v", r.Snapshot.Describe())
	}
	gs := r.Status.Gateway("default", "gw")
	if gs == nil || gs.Conditions[0].ObservedGeneration != 3 || gs.Conditions[0].LastTransitionTime.IsZero() {
		t.Errorf("gateway status %+v", gs)
	}

	// BindPorts moves the socket, not the listener: the port keeps its listener port.
	r = Translate(res, Options{ControllerName: "example.com/c", BindPorts: map[int32]int32{5432: 15432}})
	if p := r.Snapshot.Port("0.0.0.0:15432"); p == nil || p.Port != 5432 || r.Snapshot.Port("0.0.0.0:5432") != nil {
		t.Errorf("bind ports: snapshot %+v", r.Snapshot.Describe())
	}
}

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"0.0.0.0", "127.0.0.1", true},
		{"127.0.0.1", "0.0.0.0", true},
		{"127.0.0.1", "127.0.0.2", false},
		{"::", "127.0.0.1", true},
		{"::", "::1", true},
		{"0.0.0.0", "::1", false},
		{"::1", "::1", true},
	} {
		if got := overlaps(mustAddr(tc.a), mustAddr(tc.b)); got != tc.want {
			t.Errorf("overlaps(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

func TestSecretTypes(t *testing.T) {
	if _, err := keyPair(&corev1.Secret{Type: corev1.SecretTypeOpaque}); err == nil {
		t.Error("an Opaque Secret must be refused")
	}
}

func translateFile(t *testing.T, name string) *Result {
	t.Helper()
	res, err := file.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	r := Translate(res, testOptions())
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	return r
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
