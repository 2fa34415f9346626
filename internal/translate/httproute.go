package translate

import (
	"cmp"
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/snapshot"
)

// buildHTTPMatches turns an HTTPRoute's rules into snapshot matches, once per route: every
// listener and hostname the route serves shares them. A feature snigate does not implement
// (a filter other than RequestHeaderModifier, ResponseHeaderModifier and RequestRedirect, a
// RegularExpression match, per-backendRef filters, timeouts, retries, session persistence)
// sets r.unsupported: serving the route while ignoring it would answer requests differently
// from what the route asks, so the route is Accepted=False/UnsupportedValue instead.
func buildHTTPMatches(r *route) {
	var unsupported []string
	bad := func(format string, args ...any) { unsupported = append(unsupported, fmt.Sprintf(format, args...)) }
	for ri, rule := range r.http.Spec.Rules {
		f := fmt.Sprintf("spec.rules[%d]", ri)
		sr := &snapshot.HTTPRule{Route: r.String(), Index: ri, Backends: r.ruleSnaps[ri]}
		if rule.Name != nil {
			sr.Name = string(*rule.Name)
		}
		if rule.Timeouts != nil {
			bad("%s.timeouts is not supported", f)
		}
		if rule.Retry != nil {
			bad("%s.retry is not supported", f)
		}
		if rule.SessionPersistence != nil {
			bad("%s.sessionPersistence is not supported", f)
		}
		for bi, br := range rule.BackendRefs {
			if len(br.Filters) > 0 {
				bad("%s.backendRefs[%d].filters: filters on a backendRef are not supported", f, bi)
			}
		}
		for fi, flt := range rule.Filters {
			ff := fmt.Sprintf("%s.filters[%d]", f, fi)
			switch flt.Type {
			case gwv1.HTTPRouteFilterRequestHeaderModifier:
				sr.RequestHeaders = headerModifier(flt.RequestHeaderModifier)
			case gwv1.HTTPRouteFilterResponseHeaderModifier:
				sr.ResponseHeaders = headerModifier(flt.ResponseHeaderModifier)
			case gwv1.HTTPRouteFilterRequestRedirect:
				sr.Redirect = redirect(flt.RequestRedirect)
			default:
				bad("%s: filter type %s is not supported (RequestHeaderModifier, ResponseHeaderModifier and RequestRedirect are)", ff, flt.Type)
			}
		}
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gwv1.HTTPRouteMatch{{}}
		}
		for mi, m := range matches {
			mf := fmt.Sprintf("%s.matches[%d]", f, mi)
			sm := &snapshot.HTTPMatch{PathType: snapshot.PathPrefix, Path: "/", Rule: sr}
			if p := m.Path; p != nil {
				typ, value := pathMatch(p)
				switch typ {
				case gwv1.PathMatchExact:
					sm.PathType, sm.Path = snapshot.PathExact, value
				case gwv1.PathMatchPathPrefix:
					sm.Path = value
					if len(value) > 1 {
						sm.Path = strings.TrimSuffix(value, "/")
					}
				default:
					bad("%s.path.type %s is not supported (Exact and PathPrefix are)", mf, typ)
				}
			}
			if m.Method != nil {
				sm.Method = string(*m.Method)
			}
			seen := map[string]bool{}
			for hi, h := range m.Headers {
				if h.Type != nil && *h.Type != gwv1.HeaderMatchExact {
					bad("%s.headers[%d].type %s is not supported (Exact is)", mf, hi, *h.Type)
				}
				name := textproto.CanonicalMIMEHeaderKey(string(h.Name))
				if seen[name] {
					continue // "only the first entry with an equivalent name MUST be considered"
				}
				seen[name] = true
				sm.Headers = append(sm.Headers, snapshot.NameValue{Name: name, Value: h.Value})
			}
			seenQ := map[string]bool{}
			for qi, q := range m.QueryParams {
				if q.Type != nil && *q.Type != gwv1.QueryParamMatchExact {
					bad("%s.queryParams[%d].type %s is not supported (Exact is)", mf, qi, *q.Type)
				}
				if seenQ[string(q.Name)] {
					continue
				}
				seenQ[string(q.Name)] = true
				sm.Query = append(sm.Query, snapshot.NameValue{Name: string(q.Name), Value: q.Value})
			}
			r.httpMatches = append(r.httpMatches, sm)
		}
	}
	r.unsupported = strings.Join(unsupported, "; ")
}

func headerModifier(f *gwv1.HTTPHeaderFilter) *snapshot.HeaderModifier {
	if f == nil {
		return nil
	}
	m := &snapshot.HeaderModifier{}
	for _, h := range f.Set {
		m.Set = append(m.Set, snapshot.NameValue{Name: textproto.CanonicalMIMEHeaderKey(string(h.Name)), Value: h.Value})
	}
	for _, h := range f.Add {
		m.Add = append(m.Add, snapshot.NameValue{Name: textproto.CanonicalMIMEHeaderKey(string(h.Name)), Value: h.Value})
	}
	for _, n := range f.Remove {
		m.Remove = append(m.Remove, textproto.CanonicalMIMEHeaderKey(n))
	}
	return m
}

func redirect(f *gwv1.HTTPRequestRedirectFilter) *snapshot.Redirect {
	rd := &snapshot.Redirect{StatusCode: 302}
	if f == nil {
		return rd
	}
	if f.Scheme != nil {
		rd.Scheme = *f.Scheme
	}
	if f.Hostname != nil {
		rd.Hostname = string(*f.Hostname)
	}
	if f.Port != nil {
		rd.Port = *f.Port
	}
	if f.StatusCode != nil {
		rd.StatusCode = *f.StatusCode
	}
	if p := f.Path; p != nil {
		rd.PathType = string(p.Type)
		switch p.Type {
		case gwv1.FullPathHTTPPathModifier:
			if p.ReplaceFullPath != nil {
				rd.Path = *p.ReplaceFullPath
			}
		case gwv1.PrefixMatchHTTPPathModifier:
			if p.ReplacePrefixMatch != nil {
				rd.Path = *p.ReplacePrefixMatch
			}
		}
	}
	return rd
}

// httpTable builds an HTTP or HTTPS listener's table: for every effective hostname, the
// matches of every route attached with it, sorted by the Gateway API's precedence. Routes
// are attached oldest first (then namespace/name) and a route's matches are in rule order,
// so a stable sort on the match criteria keeps exactly the tie-breaks the spec asks for.
func (l *listener) httpTable() *snapshot.HTTPTable {
	hosts := map[string]*snapshot.HTTPHost{}
	var order []string
	for _, a := range l.attached {
		for _, h := range a.hostnames {
			host := hosts[h]
			if host == nil {
				host = &snapshot.HTTPHost{}
				hosts[h] = host
				order = append(order, h)
			}
			host.Matches = append(host.Matches, a.route.httpMatches...)
		}
	}
	for _, h := range order {
		slices.SortStableFunc(hosts[h].Matches, compareMatches)
	}
	// A request is matched against the rules of every route whose hostname matches it, the
	// more specific hostname first (the spec's first two precedence criteria): a route for
	// app.example.com whose rules do not match a request leaves it to the routes of
	// *.example.com and of the catch-all. Without this an ACME challenge route for one name
	// turns every other path of that name from the tenant's redirect into a 404.
	tbl := &snapshot.HTTPTable{}
	for _, h := range order {
		own := hosts[h]
		entry := own
		for _, c := range coveringPatterns(h, hosts) {
			if entry == own {
				entry = &snapshot.HTTPHost{Matches: slices.Clip(own.Matches)}
			}
			entry.Matches = append(entry.Matches, hosts[c].Matches...)
		}
		tbl.Hosts.Add(h, entry)
	}
	return tbl
}

// coveringPatterns lists the other patterns of hosts that match every name h matches, most
// specific first: the wildcards of h's parent domains from the longest suffix ("a.b.c" is
// covered by *.b.c and *.c, "*.b.c" by *.c), then the catch-all.
func coveringPatterns(h string, hosts map[string]*snapshot.HTTPHost) []string {
	if h == "" || h == "*" {
		return nil
	}
	var out []string
	rest := strings.TrimPrefix(h, "*.")
	for {
		_, after, ok := strings.Cut(rest, ".")
		if !ok {
			break
		}
		rest = after
		if _, ok := hosts["*."+rest]; ok {
			out = append(out, "*."+rest)
		}
	}
	for _, any := range []string{"", "*"} {
		if _, ok := hosts[any]; ok {
			out = append(out, any)
		}
	}
	return out
}

// compareMatches orders matches by precedence: an Exact path, then the longest prefix, then
// a method match, then the most header matches, then the most query parameter matches.
func compareMatches(a, b *snapshot.HTTPMatch) int {
	exact := func(m *snapshot.HTTPMatch) int {
		if m.PathType == snapshot.PathExact {
			return 0
		}
		return 1
	}
	method := func(m *snapshot.HTTPMatch) int {
		if m.Method != "" {
			return 0
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(exact(a), exact(b)),
		cmp.Compare(len(b.Path), len(a.Path)),
		cmp.Compare(method(a), method(b)),
		cmp.Compare(len(b.Headers), len(a.Headers)),
		cmp.Compare(len(b.Query), len(a.Query)),
	)
}

// pathMatch returns a path match's type and value with the API's defaults (PathPrefix, "/").
func pathMatch(p *gwv1.HTTPPathMatch) (gwv1.PathMatchType, string) {
	typ, value := gwv1.PathMatchPathPrefix, "/"
	if p.Type != nil {
		typ = *p.Type
	}
	if p.Value != nil {
		value = *p.Value
	}
	return typ, value
}
