package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/translate"
)

// The route kinds, as the report names them.
const (
	kindTLSRoute  = "TLSRoute"
	kindTCPRoute  = "TCPRoute"
	kindHTTPRoute = "HTTPRoute"
)

// problems lists, one line each, everything a user should fix in what r was translated
// from: the input errors, and every status condition that says something does not work
// (Accepted, ResolvedRefs or Programmed False, Conflicted True). `snigate check` exits
// non-zero when it is not empty.
func problems(r *translate.Result) []string {
	var out []string
	for _, e := range r.Errors {
		out = append(out, e.Error())
	}
	s := r.Status
	if s == nil {
		return out
	}
	add := func(obj string, conds []metav1.Condition) {
		for _, c := range conds {
			if bad(c) {
				out = append(out, fmt.Sprintf("%s: %s=%s (%s): %s", obj, c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	for _, c := range s.GatewayClasses {
		add("GatewayClass "+c.Name, c.Status.Conditions)
	}
	for _, g := range s.Gateways {
		obj := "Gateway " + g.Namespace + "/" + g.Name
		add(obj, g.Status.Conditions)
		for _, l := range g.Status.Listeners {
			add(obj+" listener "+string(l.Name), l.Conditions)
		}
	}
	for _, ls := range s.ListenerSets {
		obj := "ListenerSet " + ls.Namespace + "/" + ls.Name
		add(obj, ls.Status.Conditions)
		for _, l := range ls.Status.Listeners {
			add(obj+" listener "+string(l.Name), l.Conditions)
		}
	}
	routes := func(kind, ns, name string, parents []gwv1.RouteParentStatus) {
		for _, p := range parents {
			add(fmt.Sprintf("%s %s/%s parent %s", kind, ns, name, parentName(ns, p.ParentRef)), p.Conditions)
		}
	}
	for _, rt := range s.TLSRoutes {
		routes(kindTLSRoute, rt.Namespace, rt.Name, rt.Status.Parents)
	}
	for _, rt := range s.TCPRoutes {
		routes(kindTCPRoute, rt.Namespace, rt.Name, rt.Status.Parents)
	}
	for _, rt := range s.HTTPRoutes {
		routes(kindHTTPRoute, rt.Namespace, rt.Name, rt.Status.Parents)
	}
	for _, pk := range s.Policies() {
		for _, p := range pk.List {
			for _, a := range p.Status.Ancestors {
				add(fmt.Sprintf("%s %s/%s target %s", pk.Kind, p.Namespace, p.Name, parentName(p.Namespace, a.AncestorRef)), a.Conditions)
			}
		}
	}
	return out
}

func bad(c metav1.Condition) bool {
	if c.Type == string(gwv1.ListenerConditionConflicted) {
		return c.Status == metav1.ConditionTrue
	}
	return c.Status != metav1.ConditionTrue
}

func parentName(routeNS string, ref gwv1.ParentReference) string {
	ns := routeNS
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	kind := "Gateway"
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	s := kind + " " + ns + "/" + string(ref.Name)
	if ref.SectionName != nil {
		s += " sectionName=" + string(*ref.SectionName)
	}
	if ref.Port != nil {
		s += fmt.Sprintf(" port=%d", *ref.Port)
	}
	return s
}

// writeReport prints what `snigate check` shows: every Gateway with its listeners, every
// route with its parents, with their conditions and reasons as the Gateway API defines them
// (messages for the conditions that report a problem), then the effective table
// port -> listener -> SNI -> route -> backends. in is the input r was translated from.
func writeReport(out io.Writer, in *resources.Resources, r *translate.Result) error {
	w := bufio.NewWriter(out)
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "INVALID INPUT: the configuration is rejected (%d errors)\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %v\n", e)
		}
		return w.Flush()
	}
	s := r.Status
	specs := map[types.NamespacedName]*gwv1.Gateway{}
	for _, g := range in.Gateways {
		specs[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = g
	}

	for _, c := range s.GatewayClasses {
		fmt.Fprintf(w, "GatewayClass %s\n", c.Name)
		writeConditions(w, "  ", c.Status.Conditions)
	}
	for _, g := range s.Gateways {
		var addrs []string
		for _, a := range g.Status.Addresses {
			addrs = append(addrs, a.Value)
		}
		fmt.Fprintf(w, "\nGateway %s/%s", g.Namespace, g.Name)
		if len(addrs) > 0 {
			fmt.Fprintf(w, "  addresses: %s", strings.Join(addrs, ", "))
		}
		fmt.Fprintln(w)
		writeConditions(w, "  ", g.Status.Conditions)
		spec := specs[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}]
		for _, l := range g.Status.Listeners {
			var ls *gwv1.Listener
			if spec != nil {
				ls = listenerSpec(spec.Spec.Listeners, l.Name)
			}
			writeListener(w, l, ls)
		}
	}
	setSpecs := map[types.NamespacedName]*gwv1.ListenerSet{}
	for _, ls := range in.ListenerSets {
		setSpecs[types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}] = ls
	}
	for _, set := range s.ListenerSets {
		fmt.Fprintf(w, "\nListenerSet %s/%s", set.Namespace, set.Name)
		spec := setSpecs[types.NamespacedName{Namespace: set.Namespace, Name: set.Name}]
		var entries []gwv1.Listener
		if spec != nil {
			ns := set.Namespace
			if spec.Spec.ParentRef.Namespace != nil {
				ns = string(*spec.Spec.ParentRef.Namespace)
			}
			fmt.Fprintf(w, "  on Gateway %s/%s", ns, spec.Spec.ParentRef.Name)
			for _, e := range spec.Spec.Listeners {
				entries = append(entries, gwv1.Listener{Name: e.Name, Hostname: e.Hostname, Port: e.Port, Protocol: e.Protocol, TLS: e.TLS})
			}
		}
		fmt.Fprintln(w)
		writeConditions(w, "  ", set.Status.Conditions)
		for _, l := range set.Status.Listeners {
			writeListener(w, gwv1.ListenerStatus{Name: l.Name, SupportedKinds: l.SupportedKinds, AttachedRoutes: l.AttachedRoutes,
				Conditions: l.Conditions}, listenerSpec(entries, l.Name))
		}
	}
	writeRoutes := func(kind, ns, name string, parents []gwv1.RouteParentStatus) {
		fmt.Fprintf(w, "\n%s %s/%s\n", kind, ns, name)
		for _, p := range parents {
			fmt.Fprintf(w, "  parent %s\n", parentName(ns, p.ParentRef))
			writeConditions(w, "    ", p.Conditions)
		}
	}
	for _, rt := range s.TLSRoutes {
		writeRoutes(kindTLSRoute, rt.Namespace, rt.Name, rt.Status.Parents)
	}
	for _, rt := range s.TCPRoutes {
		writeRoutes(kindTCPRoute, rt.Namespace, rt.Name, rt.Status.Parents)
	}
	for _, rt := range s.HTTPRoutes {
		writeRoutes(kindHTTPRoute, rt.Namespace, rt.Name, rt.Status.Parents)
	}
	var orphans []string
	for _, rt := range in.TLSRoutes {
		if s.TLSRoute(rt.Namespace, rt.Name) == nil {
			orphans = append(orphans, kindTLSRoute+" "+rt.Namespace+"/"+rt.Name)
		}
	}
	for _, rt := range in.TCPRoutes {
		if s.TCPRoute(rt.Namespace, rt.Name) == nil {
			orphans = append(orphans, kindTCPRoute+" "+rt.Namespace+"/"+rt.Name)
		}
	}
	for _, rt := range in.HTTPRoutes {
		if s.HTTPRoute(rt.Namespace, rt.Name) == nil {
			orphans = append(orphans, kindHTTPRoute+" "+rt.Namespace+"/"+rt.Name)
		}
	}
	if len(orphans) > 0 {
		fmt.Fprintf(w, "\nRoutes with no parentRef to a Gateway of this controller (no status written):\n")
		for _, o := range orphans {
			fmt.Fprintf(w, "  %s\n", o)
		}
	}

	for _, pk := range s.Policies() {
		for _, p := range pk.List {
			fmt.Fprintf(w, "\n%s %s/%s\n", pk.Kind, p.Namespace, p.Name)
			for _, a := range p.Status.Ancestors {
				fmt.Fprintf(w, "  target %s\n", parentName(p.Namespace, a.AncestorRef))
				writeConditions(w, "    ", a.Conditions)
			}
		}
	}

	fmt.Fprintf(w, "\nRouting table (port -> listener -> SNI or Host -> route -> backends):\n")
	d := r.Snapshot.Describe()
	if len(d.Ports) == 0 {
		fmt.Fprintf(w, "  (nothing is served)\n")
	}
	for _, p := range d.Ports {
		fmt.Fprintf(w, "  %s %s", p.Address, p.Protocol)
		if p.MaxConnections > 0 {
			fmt.Fprintf(w, " maxConnections=%d", p.MaxConnections)
		}
		if in := p.ProxyProtocol; in != nil {
			fmt.Fprintf(w, " proxyProtocol=[%s]", strings.Join(in.TrustedRanges, " "))
			if in.Required {
				fmt.Fprintf(w, " required")
			}
		}
		fmt.Fprintln(w)
		for _, l := range p.Listeners {
			host := l.Hostname
			if host == "" && p.Protocol == snapshot.ProtocolTLS {
				host = "(any SNI)"
			}
			if host == "" && p.Protocol == snapshot.ProtocolHTTP {
				host = "(any Host)"
			}
			fmt.Fprintf(w, "    %s listener %s", host, l.Name)
			if l.Mode != "" {
				fmt.Fprintf(w, " %s", l.Mode)
			}
			if len(l.Certs) > 0 {
				fmt.Fprintf(w, " certificates=[%s]", strings.Join(l.Certs, "; "))
			}
			fmt.Fprintln(w)
			for _, a := range l.Access {
				fmt.Fprintf(w, "      access %s (%s): %s\n", a.Policy, a.Target, a.Rules)
			}
			if l.HTTP != nil {
				if len(l.HTTP) == 0 {
					fmt.Fprintf(w, "      (no HTTPRoute: every request gets 404)\n")
				}
				for _, h := range l.HTTP {
					fmt.Fprintf(w, "      Host %s\n", cmp.Or(h.Hostname, "(any)"))
					for _, m := range h.Matches {
						fmt.Fprintf(w, "        %s%s -> %s rules[%d]", m.Path, describeConds(m), m.Route, m.Rule)
						if m.Redirect != nil {
							fmt.Fprintf(w, " redirect %d", m.Redirect.StatusCode)
						}
						fmt.Fprintln(w)
						for _, b := range m.Backends {
							fmt.Fprintf(w, "          %s weight=%d", b.Name, b.Weight)
							if b.Reason != "" {
								fmt.Fprintf(w, " REJECTED (%s)", b.Reason)
							} else {
								fmt.Fprintf(w, " [%s]", strings.Join(b.Endpoints, " "))
							}
							fmt.Fprintln(w)
						}
					}
				}
				continue
			}
			if len(l.Routes) == 0 {
				fmt.Fprintf(w, "      (no route: connections are closed)\n")
			}
			for _, rt := range l.Routes {
				if rt.Hostname != "" {
					fmt.Fprintf(w, "      %s -> %s\n", rt.Hostname, rt.Name)
				} else {
					fmt.Fprintf(w, "      -> %s\n", rt.Name)
				}
				for _, a := range rt.Access {
					fmt.Fprintf(w, "        access %s: %s\n", a.Policy, a.Rules)
				}
				for _, b := range rt.Backends {
					fmt.Fprintf(w, "        %s weight=%d", b.Name, b.Weight)
					if b.Reason != "" {
						fmt.Fprintf(w, " REJECTED (%s)", b.Reason)
					} else {
						fmt.Fprintf(w, " [%s]", strings.Join(b.Endpoints, " "))
					}
					if b.ProxyProtocol != "" {
						fmt.Fprintf(w, " proxyProtocol=%q", b.ProxyProtocol)
					}
					fmt.Fprintln(w)
				}
			}
		}
	}
	return w.Flush()
}

func listenerSpec(listeners []gwv1.Listener, name gwv1.SectionName) *gwv1.Listener {
	for i := range listeners {
		if listeners[i].Name == name {
			return &listeners[i]
		}
	}
	return nil
}

// writeListener prints one listener of a Gateway or a ListenerSet: its spec (when known),
// attachment and conditions.
func writeListener(w io.Writer, l gwv1.ListenerStatus, ls *gwv1.Listener) {
	fmt.Fprintf(w, "  listener %s", l.Name)
	if ls != nil {
		fmt.Fprintf(w, "  %s %d", ls.Protocol, ls.Port)
		if ls.Hostname != nil {
			fmt.Fprintf(w, " %s", *ls.Hostname)
		}
		if ls.TLS != nil && ls.TLS.Mode != nil && (ls.Protocol == gwv1.TLSProtocolType) {
			fmt.Fprintf(w, " %s", *ls.TLS.Mode)
		}
	}
	var kinds []string
	for _, k := range l.SupportedKinds {
		kinds = append(kinds, string(k.Kind))
	}
	fmt.Fprintf(w, "  attachedRoutes=%d supportedKinds=[%s]\n", l.AttachedRoutes, strings.Join(kinds, ","))
	writeConditions(w, "    ", l.Conditions)
}

func writeConditions(w io.Writer, indent string, conds []metav1.Condition) {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	fmt.Fprintf(w, "%s%s\n", indent, strings.Join(parts, "  "))
	for _, c := range conds {
		if bad(c) && c.Message != "" {
			fmt.Fprintf(w, "%s  %s: %s\n", indent, c.Type, c.Message)
		}
	}
}

func describeConds(m snapshot.HTTPMatchDescription) string {
	var parts []string
	if m.Method != "" {
		parts = append(parts, "method="+m.Method)
	}
	for _, h := range m.Headers {
		parts = append(parts, "header "+h.Name+"="+h.Value)
	}
	for _, q := range m.Query {
		parts = append(parts, "query "+q.Name+"="+q.Value)
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, ", ") + "]"
}
