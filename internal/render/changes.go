package render

import (
	"github.com/snigate/snigate/internal/resources"
)

// What changed in the input since the previous render, by name, so that checking whether a
// memo holds (tenantmemo.go, exposurememo.go) asks again only the questions whose answers
// can have changed. Each memo's answers were checked against the previous render's input
// (or found there); an answer is computed from the objects at the question's names (or, for
// the questions that list a namespace, the objects of that namespace), so when none of those
// objects came, went or was replaced, the answer stands without being asked. With 1 000
// TenantGateways, asking each of their questions again on every change was a seventh of a
// change's cost in the pipeline; now a change asks those of its own namespace.
//
// The comparison relies on the input being in namespace/name order, as the cluster source
// lists every kind (resources.DiffSorted); an input in another order (files, tests) is taken
// as changed everywhere, and every question is asked again as before.

// changes are the names whose objects changed since the previous render's input.
type changes struct {
	// known is false without a previous input, or when a list is out of order: then every
	// answer may have changed.
	known bool
	// cluster: a cluster-scoped object (a Namespace, a GatewayClass) came, went or changed.
	cluster    bool
	keys       map[nsName]struct{}
	namespaces map[string]struct{}
	// probes are the probe verdicts that changed (verdicts.go); allProbes, when they could
	// not be told (a map not made by a VerdictCache).
	probes    map[[2]string]struct{}
	allProbes bool
}

// changesSince compares in (and the cert-manager objects and probe verdicts of opts) with
// the input of the render prev remembers.
func changesSince(prev *memo, in *resources.Resources, opts Options) changes {
	if prev.in == nil {
		return changes{}
	}
	c := changes{known: true, keys: map[nsName]struct{}{}, namespaces: map[string]struct{}{}}
	mark := func(ns, name string) {
		if ns == "" {
			c.cluster = true
			return
		}
		c.keys[nsName{ns, name}] = struct{}{}
		c.namespaces[ns] = struct{}{}
	}
	for i := range resources.Kinds {
		if !resources.Kinds[i].Diff(prev.in, in, mark) {
			return changes{}
		}
	}
	if !resources.DiffSorted(prev.issuers, opts.Issuers, mark) || !resources.DiffSorted(prev.certificates, opts.Certificates, mark) {
		return changes{}
	}
	var ok bool
	c.probes, ok = probeChanges(prev.probes, opts.Probes)
	c.allProbes = !ok
	return c
}

// mayHaveChanged reports whether q's answer can differ from the one the previous input
// gave: whether an object it is computed from changed (answer, in reads.go, says which).
func (c *changes) mayHaveChanged(q question) bool {
	if !c.known {
		return true
	}
	var hit bool
	switch q.kind {
	case qProbe:
		// A verdict, not an object: changed by identity (probeChanges).
		if c.allProbes {
			return true
		}
		_, hit = c.probes[[2]string{q.key.namespace, q.key.name}]
	case qLabelled:
		return c.cluster
	case qHTTPRoutes, qClaimTLSRoutes, qWildcardSecret:
		// A namespace's routes; a Secret and the ReferenceGrants of its namespace.
		_, hit = c.namespaces[q.key.namespace]
	case qRouteInUse:
		_, hit = c.keys[q.owner] // the routes named as the exposure
	default:
		// One object at key: a Gateway, ListenerSet, HTTPRoute, Issuer, Certificate,
		// Service, TrustAnchor or Secret; a member route's exposure and route.
		_, hit = c.keys[q.key]
	}
	return hit
}
