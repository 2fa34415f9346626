package translate

import (
	"net/netip"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/snapshot"
)

// snapshot is the routing table of every programmed listener of an accepted Gateway: one
// snapshot.Port per bound address and port, shared by the listeners on it.
func (t *translator) snapshot() *snapshot.Snapshot {
	ports := map[string]*snapshot.Port{}
	var list []*snapshot.Port
	hints := map[*snapshot.Port]*portHint{}
	for _, gw := range t.gateways {
		if gw.rejected() {
			continue
		}
		for _, addr := range gw.addrs {
			for _, l := range gw.listeners {
				if !l.programmed() {
					continue
				}
				bind := l.spec.Port
				if b, ok := t.opts.BindPorts[bind]; ok {
					bind = b
				}
				ap := netip.AddrPortFrom(addr, uint16(bind)).String()
				p := ports[ap]
				if p == nil {
					p = &snapshot.Port{Address: ap, Port: l.spec.Port, MaxConnections: gw.maxConns, Protocol: snapshot.ProtocolTLS, ProxyIn: t.proxyIn[ap]}
					switch {
					case l.routeKind == kindTCPRoute:
						p.Protocol = snapshot.ProtocolTCP
					case l.spec.Protocol == gwv1.HTTPProtocolType:
						p.Protocol = snapshot.ProtocolHTTP
					}
					ports[ap] = p
					list = append(list, p)
				}
				if p.Protocol == snapshot.ProtocolTLS {
					h := hints[p]
					if h == nil {
						h = &portHint{}
						hints[p] = h
					}
					h.add(l)
				}
				sl := t.snapshotListener(l)
				if p.Protocol == snapshot.ProtocolTCP {
					p.TCP = sl
				} else {
					p.Listeners.Add(l.hostname, sl)
				}
			}
		}
	}
	for p, h := range hints {
		if !h.mixed {
			p.SpeaksFirstHint = h.fix
		}
	}
	return snapshot.New(t.opts.Generation, list)
}

// portHint finds whether every route on a TLS port is a DatabaseExposure's of one engine
// whose servers may speak first (engine.Label on the route): then a client that sends
// nothing there is most likely that engine's, waiting for its server.
type portHint struct {
	fix   string
	mixed bool // a route of another engine, or of none, or a listener that terminates
}

func (h *portHint) add(l *listener) {
	if h.mixed {
		return
	}
	if l.routeKind != kindTLSRoute || l.mode != snapshot.ModePassthrough {
		h.mixed = true
		return
	}
	for _, a := range l.attached {
		e, ok := engine.Lookup(v1alpha1.Engine(a.route.meta.Labels[engine.Label]))
		if !ok || e.SpeaksFirstFix == "" || (h.fix != "" && h.fix != e.SpeaksFirstFix) {
			h.mixed, h.fix = true, ""
			return
		}
		h.fix = e.SpeaksFirstFix
	}
}

// snapshotListener builds the listener's routing table once; a Gateway with several
// addresses shares it between its sockets.
func (t *translator) snapshotListener(l *listener) *snapshot.Listener {
	if l.snap != nil {
		return l.snap
	}
	sl := &snapshot.Listener{Name: l.name(), TLS: l.tlsConfig, Access: l.listenerAccess()}
	if l.routeKind == kindTLSRoute || l.spec.Protocol == gwv1.HTTPSProtocolType {
		sl.Mode = l.mode
	}
	l.snap = sl
	switch l.routeKind {
	case kindHTTPRoute:
		sl.HTTP = l.httpTable()
	case kindTCPRoute:
		if len(l.attached) > 0 {
			sl.Route = l.attached[0].route.snap // the oldest TCPRoute takes the port
		}
	case kindTLSRoute:
		key := listenerKey{l.gw.key, l.index}
		var m *memoListener
		if prev := t.memoListener(key); prev != nil && len(t.fresh)+len(t.removed) <= len(t.routeList)/2 {
			sl.Routes, m = t.patchRoutes(l, prev)
		} else {
			m = fillRoutes(l, &sl.Routes)
		}
		if t.listenersNext != nil {
			m.routes = &sl.Routes
			t.listenersNext[key] = m
		}
	}
	return sl
}

// memoListener returns the previous call's table of a listener when this call's routes
// came from the same memo.
func (t *translator) memoListener(key listenerKey) *memoListener {
	if !t.memoOK {
		return nil
	}
	return t.opts.Memo.listeners[key]
}

// fillRoutes fills a TLS listener's route table from its attachments.
func fillRoutes(l *listener, table *snapshot.HostTable[*snapshot.Route]) *memoListener {
	var exact, wild int
	for _, a := range l.attached {
		for _, h := range a.hostnames {
			if isWildcard(h) {
				wild++
			} else {
				exact++
			}
		}
	}
	table.Reserve(exact, wild)
	m := &memoListener{contested: map[string]bool{}}
	for _, a := range l.attached {
		for _, h := range a.hostnames {
			if !table.Add(h, a.route.snap) { // first (oldest) route wins a hostname
				m.contested[h] = true
			}
		}
	}
	return m
}

// patchRoutes derives a TLS listener's route table from the previous call's, with the
// attachments of the routes that are gone taken out and those of the new routes put in:
// a one-route change among 100 000 hostnames touches a few entries instead of building
// the table again, so that it applies within 50 ms (docs/performance.md, route scale). The
// result is the table fillRoutes would build: a hostname
// belongs to the first route in precedence order that claims it, so where a hostname is
// contested the attachments are searched for its first claimant.
func (t *translator) patchRoutes(l *listener, prev *memoListener) (snapshot.HostTable[*snapshot.Route], *memoListener) {
	table := prev.routes.Edit()
	contested := prev.contested // only grows: sharing it with the previous call is fine
	var recheck map[string]bool
	mark := func(h string) {
		if recheck == nil {
			recheck = map[string]bool{}
		}
		recheck[h] = true
	}
	mine := func(ma memoAttachment) bool { return ma.gw == l.gw.key && ma.listener == l.index }
	for _, mr := range t.removed {
		r := mr.r
		for _, ma := range mr.attach {
			if !mine(ma) {
				continue
			}
			for _, h := range ma.a.hostnames {
				if v, ok := table.Get(h); ok && v == r.snap {
					table.Delete(h)
					if contested[h] {
						mark(h)
					}
				}
			}
		}
	}
	for _, r := range t.fresh { // in precedence order
		for _, ma := range t.memoNext[r.obj].attach {
			if !mine(ma) {
				continue
			}
			for _, h := range ma.a.hostnames {
				if recheck[h] {
					continue
				}
				if !table.Add(h, r.snap) {
					// Taken: by an older route, or by a newer one this route now beats.
					contested[h] = true
					mark(h)
				}
			}
		}
	}
	if len(recheck) > 0 {
		for h := range recheck {
			table.Delete(h)
		}
		for _, a := range l.attached {
			for _, h := range a.hostnames {
				if recheck[h] {
					table.Add(h, a.route.snap) // the first claimant wins
				}
			}
		}
	}
	return table, &memoListener{contested: contested}
}
