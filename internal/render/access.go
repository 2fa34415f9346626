package render

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Access control in the tenant model: spec.access of a DatabaseExposure renders an
// AccessPolicy of the exposure's name on its route (TLSRoute or TCPRoute), owned by the
// exposure; spec.access of a TenantGateway renders AccessPolicy <t>-access on its Gateway,
// or on its ListenerSet when it shares a platform Gateway, owned by the TenantGateway.
// translate checks a connection against both (and any other policy on its path), and the
// exposure's status lists what is in force (Complete).

// TenantAccessName is the name of the AccessPolicy a TenantGateway's spec.access renders.
func TenantAccessName(t *v1alpha1.TenantGateway) string { return t.Name + "-access" }

// tenantAccess renders the TenantGateway's spec.access, if any.
func (b *build) tenantAccess() {
	a := b.t.Spec.Access
	if a == nil {
		return
	}
	kind := gwv1.Kind("Gateway")
	if b.t.Spec.ParentGatewayRef != nil {
		kind = "ListenerSet"
	}
	b.access = append(b.access, accessPolicy(b.meta(TenantAccessName(b.t)), kind, b.t.Name, a))
}

// exposureAccess renders an exposure's spec.access on a route of it (kind), its own or a
// member's, with the route's metadata (name, labels, owner).
func (b *build) exposureAccess(d *v1alpha1.DatabaseExposure, m metav1.ObjectMeta, kind gwv1.Kind) {
	if d.Spec.Access == nil {
		return
	}
	b.access = append(b.access, accessPolicy(*m.DeepCopy(), kind, m.Name, d.Spec.Access))
}

func accessPolicy(m metav1.ObjectMeta, kind gwv1.Kind, target string, a *v1alpha1.Access) *v1alpha1.AccessPolicy {
	return &v1alpha1.AccessPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AccessPolicy"},
		ObjectMeta: m,
		Spec: v1alpha1.AccessPolicySpec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{
				Group: gwv1.GroupName, Kind: kind, Name: gwv1.ObjectName(target),
			}}},
			Access: *a.DeepCopy(),
		},
	}
}

// exposurePolicy reports whether an AccessPolicy was rendered for a DatabaseExposure (not
// for its TenantGateway).
func exposurePolicy(a *v1alpha1.AccessPolicy) bool {
	_, ok := a.Labels[LabelDatabaseExposure]
	return ok
}
