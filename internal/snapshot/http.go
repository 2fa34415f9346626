package snapshot

// HTTP routing: what an HTTP or HTTPS listener serves. Like the rest of the snapshot it is
// built once by translate and only read afterwards; the HTTP handler (package httpproxy)
// interprets it.
//
// A request is routed in three steps: the port selects the listener (by SNI on a TLS port,
// by the Host header on a plain HTTP port), the listener's HTTPTable selects the host entry
// by the Host header with the usual hostname precedence, and the host entry's matches are
// tried in order until one matches. They are already sorted by the Gateway API's
// precedence: those of the routes serving that hostname pattern, then those of each less
// specific pattern that covers it (its parent wildcards, then the catch-all).

// HTTPTable maps effective route hostnames to the matches served for them.
type HTTPTable struct {
	Hosts HostTable[*HTTPHost]
}

// HTTPHost is everything served for one hostname pattern of a listener.
type HTTPHost struct {
	// Matches in precedence order: the first that matches a request wins.
	Matches []*HTTPMatch
}

// PathMatchType is how a path matches.
type PathMatchType string

const (
	// PathExact matches the whole path, case-sensitively.
	PathExact PathMatchType = "Exact"
	// PathPrefix matches whole path segments: "/foo" matches "/foo" and "/foo/bar", not
	// "/foobar". The value is stored without a trailing slash (except "/").
	PathPrefix PathMatchType = "PathPrefix"
)

// HTTPMatch is one match of one rule, with the rule it leads to.
type HTTPMatch struct {
	PathType PathMatchType
	Path     string
	// Method is empty for any method.
	Method string
	// Headers must all be present with exactly these values; names are canonical
	// (textproto.CanonicalMIMEHeaderKey).
	Headers []NameValue
	// Query parameters must all be present with exactly these values; names are
	// case-sensitive.
	Query []NameValue
	Rule  *HTTPRule
}

// NameValue is a header or query parameter.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPRule is what a matching request gets: filters, then a redirect or a backend.
type HTTPRule struct {
	// Route is "HTTPRoute/namespace/name", for logs and metrics.
	Route string
	// Index is the rule's position in the route's spec.rules.
	Index int
	// Name is the rule's optional name.
	Name string

	RequestHeaders  *HeaderModifier
	ResponseHeaders *HeaderModifier
	// Redirect, when set, answers every request with a redirect; Backends is not used.
	Redirect *Redirect
	// Backends are the rule's weighted backendRefs. A rule without backendRefs and without
	// a redirect answers 500, as does the share of an invalid backend (Reason set, not
	// NoReadyEndpoints); a valid backend without ready endpoints answers 503.
	Backends *Route
}

// HeaderModifier sets, adds and removes headers. Names are canonical.
type HeaderModifier struct {
	Set    []NameValue `json:"set,omitempty"`
	Add    []NameValue `json:"add,omitempty"`
	Remove []string    `json:"remove,omitempty"`
}

// Redirect is a RequestRedirect filter. Empty fields keep the request's value.
type Redirect struct {
	Scheme   string `json:"scheme,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	// Port is 0 when the Gateway API's defaulting applies: the scheme's well-known port
	// when Scheme is set, else the listener's port.
	Port int32 `json:"port,omitempty"`
	// PathType is "", "ReplaceFullPath" or "ReplacePrefixMatch".
	PathType string `json:"pathType,omitempty"`
	Path     string `json:"path,omitempty"`
	// StatusCode is 301 or 302 (default 302).
	StatusCode int `json:"statusCode"`
}
