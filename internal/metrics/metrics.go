// Package metrics defines snigate's Prometheus metrics in one registry, so the proxy records
// and the admin server exposes the same collectors.
//
//	m := metrics.New()
//	m.Rejected.WithLabelValues("no_sni", "").Inc()
//	http.Handle("/metrics", m.Handler())
package metrics

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds every collector snigate exports.
type Metrics struct {
	Registry *prometheus.Registry

	// Connections counts finished connections by bind address, listener, route, negotiation
	// (tls, postgres, postgres-direct, tcp) and outcome (ok, or a reject reason).
	Connections *prometheus.CounterVec
	// Rejected counts connections closed without a byte sent back, by reason and route (""
	// when the connection was refused before a route was known).
	Rejected *prometheus.CounterVec
	// Active is the number of open connections per bind address.
	Active *prometheus.GaugeVec
	// RouteActive is the number of open connections a TLS or TCP route carries (from the
	// moment a backend was picked for it until it ends), by route.
	RouteActive *prometheus.GaugeVec
	// Bytes counts proxied bytes by route and direction (client_to_backend, backend_to_client).
	Bytes *prometheus.CounterVec
	// HelloSeconds is how long the ClientHello (and any PostgreSQL preamble) took to arrive.
	HelloSeconds prometheus.Histogram
	// DialSeconds is how long connecting to a backend took, by outcome.
	DialSeconds *prometheus.HistogramVec
	// Reloads counts configuration loads by result (applied, rejected).
	Reloads *prometheus.CounterVec
	// Generation is the generation of the snapshot being served.
	Generation prometheus.Gauge
	// Routes is the number of route hostnames in the serving snapshot.
	Routes prometheus.Gauge
	// HTTPRequests counts HTTP requests served by HTTP and HTTPS listeners, by listener,
	// route, method and status code.
	HTTPRequests *prometheus.CounterVec
	// HTTPSeconds is the time from request to the end of the response, by listener and route.
	HTTPSeconds *prometheus.HistogramVec
	// BackendCertificateExpiry is the notAfter of the certificate each DatabaseExposure's
	// backend served to the certificate probe, by exposure namespace and name.
	BackendCertificateExpiry *prometheus.GaugeVec
	// CertificateProbes counts the certificate probe's connections to the DatabaseExposures'
	// backends, by verdict (Verified, MissingDNSNames, Unreachable…).
	CertificateProbes *prometheus.CounterVec
	// StatusWrites counts the status updates this replica sent to the API server, by kind
	// (only the elected replica writes status).
	StatusWrites *prometheus.CounterVec
	// Leader is 1 while this replica holds the leader Lease and writes status, else 0.
	Leader prometheus.Gauge
	// StageSeconds is how long each stage of a change took, by stage: render, translate,
	// complete and dataplane (package pipeline, one observation per run that got that
	// far), and tenant_apply (the cluster's tenant applier, one per pass). Where a change's
	// time goes, at any scale, without a profile.
	StageSeconds *prometheus.HistogramVec
	// Conditions are the status conditions of every TenantGateway, DatabaseExposure and
	// TrustAnchor (snigate_object_condition), replaced as a whole on every configuration.
	Conditions *Conditions
}

// Condition is one status condition of one object.
type Condition struct {
	Kind, Namespace, Name, Type string
	True                        bool
}

// Conditions exports the conditions a function returns when scraped (From): built at each
// scrape from the state then current, so a scrape sees one configuration's list whole, and a
// configuration applied costs nothing here. (Built on every configuration instead, at
// 10 000 exposures the list was a seventh of all the controller allocated while it
// converged, for scrapes that come every 15 s or so.)
type Conditions struct {
	desc   *prometheus.Desc
	source atomic.Pointer[func() []Condition]
}

func newConditions() *Conditions {
	return &Conditions{desc: prometheus.NewDesc("snigate_object_condition",
		"Status conditions of the TenantGateways, DatabaseExposures and TrustAnchors: 1 when True, 0 when False or Unknown (the reason is in their status and on the status page).",
		[]string{"kind", "namespace", "name", "type"}, nil)}
}

// From makes each scrape export the conditions f returns; f must be safe to call from any
// goroutine.
func (c *Conditions) From(f func() []Condition) { c.source.Store(&f) }

// Describe implements prometheus.Collector.
func (c *Conditions) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *Conditions) Collect(ch chan<- prometheus.Metric) {
	f := c.source.Load()
	if f == nil {
		return
	}
	for _, x := range (*f)() {
		v := 0.0
		if x.True {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, x.Kind, x.Namespace, x.Name, x.Type)
	}
}

// New creates the collectors and registers them, with the Go and process collectors, in a
// fresh registry.
// AccessLogDropped exports dropped, the count of access log lines dropped because the log
// output could not keep up, as snigate_access_log_dropped_lines_total.
func (m *Metrics) AccessLogDropped(dropped func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "snigate_access_log_dropped_lines_total",
		Help: "Access log lines dropped because the log output (standard error) could not keep up.",
	}, dropped))
}

// AccessClients exports the per-client table of the AccessPolicies' limits: how many
// clients it tracks (snigate_access_clients_tracked), at most
// (snigate_access_clients_capacity), and how many it evicted to make room
// (snigate_access_client_evictions_total).
func (m *Metrics) AccessClients(t interface {
	Tracked() int
	Capacity() int
	Evictions() uint64
}) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "snigate_access_clients_tracked",
			Help: "Clients the AccessPolicies' per-client limits track now (a bounded table).",
		}, func() float64 { return float64(t.Tracked()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "snigate_access_clients_capacity",
			Help: "Clients the AccessPolicies' per-client limits track at most.",
		}, func() float64 { return float64(t.Capacity()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "snigate_access_client_evictions_total",
			Help: "Clients evicted from the per-client table to make room for others (each loses its partly spent rate).",
		}, func() float64 { return float64(t.Evictions()) }),
	)
}

func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_connections_total",
			Help: "Finished connections by bind address, listener, route, negotiation and outcome.",
		}, []string{"address", "listener", "route", "negotiation", "outcome"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_rejected_connections_total",
			Help: "Connections closed without sending a byte, by reason and, where it was known, route.",
		}, []string{"reason", "route"}),
		Active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snigate_active_connections",
			Help: "Open connections per bind address.",
		}, []string{"address"}),
		RouteActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snigate_route_active_connections",
			Help: "Open connections per TLS or TCP route, from the pick of a backend until they end.",
		}, []string{"route"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_bytes_total",
			Help: "Proxied bytes by route and direction.",
		}, []string{"route", "direction"}),
		HelloSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "snigate_client_hello_seconds",
			Help:    "Time from accept until the ClientHello was complete.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		DialSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "snigate_backend_dial_seconds",
			Help:    "Time to connect to a backend endpoint, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"outcome"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_config_loads_total",
			Help: "Configuration loads by result (applied or rejected).",
		}, []string{"result"}),
		Generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "snigate_config_generation",
			Help: "Generation of the routing snapshot being served.",
		}),
		Routes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "snigate_route_hostnames",
			Help: "Route hostnames in the serving snapshot, over all listeners.",
		}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_http_requests_total",
			Help: "HTTP requests by listener, route, method and status code.",
		}, []string{"listener", "route", "method", "code"}),
		HTTPSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "snigate_http_request_duration_seconds",
			Help:    "Time from an HTTP request until its response ended, by listener and route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"listener", "route"}),
		BackendCertificateExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snigate_backend_certificate_expiry_timestamp_seconds",
			Help: "Unix time the certificate a DatabaseExposure's backend serves expires (notAfter), as the certificate probe last read it.",
		}, []string{"namespace", "name"}),
		CertificateProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_certificate_probes_total",
			Help: "Connections the certificate probe made to DatabaseExposures' backends, by verdict.",
		}, []string{"verdict"}),
		StatusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snigate_status_writes_total",
			Help: "Status updates this replica sent to the API server, by kind of object.",
		}, []string{"kind"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "snigate_leader",
			Help: "1 while this replica holds the leader Lease (writes status and applies what TenantGateways render), else 0.",
		}),
		StageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "snigate_pipeline_stage_seconds",
			Help:    "Time each stage of a configuration change took: render, translate, complete, dataplane (per run) and tenant_apply (per pass of the tenant applier).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"stage"}),
		Conditions: newConditions(),
	}
	r.MustRegister(m.Connections, m.Rejected, m.Active, m.RouteActive, m.Bytes, m.HelloSeconds, m.DialSeconds,
		m.Reloads, m.Generation, m.Routes, m.HTTPRequests, m.HTTPSeconds, m.BackendCertificateExpiry, m.CertificateProbes, m.StatusWrites, m.Leader, m.StageSeconds, m.Conditions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
