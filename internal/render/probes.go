package render

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/translate"
	"github.com/snigate/snigate/internal/trustanchor"
)

// ProbeTargets is what the certificate probe connects to for each route out publishes (an
// exposure's own, and each member's): every ready endpoint of its backend Service (the
// addresses the gateway dials: a client may be sent to any of them), started
// the engine's way, with the external hostnames, and as roots the bundle its TrustAnchor
// publishes (bundles, by TrustAnchor: what clients verify with, a rotated-out CA still in
// it included), or else the CA certificates of the TrustAnchor's source. An exposure whose
// backend has no ready endpoint gets a target without an address: the probe says
// Unreachable, naming the Service. kept, when not nil, keeps the parsed bundles from one
// call to the next.
func ProbeTargets(res *resources.Resources, out *Result, bundles map[types.NamespacedName][]byte, kept *Pools) map[probe.Key]probe.Target {
	targets := map[probe.Key]probe.Target{}
	eps := newEndpoints(res)
	// One pool per TrustAnchor, shared by its exposures' targets (the probe only reads it):
	// parsed per exposure, 10 000 exposures of one TrustAnchor parsed its bundle 10 000
	// times on every change.
	pools := map[types.NamespacedName]*x509.CertPool{}
	if kept == nil {
		kept = &Pools{}
	}
	defer kept.keepOnly(pools)
	for _, x := range out.Exposures {
		if x.Target == nil || !x.Rendered {
			continue
		}
		for _, pt := range x.targets() {
			e, _ := engine.Lookup(pt.Engine)
			t := probe.Target{Endpoints: eps.ready(x.Namespace, pt.Service, pt.ServicePort), Start: e.Start,
				SNI: pt.Hostnames[0], Hostnames: pt.Hostnames}
			if pt.TrustAnchor != "" {
				key := types.NamespacedName{Namespace: x.Namespace, Name: pt.TrustAnchor}
				if pools[key] == nil {
					if b, ok := bundles[key]; ok {
						pools[key] = kept.parse(key, b)
					} else {
						pools[key] = anchorRoots(res, x.Namespace, pt.TrustAnchor)
					}
				}
				t.Roots = pools[key]
			}
			if pt.CertificateSecret != "" {
				t.Expected = secretLeaf(res, x.Namespace, pt.CertificateSecret)
			}
			targets[probe.Key{x.Namespace, pt.Route}] = t
		}
	}
	return targets
}

// Pools keeps the CA pools ProbeTargets parsed from the TrustAnchors' bundles, by
// TrustAnchor, for its next call: with a TrustAnchor per tenant, parsing 1 000 bundles
// on every change was half of ProbeTargets' time (bench/cpscale's profile). A bundle
// that changed is parsed again. The zero Pools is ready to use; it is not safe for
// concurrent calls.
type Pools struct {
	m map[types.NamespacedName]parsedBundle
}

type parsedBundle struct {
	pem  []byte
	pool *x509.CertPool
}

// parse returns the pool of bundle b of TrustAnchor key, the one kept when b is the same.
func (p *Pools) parse(key types.NamespacedName, b []byte) *x509.CertPool {
	if kept, ok := p.m[key]; ok && bytes.Equal(kept.pem, b) {
		return kept.pool
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	if p.m == nil {
		p.m = map[types.NamespacedName]parsedBundle{}
	}
	p.m[key] = parsedBundle{pem: b, pool: pool}
	return pool
}

// keepOnly forgets the pools of TrustAnchors the last call did not use (used).
func (p *Pools) keepOnly(used map[types.NamespacedName]*x509.CertPool) {
	for key, kept := range p.m {
		if used[key] != kept.pool {
			delete(p.m, key)
		}
	}
}

// AnchorsInUse is, per TrustAnchor, the certificates its exposures' backends served at their
// last probe (trustanchor.Options.InUse: a rotated-out CA stays published while a backend
// still serves a chain from it; a TrustAnchor no exposure names has none in use). It is nil,
// which keeps every CA, while any exposure naming a TrustAnchor has not been probed yet or
// its probe read no chain (an unreachable backend may still serve the old one).
func AnchorsInUse(out *Result, results map[probe.Key]probe.Result) map[types.NamespacedName][]*x509.Certificate {
	inUse := map[types.NamespacedName][]*x509.Certificate{}
	for _, x := range out.Exposures {
		if x.Target == nil || x.Target.TrustAnchor == "" {
			continue
		}
		for _, pt := range x.targets() {
			r, ok := results[probe.Key{x.Namespace, pt.Route}]
			if !ok {
				return nil
			}
			k := types.NamespacedName{Namespace: x.Namespace, Name: pt.TrustAnchor}
			for _, chain := range r.Chains() {
				if len(chain) == 0 {
					return nil
				}
				inUse[k] = append(inUse[k], chain...)
			}
		}
	}
	return inUse
}

// endpoints looks up Services and their EndpointSlices by namespace and name.
type endpoints struct {
	services map[nsName]*corev1.Service
	slices   map[nsName][]*discoveryv1.EndpointSlice // by the Service they belong to
}

func newEndpoints(res *resources.Resources) endpoints {
	e := endpoints{services: byName(res.Services), slices: map[nsName][]*discoveryv1.EndpointSlice{}}
	for _, es := range res.EndpointSlices {
		k := nsName{es.Namespace, es.Labels[discoveryv1.LabelServiceName]}
		e.slices[k] = append(e.slices[k], es)
	}
	return e
}

// ready are host:port of every ready endpoint of Service ns/name's port, in the order the
// data plane dials them (translate's resolution, the one place for it); nil when none.
func (e endpoints) ready(ns, name string, port int32) []string {
	s := e.services[nsName{ns, name}]
	if s == nil {
		return nil
	}
	sp := translate.ServicePort(s, port)
	if sp == nil {
		return nil
	}
	eps := translate.Endpoints(e.slices[nsName{ns, name}], sp.Name)
	if len(eps) == 0 {
		return nil
	}
	out := make([]string, len(eps))
	for i, ep := range eps {
		out[i] = ep.String()
	}
	return out
}

// anchorRoots is the pool of the CA certificates TrustAnchor ns/name publishes from its
// source, or an empty pool (nothing chains to it) when the source cannot be published.
func anchorRoots(res *resources.Resources, ns, name string) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, a := range res.TrustAnchors {
		if a.Namespace != ns || a.Name != name {
			continue
		}
		key := a.Spec.SourceSecretRef.Key
		if key == "" {
			key = "ca.crt"
		}
		for _, s := range res.Secrets {
			if s.Namespace == ns && s.Name == a.Spec.SourceSecretRef.Name {
				if certs, reason, _ := trustanchor.Guard(secretValue(s, key)); reason == "" {
					for _, c := range certs {
						pool.AddCert(c)
					}
				}
			}
		}
	}
	return pool
}

func secretValue(s *corev1.Secret, key string) []byte {
	if v, ok := s.Data[key]; ok {
		return v
	}
	return []byte(s.StringData[key])
}

// secretLeaf is the leaf certificate of Secret ns/name's tls.crt, or nil.
func secretLeaf(res *resources.Resources, ns, name string) *x509.Certificate {
	for _, sec := range res.Secrets {
		if sec.Namespace != ns || sec.Name != name {
			continue
		}
		block, _ := pem.Decode(sec.Data[corev1.TLSCertKey])
		if block == nil {
			return nil
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		return leaf
	}
	return nil
}

// targets are what the probe connects to for x: its own route, then its members'.
func (x *Exposure) targets() []*ProbeTarget {
	if x.Target == nil {
		return nil
	}
	return append([]*ProbeTarget{x.Target}, x.MemberTargets...)
}
