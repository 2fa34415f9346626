package admin

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/translate"
)

var pageNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// pageState is a gateway with a passthrough port of n routes, an HTTP redirect, a Gateway
// whose listener is conflicted, a DatabaseExposure whose certificate expires in three days,
// and a rejected reload.
func pageState(n int, now time.Time) State {
	l := snapshot.ListenerDescription{Name: "db/gw/tls-postgres", Mode: snapshot.ModePassthrough}
	for i := range n {
		l.Routes = append(l.Routes, snapshot.RouteDescription{
			Hostname: fmt.Sprintf("pg%d.db.example.test", i), Name: fmt.Sprintf("TLSRoute/db/pg%d", i),
			Backends: []snapshot.BackendDescription{{Name: "db/pg:5432", Weight: 1, Endpoints: []string{"10.0.0.1:5432"}, ProxyProtocol: "v2 authority"}},
		})
	}
	// A hostname is the tenant's to choose: the page must escape it.
	l.Routes = append(l.Routes, snapshot.RouteDescription{Hostname: "<b>x</b>.example.test", Name: "TLSRoute/db/odd"})
	httpL := snapshot.ListenerDescription{Name: "db/gw/http", HTTP: []snapshot.HTTPHostDescription{{Hostname: "*.example.test",
		Matches: []snapshot.HTTPMatchDescription{{Path: "PathPrefix /", Route: "HTTPRoute/db/redirect", Redirect: &snapshot.Redirect{Scheme: "https", StatusCode: 301}}}}}}
	notAfter := metav1.NewTime(now.Add(72*time.Hour + time.Minute))
	return State{
		Ready: true, Generation: 9, LastApplied: now.Add(-time.Minute),
		LastError: `examples/db.yaml: TLSRoute db/pg: spec.hostnames[0]: Invalid value: "-": not a DNS name`, LastRejected: now.Add(-5 * time.Second),
		Table: &snapshot.Description{Ports: []snapshot.PortDescription{
			{Address: "0.0.0.0:5432", Protocol: snapshot.ProtocolTLS, Listeners: []snapshot.ListenerDescription{l},
				ProxyProtocol: &snapshot.InboundDescription{TrustedRanges: []string{"10.0.0.0/8"}, Required: true}},
			{Address: "0.0.0.0:80", Protocol: snapshot.ProtocolHTTP, Listeners: []snapshot.ListenerDescription{httpL}},
		}},
		Status: &translate.Status{BackendPolicies: []translate.BackendPolicyStatus{{Namespace: "db", Name: "pg-proxy", Status: gwv1.PolicyStatus{
			Ancestors: []gwv1.PolicyAncestorStatus{{AncestorRef: gwv1.ParentReference{Kind: ptr(gwv1.Kind("Service")), Name: "pg"},
				Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted"}}}}}}},
			Gateways: []translate.GatewayStatus{{Namespace: "db", Name: "gw", Status: gwv1.GatewayStatus{
				Conditions: []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed"}},
				Listeners: []gwv1.ListenerStatus{{Name: "tls-postgres", AttachedRoutes: int32(n), Conditions: []metav1.Condition{
					{Type: "Conflicted", Status: metav1.ConditionFalse, Reason: "NoConflicts", Message: "No conflicts"},
					{Type: "ResolvedRefs", Status: metav1.ConditionFalse, Reason: "InvalidCertificateRef", Message: "Secret db/wild is missing"},
				}}},
			}}}},
		DatabaseExposures: []render.Exposure{{Namespace: "db", Name: "pg0", Status: v1alpha1.DatabaseExposureStatus{
			Hostnames: []string{"pg0.db.example.test"}, Listener: "tls-postgres", Port: 5432,
			Conditions:        []metav1.Condition{{Type: "CertificateVerified", Status: metav1.ConditionTrue, Reason: "Verified"}},
			ServerCertificate: &v1alpha1.ServerCertificate{Serial: "0a1b", NotAfter: notAfter, CoversHostnames: true},
		}}},
	}
}

func TestBuildPage(t *testing.T) {
	s := samples{routeOpen: map[string]float64{"TLSRoute/db/pg1": 3}, addrOpen: map[string]float64{"0.0.0.0:5432": 3},
		routeRequests: map[string]float64{"HTTPRoute/db/redirect": 12}}
	p := buildPage(pageState(3, pageNow), s, "", pageNow)
	if len(p.Ports) != 2 || len(p.Ports[0].Rows) != 4 || p.Ports[0].Open != 3 || p.Open != 3 {
		t.Fatalf("ports: %+v", p.Ports)
	}
	if r := p.Ports[0].Rows[1]; r.Route != "TLSRoute/db/pg1" || r.Open != 3 || r.Requests != -1 {
		t.Errorf("a TLS route's row: %+v", r)
	}
	if r := p.Ports[1].Rows[0]; r.Redirect != "301 to https://" || r.Requests != 12 || r.Open != -1 {
		t.Errorf("the redirect's row: %+v", r)
	}
	// The filter keeps the matching rows, and the ports and objects that have any.
	p = buildPage(pageState(3, pageNow), s, "pg2", pageNow)
	if len(p.Ports) != 1 || len(p.Ports[0].Rows) != 1 || p.Ports[0].Rows[0].Route != "TLSRoute/db/pg2" || len(p.Gateways) != 0 || len(p.Exposures) != 0 {
		t.Errorf("filtered on pg2: %+v", p)
	}
	// A big table is cut at pageRows, and says how much it left out.
	p = buildPage(pageState(pageRows+99, pageNow), s, "", pageNow)
	if got := len(p.Ports[0].Rows) + len(p.Ports[1].Rows); got != pageRows || p.Hidden["ports"] != 101 {
		t.Errorf("%d routes: %d rows, %d hidden", pageRows+100, got, p.Hidden["ports"])
	}
}

func TestHealth(t *testing.T) {
	for _, c := range []struct {
		typ    string
		status metav1.ConditionStatus
		want   string
	}{
		{"Accepted", metav1.ConditionTrue, "good"}, {"Accepted", metav1.ConditionFalse, "bad"},
		{"Conflicted", metav1.ConditionFalse, "good"}, {"Conflicted", metav1.ConditionTrue, "bad"},
		{"OverlappingTLSConfig", metav1.ConditionFalse, "good"}, {"Ready", metav1.ConditionUnknown, "unknown"},
	} {
		if got := health(metav1.Condition{Type: c.typ, Status: c.status}); got != c.want {
			t.Errorf("%s=%s: %s, want %s", c.typ, c.status, got, c.want)
		}
	}
}

// The page served by the full admin server: what it shows, that it escapes what tenants
// wrote, its headers, and that the public server has no page.
func TestPageServed(t *testing.T) {
	m := metrics.New()
	m.RouteActive.WithLabelValues("TLSRoute/db/pg1").Set(2)
	st := pageState(2, time.Now())
	srv := New(m, func() State { return st })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`class="mono route">TLSRoute/db/pg1</td>`,
		`<td class="n">2</td>`,
		`&lt;b&gt;x&lt;/b&gt;.example.test`,
		`expires in 3d`, `class="expiring"`,
		`Secret db/wild is missing`,
		`not a DNS name`,
		`301 to https://`,
		`PROXY v2 authority`,
		`reads PROXY headers from 10.0.0.0/8 (required)`,
		`<span class="mono">Service db/pg</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "<b>x</b>") || strings.Contains(body, "<script") {
		t.Error("the page carries markup a tenant wrote, or a script")
	}
	if strings.Contains(body, `<span class="msg">No conflicts</span>`) {
		t.Error("a good condition's message is shown as a problem")
	}
	if _, body := get("/?refresh=0"); strings.Contains(body, `http-equiv="refresh"`) {
		t.Error("refresh=0 still reloads")
	}
	if resp, _ := get("/?refresh=soon"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("refresh=soon: %d, want 400", resp.StatusCode)
	}
	if resp, _ := get("/nothing-here"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", resp.StatusCode)
	}
	pub := NewPublic(m, func() State { return st })
	pln, _ := net.Listen("tcp", "127.0.0.1:0")
	go pub.Serve(pln)
	t.Cleanup(func() { pub.Close() })
	if resp, err := http.Get("http://" + pln.Addr().String() + "/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / on the public server: %v %v, want 404", resp.StatusCode, err)
	}
}

// A controller whose data planes carry the traffic says so, instead of showing its own
// (empty) connection counts as the gateway's.
func TestPageNoTraffic(t *testing.T) {
	st := pageState(1, time.Now())
	st.NoTraffic = true
	var b strings.Builder
	if err := pageTemplate.Execute(&b, buildPage(st, samples{}, "", time.Now())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `id="no-traffic"`) || strings.Contains(b.String(), "<span>open connections <b>") {
		t.Error("a process with no traffic of its own is shown as serving")
	}
}

func ptr[T any](v T) *T { return &v }
