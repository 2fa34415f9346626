package snapshot

import (
	"crypto/x509"

	"github.com/snigate/snigate/internal/access"
)

// Description is a plain, serializable view of a snapshot: what `snigate check` prints, what
// the admin endpoint returns, and what golden files compare.
type Description struct {
	Ports []PortDescription `json:"ports"`
}

// PortDescription describes one bound socket.
type PortDescription struct {
	Address        string                `json:"address"`
	Protocol       Protocol              `json:"protocol"`
	MaxConnections int                   `json:"maxConnections,omitempty"`
	ProxyProtocol  *InboundDescription   `json:"proxyProtocol,omitempty"`
	Listeners      []ListenerDescription `json:"listeners"`
}

// ListenerDescription describes a listener and the hostname that selects it on its port.
type ListenerDescription struct {
	Hostname string   `json:"hostname,omitempty"`
	Name     string   `json:"name"`
	Mode     Mode     `json:"mode,omitempty"`
	Certs    []string `json:"certificates,omitempty"`
	// Access are the listener's AccessPolicies.
	Access []AccessDescription `json:"access,omitempty"`
	Routes []RouteDescription  `json:"routes"`
	// HTTP lists, for HTTP and HTTPS listeners, the hostnames and their matches in
	// precedence order.
	HTTP []HTTPHostDescription `json:"http,omitempty"`
}

// HTTPHostDescription describes the matches served for one hostname pattern.
type HTTPHostDescription struct {
	Hostname string                 `json:"hostname,omitempty"`
	Matches  []HTTPMatchDescription `json:"matches"`
}

// HTTPMatchDescription describes one match and the rule it leads to.
type HTTPMatchDescription struct {
	// Path is "Exact /a" or "PathPrefix /".
	Path            string               `json:"path"`
	Method          string               `json:"method,omitempty"`
	Headers         []NameValue          `json:"headers,omitempty"`
	Query           []NameValue          `json:"query,omitempty"`
	Route           string               `json:"route"`
	Rule            int                  `json:"rule"`
	RequestHeaders  *HeaderModifier      `json:"requestHeaders,omitempty"`
	ResponseHeaders *HeaderModifier      `json:"responseHeaders,omitempty"`
	Redirect        *Redirect            `json:"redirect,omitempty"`
	Backends        []BackendDescription `json:"backends,omitempty"`
}

// RouteDescription describes a route reached through one hostname pattern.
type RouteDescription struct {
	Hostname string               `json:"hostname,omitempty"`
	Name     string               `json:"name"`
	Access   []AccessDescription  `json:"access,omitempty"`
	Backends []BackendDescription `json:"backends"`
}

// AccessDescription describes one AccessPolicy on a listener or route.
type AccessDescription struct {
	Policy string `json:"policy"`
	Target string `json:"target"`
	Rules  string `json:"rules"`
}

func describeAccess(ps []*access.Policy) []AccessDescription {
	var out []AccessDescription
	for _, p := range ps {
		out = append(out, AccessDescription{Policy: p.Name, Target: p.Target, Rules: p.String()})
	}
	return out
}

// BackendDescription describes one weighted backend.
type BackendDescription struct {
	Name      string   `json:"name"`
	Weight    int32    `json:"weight"`
	Endpoints []string `json:"endpoints,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	// ProxyProtocol is the PROXY header written to the backend: "v1", "v2", "v2 authority
	// alpn".
	ProxyProtocol string `json:"proxyProtocol,omitempty"`
}

// InboundDescription describes a port's InboundProxy.
type InboundDescription struct {
	TrustedRanges []string `json:"trustedRanges"`
	Required      bool     `json:"required,omitempty"`
}

// String is the header's description: "v1", "v2", "v2 authority alpn".
func (h *ProxyHeader) String() string {
	if h == nil {
		return ""
	}
	s := "v" + string(rune('0'+h.Version))
	if h.Authority {
		s += " authority"
	}
	if h.ALPN {
		s += " alpn"
	}
	return s
}

// Describe returns the plain view of s in precedence order.
func (s *Snapshot) Describe() Description {
	var d Description
	if s == nil {
		return d
	}
	for _, p := range s.Ports {
		pd := PortDescription{Address: p.Address, Protocol: p.Protocol, MaxConnections: p.MaxConnections}
		if in := p.ProxyIn; in != nil {
			pd.ProxyProtocol = &InboundDescription{Required: in.Required}
			for _, r := range in.Trusted {
				pd.ProxyProtocol.TrustedRanges = append(pd.ProxyProtocol.TrustedRanges, r.String())
			}
		}
		if p.TCP != nil {
			pd.Listeners = append(pd.Listeners, describeListener("", p.TCP))
		}
		for _, e := range p.Listeners.Entries() {
			pd.Listeners = append(pd.Listeners, describeListener(e.Pattern, e.Value))
		}
		d.Ports = append(d.Ports, pd)
	}
	return d
}

func describeListener(host string, l *Listener) ListenerDescription {
	ld := ListenerDescription{Hostname: host, Name: l.Name, Mode: l.Mode, Access: describeAccess(l.Access), Routes: []RouteDescription{}}
	if l.TLS != nil {
		for _, c := range l.TLS.Certificates {
			if c.Leaf != nil {
				ld.Certs = append(ld.Certs, certName(c.Leaf))
			}
		}
	}
	if l.Route != nil {
		ld.Routes = append(ld.Routes, describeRoute("", l.Route))
	}
	for _, e := range l.Routes.Entries() {
		ld.Routes = append(ld.Routes, describeRoute(e.Pattern, e.Value))
	}
	if l.HTTP != nil {
		ld.HTTP = []HTTPHostDescription{}
		for _, e := range l.HTTP.Hosts.Entries() {
			hd := HTTPHostDescription{Hostname: e.Pattern, Matches: []HTTPMatchDescription{}}
			for _, m := range e.Value.Matches {
				md := HTTPMatchDescription{
					Path: string(m.PathType) + " " + m.Path, Method: m.Method, Headers: m.Headers, Query: m.Query,
					Route: m.Rule.Route, Rule: m.Rule.Index,
					RequestHeaders: m.Rule.RequestHeaders, ResponseHeaders: m.Rule.ResponseHeaders, Redirect: m.Rule.Redirect,
				}
				if m.Rule.Backends != nil {
					md.Backends = describeRoute("", m.Rule.Backends).Backends
				}
				hd.Matches = append(hd.Matches, md)
			}
			ld.HTTP = append(ld.HTTP, hd)
		}
	}
	return ld
}

func describeRoute(host string, r *Route) RouteDescription {
	rd := RouteDescription{Hostname: host, Name: r.Name, Access: describeAccess(r.Access), Backends: []BackendDescription{}}
	for _, b := range r.Backends {
		bd := BackendDescription{Name: b.Name, Weight: b.Weight, Reason: b.Reason, ProxyProtocol: b.Proxy.String()}
		for _, e := range b.Endpoints {
			bd.Endpoints = append(bd.Endpoints, e.String())
		}
		rd.Backends = append(rd.Backends, bd)
	}
	return rd
}

func certName(c *x509.Certificate) string {
	if len(c.DNSNames) > 0 {
		n := c.DNSNames[0]
		for _, x := range c.DNSNames[1:] {
			n += "," + x
		}
		return n
	}
	return c.Subject.CommonName
}
