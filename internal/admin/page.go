package admin

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/translate"
)

// The status page (GET /) is for a person: the same State as /status, laid out as tables,
// with each route's open connections from snigate_route_active_connections. It is rendered
// on the server by html/template (no script, no build step, nothing fetched from elsewhere:
// the Content-Security-Policy forbids it) and reloads itself every refresh seconds
// (?refresh=N, 0 for never). ?q= keeps only the rows whose names or hostnames contain it; at
// most pageRows rows of each table are shown, so a gateway with 100 000 routes still gets a
// page a browser can hold (/status has everything).

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"since":  func(now, t time.Time) string { return ago(now.Sub(t)) },
	"until":  func(now time.Time, t metav1.Time) string { return ago(t.Time.Sub(now)) },
	"soon":   func(now time.Time, t metav1.Time) bool { return t.Time.Sub(now) < 14*24*time.Hour },
	"count":  func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	"join":   strings.Join,
	"health": health,
}).Parse(pageHTML))

// health is how a condition reads: "good", "bad" or "unknown". Most types are good when
// True; Conflicted and OverlappingTLSConfig say a problem, so they are good when False.
func health(c metav1.Condition) string {
	good := metav1.ConditionTrue
	switch c.Type {
	case "Conflicted", "OverlappingTLSConfig":
		good = metav1.ConditionFalse
	}
	switch c.Status {
	case good:
		return "good"
	case metav1.ConditionUnknown:
		return "unknown"
	}
	return "bad"
}

// pageRows is how many rows each table of the page shows at most.
const pageRows = 500

// defaultRefresh is how often the page reloads itself, in seconds.
const defaultRefresh = 5

// page is what the template renders.
type page struct {
	State
	Now     time.Time
	Refresh int
	Query   string
	// Open is snigate_active_connections, all bind addresses together.
	Open  float64
	Ports []portView
	// Hidden counts, per table, the rows the filter kept but pageRows left out.
	Hidden   map[string]int
	Gateways []gatewayView
	Routes   []routeView
	// Policies are the BackendPolicies, ListenerPolicies and AccessPolicies, Parents their
	// ancestors.
	Policies  []routeView
	Tenants   []tenantView
	Exposures []exposureView
	Anchors   []objectView
}

type portView struct {
	Address  string
	Protocol snapshot.Protocol
	Max      int
	Open     float64
	// ProxyIn describes the port's ListenerPolicy ("PROXY from 10.0.0.0/8, required").
	ProxyIn string
	Rows    []routeRow
}

// routeRow is one hostname of one route on one listener (for HTTP listeners, one match).
type routeRow struct {
	Listener, ListenerHost string
	Mode                   snapshot.Mode
	Hostname               string
	Match                  string // HTTP: "PathPrefix / GET"
	Route                  string
	Backends               []snapshot.BackendDescription
	// Redirect is what an HTTP redirect rule answers, in place of backends.
	Redirect string
	// Open is the route's open connections (TLS and TCP routes); Requests its HTTP requests
	// so far (HTTP routes), -1 when it does not apply.
	Open, Requests float64
	// Access are the AccessPolicies a connection must pass (the listener's, then the
	// route's); Refused how many connections they refused on the route so far.
	Access  []snapshot.AccessDescription
	Refused float64
}

type objectView struct {
	Kind, Namespace, Name string
	Conditions            []metav1.Condition
}

type gatewayView struct {
	objectView
	Addresses []string
	Listeners []listenerView
}

type listenerView struct {
	Name       string
	Attached   int32
	Conditions []metav1.Condition
}

type routeView struct {
	objectView
	Parents []parentView
}

type parentView struct {
	Parent     string
	Conditions []metav1.Condition
}

type tenantView struct {
	objectView
	Addresses []string
	Listeners []string
}

type exposureView struct {
	objectView
	Hostnames []string
	Listener  string
	Port      int32
	Cert      *v1alpha1.ServerCertificate
	Access    []v1alpha1.AccessInForce
}

func servePage(m *metrics.Metrics, state func() State) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		refresh := defaultRefresh
		if v := r.URL.Query().Get("refresh"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 3600 {
				http.Error(w, "refresh: want a number of seconds from 0 to 3600", http.StatusBadRequest)
				return
			}
			refresh = n
		}
		p := buildPage(state(), gatherByLabel(m), r.URL.Query().Get("q"), time.Now())
		p.Refresh = refresh
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Nothing but the page itself: no script at all, styles inline, the favicon a data URL.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
		h.Set("X-Content-Type-Options", "nosniff")
		if err := pageTemplate.Execute(w, p); err != nil {
			fmt.Fprintf(w, "<p>rendering the page: %s</p>", template.HTMLEscapeString(err.Error()))
		}
	}
}

// samples are the page's metric values: open connections per route and per bind address,
// HTTP requests per route, and per route the connections its AccessPolicies refused.
type samples struct {
	routeOpen, addrOpen, routeRequests, routeRefused map[string]float64
}

// accessReasons are the reject reasons of the AccessPolicies (package proxy's outcomes).
var accessReasons = map[string]bool{"client_not_allowed": true, "route_connection_limit": true,
	"client_connection_limit": true, "client_rate_limited": true}

// gatherByLabel reads the three families the page shows from the registry, as a scrape
// would: the page shows what Prometheus sees.
func gatherByLabel(m *metrics.Metrics) samples {
	s := samples{routeOpen: map[string]float64{}, addrOpen: map[string]float64{}, routeRequests: map[string]float64{}, routeRefused: map[string]float64{}}
	families, _ := m.Registry.Gather() // a partial gather is still worth showing
	for _, f := range families {
		var into map[string]float64
		var label string
		switch f.GetName() {
		case "snigate_rejected_connections_total":
			for _, mt := range f.GetMetric() {
				if accessReasons[labelValue(mt, "reason")] {
					s.routeRefused[labelValue(mt, "route")] += value(mt)
				}
			}
			continue
		case "snigate_route_active_connections":
			into, label = s.routeOpen, "route"
		case "snigate_active_connections":
			into, label = s.addrOpen, "address"
		case "snigate_http_requests_total":
			into, label = s.routeRequests, "route"
		default:
			continue
		}
		for _, mt := range f.GetMetric() {
			into[labelValue(mt, label)] += value(mt)
		}
	}
	return s
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// buildPage lays st out for the template, keeping the rows that match q.
func buildPage(st State, s samples, q string, now time.Time) page {
	p := page{State: st, Now: now, Query: q, Hidden: map[string]int{}}
	match := func(names ...string) bool {
		if q == "" {
			return true
		}
		for _, n := range names {
			if strings.Contains(n, q) {
				return true
			}
		}
		return false
	}
	// keep adds one row to table unless pageRows are there already.
	rows := map[string]int{}
	keep := func(table string) bool {
		if rows[table] >= pageRows {
			p.Hidden[table]++
			return false
		}
		rows[table]++
		return true
	}
	for _, v := range s.addrOpen {
		p.Open += v
	}
	if st.Table != nil {
		for _, port := range st.Table.Ports {
			pv := portView{Address: port.Address, Protocol: port.Protocol, Max: port.MaxConnections, Open: s.addrOpen[port.Address]}
			if in := port.ProxyProtocol; in != nil {
				pv.ProxyIn = "reads PROXY headers from " + strings.Join(in.TrustedRanges, ", ")
				if in.Required {
					pv.ProxyIn += " (required)"
				}
			}
			for _, l := range port.Listeners {
				for _, rt := range l.Routes {
					if match(l.Name, l.Hostname, rt.Name, rt.Hostname) && keep("ports") {
						pv.Rows = append(pv.Rows, routeRow{Listener: l.Name, ListenerHost: l.Hostname, Mode: l.Mode,
							Hostname: rt.Hostname, Route: rt.Name, Backends: rt.Backends, Open: s.routeOpen[rt.Name], Requests: -1,
							Access: append(slices.Clip(l.Access), rt.Access...), Refused: s.routeRefused[rt.Name]})
					}
				}
				for _, h := range l.HTTP {
					for _, mt := range h.Matches {
						if match(l.Name, l.Hostname, mt.Route, h.Hostname) && keep("ports") {
							pv.Rows = append(pv.Rows, routeRow{Listener: l.Name, ListenerHost: l.Hostname, Mode: l.Mode,
								Hostname: h.Hostname, Match: strings.TrimSpace(mt.Path + " " + mt.Method), Route: mt.Route,
								Backends: mt.Backends, Redirect: redirect(mt.Redirect), Open: -1, Requests: s.routeRequests[mt.Route],
								Access: l.Access, Refused: -1})
						}
					}
				}
			}
			if len(pv.Rows) > 0 || q == "" {
				p.Ports = append(p.Ports, pv)
			}
		}
	}
	if st.Status != nil {
		for _, g := range st.Status.Gateways {
			if !match(g.Namespace, g.Name) || !keep("gateways") {
				continue
			}
			gv := gatewayView{objectView: objectView{"Gateway", g.Namespace, g.Name, g.Status.Conditions}}
			for _, a := range g.Status.Addresses {
				gv.Addresses = append(gv.Addresses, a.Value)
			}
			gv.Listeners = listeners(g.Status.Listeners)
			p.Gateways = append(p.Gateways, gv)
		}
		for _, ls := range st.Status.ListenerSets {
			if !match(ls.Namespace, ls.Name) || !keep("gateways") {
				continue
			}
			gv := gatewayView{objectView: objectView{"ListenerSet", ls.Namespace, ls.Name, ls.Status.Conditions}}
			for _, l := range ls.Status.Listeners {
				gv.Listeners = append(gv.Listeners, listenerView{Name: string(l.Name), Attached: l.AttachedRoutes, Conditions: l.Conditions})
			}
			p.Gateways = append(p.Gateways, gv)
		}
		addRoutes := func(kind, ns, name string, parents []gwv1.RouteParentStatus) {
			if !match(ns, name) || !keep("routes") {
				return
			}
			rv := routeView{objectView: objectView{Kind: kind, Namespace: ns, Name: name}}
			for _, ps := range parents {
				rv.Parents = append(rv.Parents, parentView{Parent: parentName(ps.ParentRef, ns), Conditions: ps.Conditions})
			}
			p.Routes = append(p.Routes, rv)
		}
		for _, r := range st.Status.TLSRoutes {
			addRoutes("TLSRoute", r.Namespace, r.Name, r.Status.Parents)
		}
		for _, r := range st.Status.TCPRoutes {
			addRoutes("TCPRoute", r.Namespace, r.Name, r.Status.Parents)
		}
		for _, r := range st.Status.HTTPRoutes {
			addRoutes("HTTPRoute", r.Namespace, r.Name, r.Status.Parents)
		}
		addPolicy := func(kind string, ps translate.BackendPolicyStatus) {
			if !match(ps.Namespace, ps.Name) || !keep("policies") {
				return
			}
			pv := routeView{objectView: objectView{Kind: kind, Namespace: ps.Namespace, Name: ps.Name}}
			for _, a := range ps.Status.Ancestors {
				pv.Parents = append(pv.Parents, parentView{Parent: parentName(a.AncestorRef, ps.Namespace), Conditions: a.Conditions})
			}
			p.Policies = append(p.Policies, pv)
		}
		for _, pk := range st.Status.Policies() {
			for _, ps := range pk.List {
				addPolicy(pk.Kind, ps)
			}
		}
	}
	for _, tg := range st.Tenants {
		if !match(tg.Namespace, tg.Name) || !keep("tenants") {
			continue
		}
		tv := tenantView{objectView: objectView{"TenantGateway", tg.Namespace, tg.Name, tg.Status.Conditions}}
		for _, a := range tg.Status.Addresses {
			tv.Addresses = append(tv.Addresses, a.Value)
		}
		for _, l := range tg.Status.Listeners {
			tv.Listeners = append(tv.Listeners, fmt.Sprintf("%s:%d", l.Name, l.Port))
		}
		p.Tenants = append(p.Tenants, tv)
	}
	for _, x := range st.DatabaseExposures {
		if !match(append([]string{x.Namespace, x.Name}, x.Status.Hostnames...)...) || !keep("exposures") {
			continue
		}
		p.Exposures = append(p.Exposures, exposureView{objectView: objectView{"DatabaseExposure", x.Namespace, x.Name, x.Status.Conditions},
			Hostnames: x.Status.Hostnames, Listener: x.Status.Listener, Port: x.Status.Port, Cert: x.Status.ServerCertificate,
			Access: x.Status.Access})
	}
	for _, a := range st.TrustAnchors {
		if match(a.Namespace, a.Name) && keep("anchors") {
			p.Anchors = append(p.Anchors, objectView{"TrustAnchor", a.Namespace, a.Name, a.Status.Conditions})
		}
	}
	return p
}

// redirect describes a redirect rule: "302 to https://", "301 to :8443/new".
func redirect(r *snapshot.Redirect) string {
	if r == nil {
		return ""
	}
	to := ""
	if r.Scheme != "" {
		to = r.Scheme + "://"
	}
	to += r.Hostname
	if r.Port != 0 {
		to += ":" + strconv.Itoa(int(r.Port))
	}
	to += r.Path
	if to == "" {
		to = "the same URL"
	}
	return strconv.Itoa(r.StatusCode) + " to " + to
}

func listeners(ls []gwv1.ListenerStatus) []listenerView {
	var out []listenerView
	for _, l := range ls {
		out = append(out, listenerView{Name: string(l.Name), Attached: l.AttachedRoutes, Conditions: l.Conditions})
	}
	return out
}

// parentName is "namespace/name" (or ".../section") of a route's parent.
func parentName(ref gwv1.ParentReference, routeNamespace string) string {
	ns := routeNamespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	name := ns + "/" + string(ref.Name)
	if ref.Kind != nil && *ref.Kind != "Gateway" {
		name = string(*ref.Kind) + " " + name
	}
	if ref.SectionName != nil {
		name += "/" + string(*ref.SectionName)
	}
	return name
}

// ago is d rounded for a person: "3s", "4m", "2h", "12d"; negative d as "-3s".
func ago(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d < time.Minute:
		return sign + strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return sign + strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return sign + strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return sign + strconv.Itoa(int(d/(24*time.Hour))) + "d"
}
