// Package admin serves snigate's operator endpoints on listeners of their own: /metrics
// (Prometheus), /healthz (the process is alive), /readyz (a configuration is being served),
// / (the status page, for a person in a browser: page.go), /status (the current status of
// every object and the routing table, as JSON) and /debug/pprof. New serves all of them, for
// loopback (--admin, 127.0.0.1:9901 by default); NewPublic only the first three, for a Pod
// network (--metrics), because the page and /status name every tenant's hostnames and
// backends and pprof lets anyone profile the proxy.
//
//	srv := admin.New(m, stateFunc) // or admin.NewPublic
//	go srv.Serve(ln)
package admin

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/translate"
	"github.com/snigate/snigate/internal/trustanchor"
)

// State is what /status returns, /readyz looks at and the status page (/) shows.
type State struct {
	// Ready is true once a configuration has been applied.
	Ready bool `json:"ready"`
	// Generation is the generation of the serving snapshot.
	Generation uint64 `json:"generation"`
	// Draining is true once the process was told to stop: readiness fails while it still
	// accepts connections (--shutdown-grace), then it drains.
	Draining bool `json:"draining,omitempty"`
	// NoTraffic is true when this process carries no connections itself (a controller with
	// --proxy=false, whose provisioned data planes serve the table): its open connection
	// counts are not the gateway's.
	NoTraffic bool `json:"noTraffic,omitempty"`
	// LastApplied is when the serving configuration was applied.
	LastApplied time.Time `json:"lastApplied,omitzero"`
	// LastError is the error of the latest rejected configuration load, if it came after the
	// last applied one; LastRejected is when it came.
	LastError    string    `json:"lastError,omitempty"`
	LastRejected time.Time `json:"lastRejected,omitzero"`
	// Status and Table are the translate stage's status and the snapshot description.
	Status *translate.Status     `json:"status,omitempty"`
	Table  *snapshot.Description `json:"table,omitempty"`
	// Tenants is the status of every TenantGateway: as rendered in memory (standalone
	// mode), or as the cluster holds it. This list and the two below are in namespace/name
	// order.
	Tenants []render.Tenant `json:"tenants,omitempty"`
	// DatabaseExposures is the status of every DatabaseExposure, certificate probes
	// included (rendered in memory, or as the cluster holds it).
	DatabaseExposures []render.Exposure `json:"databaseExposures,omitempty"`
	// TrustAnchors is the status of every TrustAnchor.
	TrustAnchors []trustanchor.Anchor `json:"trustAnchors,omitempty"`
}

// Server is the admin HTTP server.
type Server struct {
	http *http.Server
	mux  *http.ServeMux
}

// New builds the full admin server: the public endpoints (NewPublic) plus the status page,
// /status and /debug/pprof. Those tell every hostname and backend of every tenant and let anyone
// profile the proxy, so serve it on loopback only (the default; in a Pod, `kubectl
// port-forward` reaches it, under Kubernetes' own authorization). state is called on every
// /status and /readyz request.
func New(m *metrics.Metrics, state func() State) *Server {
	mux := publicMux(m, state)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /{$}", servePage(m, state))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(state())
	})
	return newServer(mux)
}

// HandleFunc serves pattern with f as well (before Serve): a mode's own operation, such as
// serve's POST /upgrade.
func (s *Server) HandleFunc(pattern string, f http.HandlerFunc) { s.mux.HandleFunc(pattern, f) }

// NewPublic builds the server for a Pod network: /metrics, /healthz and /readyz, which tell
// nothing about tenants (metric labels name only listeners and routes by name) and are what
// Prometheus and the kubelet need. Every other path is 404.
func NewPublic(m *metrics.Metrics, state func() State) *Server {
	return newServer(publicMux(m, state))
}

func publicMux(m *metrics.Metrics, state func() State) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		switch st := state(); {
		case st.Draining:
			http.Error(w, "stopping: draining connections", http.StatusServiceUnavailable)
			return
		case !st.Ready:
			http.Error(w, "no configuration applied yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

func newServer(mux *http.ServeMux) *Server {
	return &Server{http: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, mux: mux}
}

// Protect puts guard in front of every path (authentication and authorization of each
// request, for example a Kubernetes TokenReview and SubjectAccessReview) and makes the
// server speak TLS with cert, so the bearer tokens it reads never cross a network in clear.
// Call it before Serve.
func (s *Server) Protect(guard func(http.Handler) (http.Handler, error), cert tls.Certificate) error {
	h, err := guard(s.http.Handler)
	if err != nil {
		return err
	}
	s.http.Handler = h
	s.http.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return nil
}

// Serve serves on ln until Close (with TLS once protected).
func (s *Server) Serve(ln net.Listener) error {
	var err error
	if s.http.TLSConfig != nil {
		err = s.http.ServeTLS(ln, "", "")
	} else {
		err = s.http.Serve(ln)
	}
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

// Close stops the server.
func (s *Server) Close() error { return s.http.Close() }
