package render

import (
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/translate"
)

// What a TenantGateway's render reads of its input, asked as questions (reads.go), so that
// the next render can tell whether the TenantGateway would render the same (tenantmemo.go).
// Every lookup a TenantGateway's render makes beyond its own object and its exposures goes
// through ask: answer computes the answer from the current input, and the same function
// checks it again for the next render. A question's answer is the part of the input the
// render uses (an ownership verdict rather than the object, whose status the API server
// rewrites), so a status write to a rendered object invalidates nothing.

// qkind is what a question asks.
type qkind uint8

const (
	qForeignGateway     qkind = iota // bool: an object at key whose controller is not owner
	qForeignListenerSet              // bool
	qForeignHTTPRoute                // bool
	qForeignIssuer                   // bool
	qForeignCertificate              // bool
	qRouteInUse                      // string: routeNameInUse of exposure owner (flag: SNI-routed)
	qMemberRouteInUse                // string: memberRouteInUse of route key for exposure owner
	qBackendMissing                  // string: backendMissing of Service key, port
	qAnchorRelease                   // string: the release of TrustAnchor key
	qSecretExists                    // bool
	qWildcardSecret                  // wildcard: the existingSecret mode's Secret key for TenantGateway namespace owner.namespace
	qHTTPRoutes                      // []*gwv1.HTTPRoute of namespace key.namespace
	qClaimTLSRoutes                  // []*gwv1.TLSRoute of namespace key.namespace attaching to TenantGateway owner and not its own (flag: via its ListenerSet)
	qLabelled                        // []*corev1.Namespace labelled snigate.dev/gateway=key.namespace
	qCertificateSecret               // string: spec.secretName of cert-manager Certificate key
	qProbe                           // probeAnswer: the probe verdict of route key
)

// question is one lookup; comparable, so that equal questions are equal values.
type question struct {
	kind  qkind
	key   nsName
	owner nsName // the asker (TenantGateway or DatabaseExposure), where the answer depends on it
	uid   types.UID
	port  int32
	flag  bool
}

// read is a question and the answer the render got.
type read struct {
	q      question
	answer any
}

// wildcard is wildcardSecret's answer.
type wildcard struct {
	secret      *corev1.Secret
	reason, msg string
}

// probeAnswer is a probe verdict and whether there is one.
type probeAnswer struct {
	probe  Probe
	probed bool
}

// ask answers q from the input, and records it while a TenantGateway is rendered.
func (r *renderer) ask(q question) any {
	a := r.answer(q)
	if r.rec != nil {
		r.rec.reads = append(r.rec.reads, read{q, a})
	}
	return a
}

// probe is the latest probe verdict of route ns/name.
func (r *renderer) probe(ns, name string) probeAnswer {
	return r.ask(question{kind: qProbe, key: nsName{ns, name}}).(probeAnswer)
}

func (r *renderer) askBool(q question) bool     { return r.ask(q).(bool) }
func (r *renderer) askString(q question) string { return r.ask(q).(string) }

// answer computes q's answer from this render's input.
func (r *renderer) answer(q question) any {
	x := r.idx
	switch q.kind {
	case qForeignGateway:
		return foreign(x.gateways.get(q.key), q)
	case qForeignListenerSet:
		return foreign(x.listenerSets.get(q.key), q)
	case qForeignHTTPRoute:
		return foreign(x.httpRoutes.get(q.key), q)
	case qForeignIssuer:
		return foreign(x.issuers.get(q.key), q)
	case qForeignCertificate:
		return foreign(x.certificates.get(q.key), q)
	case qRouteInUse:
		return r.routeNameInUseOf(q.owner, q.uid, q.flag)
	case qMemberRouteInUse:
		return r.memberRouteInUseOf(q.owner, q.uid, q.key.name)
	case qBackendMissing:
		return r.backendMissingOf(q.key, q.port)
	case qAnchorRelease:
		if a := x.anchors.get(q.key); a != nil && a.Spec.Release != "" {
			return a.Spec.Release
		}
		return q.key.name
	case qSecretExists:
		return x.secrets.get(q.key) != nil
	case qWildcardSecret:
		s, reason, msg := r.wildcardSecretOf(q.owner.namespace, q.key.namespace, q.key.name)
		return wildcard{s, reason, msg}
	case qHTTPRoutes:
		return x.httpRoutes.in(q.key.namespace)
	case qClaimTLSRoutes:
		var out []*gwv1.TLSRoute
		for _, tr := range x.tlsRoutes.in(q.key.namespace) {
			if tr.Labels[LabelTenantGateway] != q.owner.name && attachesTo(tr.Namespace, tr.Spec.ParentRefs, q.owner, q.flag) {
				out = append(out, tr)
			}
		}
		return out
	case qLabelled:
		return x.labelled[q.key.namespace]
	case qCertificateSecret:
		if c := x.certificates.get(q.key); c != nil {
			return c.Spec.SecretName
		}
		return ""
	case qProbe:
		p, ok := r.opts.Probes[[2]string{q.key.namespace, q.key.name}]
		return probeAnswer{p, ok}
	}
	panic("render: unknown question")
}

// foreign is the answer of the qForeign* questions: o exists and its controller is not the
// TenantGateway q asks for.
func foreign[T interface {
	comparable
	metav1.Object
}](o T, q question) bool {
	var none T
	return o != none && !ownedByName(o, q.owner.name, q.uid)
}

// same reports whether two answers to one question are equal: the same objects (by
// identity) for lists, equal values otherwise.
func same(a, b any) bool {
	switch a := a.(type) {
	case []*gwv1.HTTPRoute:
		return slices.Equal(a, b.([]*gwv1.HTTPRoute))
	case []*gwv1.TLSRoute:
		return slices.Equal(a, b.([]*gwv1.TLSRoute))
	case []*corev1.Namespace:
		return slices.Equal(a, b.([]*corev1.Namespace))
	case probeAnswer:
		return reflect.DeepEqual(a, b)
	}
	return a == b
}

// attachesTo is attaches for a TenantGateway known by namespace and name (viaSet: it
// publishes through a ListenerSet).
func attachesTo(ns string, refs []gwv1.ParentReference, t nsName, viaSet bool) bool {
	want := "Gateway"
	if viaSet {
		want = "ListenerSet"
	}
	for _, p := range refs {
		pns := ns
		if p.Namespace != nil {
			pns = string(*p.Namespace)
		}
		group, kind := gwv1.GroupName, "Gateway"
		if p.Group != nil {
			group = string(*p.Group)
		}
		if p.Kind != nil {
			kind = string(*p.Kind)
		}
		if group == gwv1.GroupName && kind == want && pns == t.namespace && string(p.Name) == t.name {
			return true
		}
	}
	return false
}

// granted is translate.Granted on this render's ReferenceGrants.
func (r *renderer) granted(fromNS, toNS, name string) bool {
	return translate.Granted(r.in.ReferenceGrants, "Gateway", fromNS, "Secret", toNS, name)
}
