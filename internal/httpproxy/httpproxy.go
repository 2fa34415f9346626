// Package httpproxy is the HTTP handler of HTTP and HTTPS listeners: it routes each request
// by the snapshot's HTTP tables, applies the rule's filters and proxies it to a backend with
// httputil.ReverseProxy (streaming both ways, WebSocket and other Upgrade requests included).
//
// It reads only snapshots and imports no Gateway API types. The snapshot is looked up per
// request, so a reload takes effect on the next request of a kept-alive connection:
//
//	h := httpproxy.New(httpproxy.Options{Snapshot: p.Snapshot, Metrics: m, Logger: log})
//	srv := &http.Server{Handler: h, ConnContext: httpproxy.WithConn(addr, false)}
//
// Answers of its own, as the Gateway API asks: no listener, hostname or match → 404; a Host
// that belongs to another listener than the one the TLS SNI chose → 421; a rule without
// backends, or the share of an invalid backend → 500; a valid backend without ready
// endpoints, or none of its endpoints reachable → 503; another upstream failure → 502.
package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/snapshot"
)

// Options configure a Handler.
type Options struct {
	// Snapshot returns the serving snapshot; it is called once per request.
	Snapshot func() *snapshot.Snapshot
	// DialTimeout bounds one connect to a backend endpoint (5 s).
	DialTimeout time.Duration
	// AccessLog writes one log line per request when true.
	AccessLog bool
	Metrics   *metrics.Metrics
	Logger    *slog.Logger
	// Transport overrides the backend transport (tests).
	Transport http.RoundTripper
}

// Handler serves HTTP requests for the ports of the current snapshot.
type Handler struct {
	opts Options
	log  *slog.Logger
	m    *metrics.Metrics
	rp   *httputil.ReverseProxy
}

var _ http.Handler = (*Handler)(nil)

// ReasonNoReadyEndpoints is the snapshot.Backend reason of a valid backend without ready
// endpoints (translate.ReasonNoReadyEndpoints; repeated to keep translate out of the data
// plane).
const ReasonNoReadyEndpoints = "NoReadyEndpoints"

// New returns a handler.
func New(opts Options) *Handler {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	h := &Handler{opts: opts, log: opts.Logger, m: opts.Metrics}
	tr := opts.Transport
	if tr == nil {
		tr = h.transport()
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      tr,
		FlushInterval:  -1, // stream: server-sent events, long polls, gRPC-web
		ModifyResponse: modifyResponse,
		ErrorHandler:   h.proxyError,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	return h
}

// transport dials the endpoint chosen for the request and, when it does not answer, the
// backend's other endpoints in turn.
func (h *Handler) transport() *http.Transport {
	d := &net.Dialer{Timeout: h.opts.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				return c, nil
			}
			st, _ := ctx.Value(stateKey{}).(*state)
			if st == nil || st.backend == nil {
				return nil, err
			}
			for _, ep := range st.backend.Endpoints {
				if ep.String() == addr {
					continue
				}
				c, err2 := d.DialContext(ctx, network, ep.String())
				if err2 == nil {
					st.endpoint = ep.String()
					return c, nil
				}
			}
			return nil, &dialError{err}
		},
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
	}
}

type dialError struct{ err error }

func (e *dialError) Error() string { return "no endpoint reachable: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// ConnInfo is what the HTTP server knows about a connection: the bound address of its port
// and, for HTTPS, the normalized SNI that selected the listener.
type ConnInfo struct {
	Addr string
	SNI  string
	TLS  bool
}

type connKey struct{}

// WithConnInfo stores ci in ctx; use it from http.Server.ConnContext.
func WithConnInfo(ctx context.Context, ci *ConnInfo) context.Context {
	return context.WithValue(ctx, connKey{}, ci)
}

// state is one request's routing result, shared with the Rewrite and ModifyResponse hooks.
type state struct {
	listener string
	rule     *snapshot.HTTPRule
	match    *snapshot.HTTPMatch
	backend  *snapshot.Backend
	endpoint string
}

type stateKey struct{}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	st := &state{}
	outcome := h.serve(rec, r, st)
	code := rec.code
	if code == 0 {
		code = http.StatusOK
		if rec.hijacked {
			code = http.StatusSwitchingProtocols
		}
	}
	route := ""
	if st.rule != nil {
		route = st.rule.Route
	}
	h.m.HTTPRequests.WithLabelValues(st.listener, route, methodLabel(r.Method), strconv.Itoa(code)).Inc()
	h.m.HTTPSeconds.WithLabelValues(st.listener, route).Observe(time.Since(start).Seconds())
	if h.opts.AccessLog {
		attrs := []any{"client", r.RemoteAddr, "listener", st.listener, "proto", r.Proto, "method", r.Method,
			"host", r.Host, "path", r.URL.Path, "route", route}
		if st.match != nil {
			attrs = append(attrs, "rule", st.rule.Index, "match", string(st.match.PathType)+" "+st.match.Path)
		}
		if st.backend != nil {
			attrs = append(attrs, "backend", st.backend.Name, "endpoint", st.endpoint)
		}
		attrs = append(attrs, "status", code, "bytes_out", rec.bytes, "duration", time.Since(start), "outcome", outcome)
		h.log.Info("http request", attrs...)
	}
}

// serve routes and answers one request; it returns the outcome for the access log.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, st *state) string {
	ci, _ := r.Context().Value(connKey{}).(*ConnInfo)
	var snap *snapshot.Snapshot
	if h.opts.Snapshot != nil {
		snap = h.opts.Snapshot()
	}
	if ci == nil || snap == nil {
		http.Error(w, "no route", http.StatusNotFound)
		return "no_route"
	}
	port := snap.Port(ci.Addr)
	if port == nil {
		http.Error(w, "no route", http.StatusNotFound)
		return "no_route"
	}
	var hostBuf [snapshot.MaxHostnameLen]byte
	host, ok := snapshot.NormalizeSNI(hostBuf[:], []byte(hostOnly(r.Host)))
	if !ok {
		http.Error(w, "no route", http.StatusNotFound)
		return "bad_host"
	}
	var l *snapshot.Listener
	if ci.TLS {
		l, _ = port.Listeners.Lookup([]byte(ci.SNI))
		if l != nil {
			if hl, _ := port.Listeners.Lookup(host); hl != l {
				// RFC 9110 §15.5.20: the connection was set up (certificate, listener) for
				// another name; the client must open a new one.
				st.listener = l.Name
				http.Error(w, "misdirected request", http.StatusMisdirectedRequest)
				return "misdirected"
			}
		}
	} else {
		l, _ = port.Listeners.Lookup(host)
	}
	if l == nil || l.HTTP == nil {
		http.Error(w, "no route", http.StatusNotFound)
		return "no_route"
	}
	st.listener = l.Name
	entry, ok := l.HTTP.Hosts.Lookup(host)
	if !ok {
		http.Error(w, "no route", http.StatusNotFound)
		return "no_route"
	}
	m := match(entry, r)
	if m == nil {
		http.Error(w, "no route", http.StatusNotFound)
		return "no_match"
	}
	st.match, st.rule = m, m.Rule
	rule := m.Rule
	if rule.Redirect != nil {
		applyHeaders(w.Header(), rule.ResponseHeaders)
		loc := redirectLocation(r, rule.Redirect, m, port.Port, ci.TLS)
		w.Header().Set("Location", loc)
		w.WriteHeader(rule.Redirect.StatusCode)
		return "redirect"
	}
	b, code := pickBackend(rule.Backends)
	if b == nil {
		applyHeaders(w.Header(), rule.ResponseHeaders)
		http.Error(w, http.StatusText(code), code)
		if code == http.StatusServiceUnavailable {
			return "no_ready_endpoints"
		}
		return "invalid_backend"
	}
	st.backend = b
	st.endpoint = b.Endpoints[rand.IntN(len(b.Endpoints))].String()
	ctx := context.WithValue(r.Context(), stateKey{}, st)
	h.rp.ServeHTTP(w, r.WithContext(ctx))
	return "proxied"
}

// pickBackend chooses a weighted backend, or returns the status to answer with: 500 when the
// rule has no backends or the share belongs to an invalid backend, 503 for a valid backend
// without ready endpoints.
func pickBackend(r *snapshot.Route) (*snapshot.Backend, int) {
	if r == nil || r.TotalWeight <= 0 {
		return nil, http.StatusInternalServerError
	}
	n := rand.Int64N(r.TotalWeight)
	for i := range r.Backends {
		b := &r.Backends[i]
		if b.Weight <= 0 {
			continue
		}
		if n >= int64(b.Weight) {
			n -= int64(b.Weight)
			continue
		}
		switch {
		case b.Reason == ReasonNoReadyEndpoints, b.Reason == "" && len(b.Endpoints) == 0:
			return nil, http.StatusServiceUnavailable
		case b.Reason != "":
			return nil, http.StatusInternalServerError
		}
		return b, 0
	}
	return nil, http.StatusInternalServerError
}

func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(stateKey{}).(*state)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = st.endpoint
	pr.Out.Host = pr.In.Host // the Gateway API keeps the client's Host
	pr.SetXForwarded()
	applyHeaders(pr.Out.Header, st.rule.RequestHeaders)
}

func modifyResponse(resp *http.Response) error {
	if st, _ := resp.Request.Context().Value(stateKey{}).(*state); st != nil {
		applyHeaders(resp.Header, st.rule.ResponseHeaders)
	}
	return nil
}

func (h *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := r.Context().Value(stateKey{}).(*state)
	code := http.StatusBadGateway
	var de *dialError
	if errors.As(err, &de) {
		code = http.StatusServiceUnavailable
	}
	if errors.Is(err, context.Canceled) {
		code = 499 // the client went away; nothing is written
	}
	if st != nil {
		h.log.Warn("http backend failed", "route", st.rule.Route, "backend", st.backend.Name,
			"endpoint", st.endpoint, "error", err)
	}
	if code == 499 {
		if rec, ok := w.(*recorder); ok {
			rec.code = code
		}
		return
	}
	if st != nil {
		applyHeaders(w.Header(), st.rule.ResponseHeaders)
	}
	http.Error(w, http.StatusText(code), code)
}

func applyHeaders(hd http.Header, m *snapshot.HeaderModifier) {
	if m == nil {
		return
	}
	for _, nv := range m.Set {
		hd.Set(nv.Name, nv.Value)
	}
	for _, nv := range m.Add {
		hd.Add(nv.Name, nv.Value)
	}
	for _, n := range m.Remove {
		hd.Del(n)
	}
}

// match returns the first match of the host entry that r satisfies.
func match(e *snapshot.HTTPHost, r *http.Request) *snapshot.HTTPMatch {
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	var query url.Values
	for _, m := range e.Matches {
		switch m.PathType {
		case snapshot.PathExact:
			if path != m.Path {
				continue
			}
		default:
			if !prefixMatches(m.Path, path) {
				continue
			}
		}
		if m.Method != "" && r.Method != m.Method {
			continue
		}
		if !headersMatch(m.Headers, r.Header) {
			continue
		}
		if len(m.Query) > 0 {
			if query == nil {
				query = r.URL.Query()
			}
			if !queryMatches(m.Query, query) {
				continue
			}
		}
		return m
	}
	return nil
}

// prefixMatches reports whether path starts with the prefix by whole segments: "/foo"
// matches "/foo", "/foo/" and "/foo/bar", not "/foobar".
func prefixMatches(prefix, path string) bool {
	if prefix == "/" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}

func headersMatch(want []snapshot.NameValue, h http.Header) bool {
	for _, nv := range want {
		vs := h[nv.Name]
		if len(vs) == 0 {
			return false
		}
		ok := false
		for _, v := range vs {
			if v == nv.Value {
				ok = true
				break
			}
		}
		if !ok && strings.Join(vs, ",") != nv.Value {
			return false
		}
	}
	return true
}

func queryMatches(want []snapshot.NameValue, q url.Values) bool {
	for _, nv := range want {
		vs, ok := q[nv.Name]
		if !ok || len(vs) == 0 || vs[0] != nv.Value {
			return false
		}
	}
	return true
}

// redirectLocation builds the Location of a RequestRedirect as the Gateway API defines it.
func redirectLocation(r *http.Request, rd *snapshot.Redirect, m *snapshot.HTTPMatch, listenerPort int32, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if rd.Scheme != "" {
		scheme = rd.Scheme
	}
	host := hostOnly(r.Host)
	if rd.Hostname != "" {
		host = rd.Hostname
	}
	port := int(rd.Port)
	if port == 0 {
		switch {
		case rd.Scheme == "http":
			port = 80
		case rd.Scheme == "https":
			port = 443
		default:
			port = int(listenerPort)
		}
	}
	hostport := host
	if !(scheme == "http" && port == 80) && !(scheme == "https" && port == 443) {
		hostport = net.JoinHostPort(host, strconv.Itoa(port))
	} else if strings.Contains(host, ":") {
		hostport = "[" + host + "]"
	}
	path := r.URL.Path
	switch rd.PathType {
	case "ReplaceFullPath":
		path = rd.Path
	case "ReplacePrefixMatch":
		rest := strings.TrimPrefix(path, m.Path)
		if m.Path == "/" {
			rest = path
		}
		repl := strings.TrimSuffix(rd.Path, "/")
		switch {
		case rest == "" && repl == "":
			path = "/"
		case rest == "":
			path = repl
		default:
			path = repl + rest
		}
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
	}
	u := url.URL{Scheme: scheme, Host: hostport, Path: path, RawQuery: r.URL.RawQuery}
	return u.String()
}

// hostOnly strips a port from a Host header value.
func hostOnly(h string) string {
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().String()
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		if _, err := strconv.Atoi(h[i+1:]); err == nil {
			return h[:i]
		}
	}
	return strings.Trim(h, "[]")
}

func methodLabel(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return m
	}
	return "OTHER"
}

// recorder captures the status and body size for logs and metrics. It unwraps for
// http.ResponseController, which ReverseProxy uses to flush and to hijack upgrades.
type recorder struct {
	http.ResponseWriter
	code     int
	bytes    int64
	hijacked bool
}

func (rc *recorder) WriteHeader(code int) {
	if rc.code == 0 && code >= 200 {
		rc.code = code
	}
	if code == http.StatusSwitchingProtocols {
		rc.code = code
	}
	rc.ResponseWriter.WriteHeader(code)
}

func (rc *recorder) Write(b []byte) (int, error) {
	if rc.code == 0 {
		rc.code = http.StatusOK
	}
	n, err := rc.ResponseWriter.Write(b)
	rc.bytes += int64(n)
	return n, err
}

func (rc *recorder) Flush() {
	http.NewResponseController(rc.ResponseWriter).Flush()
}

func (rc *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	rc.hijacked = true
	return http.NewResponseController(rc.ResponseWriter).Hijack()
}

func (rc *recorder) Unwrap() http.ResponseWriter { return rc.ResponseWriter }
