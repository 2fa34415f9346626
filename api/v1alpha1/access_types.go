package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// AccessPolicy says which clients may connect to what it targets, and how much: a
// per-database allow-list, block list, connection limits and a per-client connection rate,
// the things a LoadBalancer of its own gave each database (loadBalancerSourceRanges) and a
// shared address takes away. It is a policy attached directly to its targets (Gateway API
// policy attachment, GEP-713): Gateways (with sectionName: one listener), ListenerSets (with
// sectionName: one of their listeners), TLSRoutes and TCPRoutes, all in the policy's own
// namespace, so a tenant can never attach one to another tenant's route.
//
// A connection must pass every policy on its path: the policies of its Gateway, of its
// listener, of the ListenerSet the listener belongs to, and of its route. Allow-lists
// intersect and every limit applies, so a platform can deny a range on the Gateway while a
// tenant narrows its own route. Of two policies naming the very same target, the older
// applies there and the other says Accepted=False/Conflicted.
//
// The check is made once the route is known and before any backend is dialed; a refused
// client is closed without a byte (after PostgreSQL's 'S'). Limits are counted by each
// data plane replica on its own.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ap,categories=snigate
// +kubebuilder:printcolumn:name="Sources",type=string,JSONPath=`.spec.sourceRanges`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxConnections`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AccessPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec AccessPolicySpec `json:"spec"`
	// Status has one ancestor per target, with the Accepted condition saying whether the
	// policy took effect there and why not (TargetNotFound, Conflicted, Invalid).
	//
	// +optional
	Status gwv1.PolicyStatus `json:"status,omitempty"`
}

// AccessPolicySpec is what an AccessPolicy targets and sets.
type AccessPolicySpec struct {
	// TargetRefs are the Gateways and ListenerSets (with sectionName: one listener) and the
	// TLSRoutes and TCPRoutes, in the policy's namespace, whose connections it checks.
	//
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:message="targetRefs must name Gateways, ListenerSets, TLSRoutes or TCPRoutes (group gateway.networking.k8s.io)",rule="self.all(r, r.group == 'gateway.networking.k8s.io' && r.kind in ['Gateway', 'ListenerSet', 'TLSRoute', 'TCPRoute'])"
	// +kubebuilder:validation:XValidation:message="sectionName names a listener: only with kind Gateway or ListenerSet",rule="self.all(r, !has(r.sectionName) || r.kind in ['Gateway', 'ListenerSet'])"
	TargetRefs []gwv1.LocalPolicyTargetReferenceWithSectionName `json:"targetRefs"`

	Access `json:",inline"`
}

// Access is who may connect, and how much: the body of an AccessPolicy, and what a
// DatabaseExposure or a TenantGateway asks for in spec.access (snigate renders it into an
// AccessPolicy).
type Access struct {
	// SourceRanges are the client addresses (CIDR: 203.0.113.0/24, 2001:db8::/48,
	// 192.0.2.7/32) that may connect; every other address is refused. Empty or absent
	// means no address is refused for not being listed.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:message="sourceRanges must be CIDRs",rule="self.all(r, isCIDR(r))"
	SourceRanges []string `json:"sourceRanges,omitempty"`

	// DeniedRanges are client addresses never admitted, whatever sourceRanges says: a
	// platform's block list. Checked first.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:message="deniedRanges must be CIDRs",rule="self.all(r, isCIDR(r))"
	DeniedRanges []string `json:"deniedRanges,omitempty"`

	// MaxConnections caps the connections open at once to the target, per data plane
	// replica: the one beyond it is refused (route_connection_limit).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxConnections *int32 `json:"maxConnections,omitempty"`

	// PerClient limits each client: an IPv4 address, or an IPv6 prefix
	// (ipv6PrefixLength, /64 by default, since one host commonly holds a whole /64).
	//
	// +optional
	PerClient *PerClientLimits `json:"perClient,omitempty"`
}

// PerClientLimits are the limits each client address has on its own.
//
// +kubebuilder:validation:XValidation:message="perClient needs maxConnections or connectionsPerMinute",rule="has(self.maxConnections) || has(self.connectionsPerMinute)"
// +kubebuilder:validation:XValidation:message="burst needs connectionsPerMinute",rule="!has(self.burst) || has(self.connectionsPerMinute)"
type PerClientLimits struct {
	// MaxConnections caps the connections one client has open at once to the target, per
	// data plane replica (client_connection_limit).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxConnections *int32 `json:"maxConnections,omitempty"`

	// ConnectionsPerMinute is the rate at which one client may open new connections, per
	// data plane replica: a token bucket that refills at this rate and holds Burst tokens;
	// a connection without a token is refused (client_rate_limited).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	ConnectionsPerMinute *int32 `json:"connectionsPerMinute,omitempty"`

	// Burst is how many connections a client may open at once before the rate applies
	// (default connectionsPerMinute: a connection pool that opens all its connections at
	// start is not refused).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	Burst *int32 `json:"burst,omitempty"`

	// IPv6PrefixLength is how much of an IPv6 address names one client (default 64).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	IPv6PrefixLength *int32 `json:"ipv6PrefixLength,omitempty"`
}

// DefaultIPv6PrefixLength is how much of an IPv6 address names one client by default.
const DefaultIPv6PrefixLength = 64

// AccessInForce is one AccessPolicy a connection to a DatabaseExposure must pass, as its
// status shows it.
type AccessInForce struct {
	// Policy is the AccessPolicy, namespace/name.
	Policy string `json:"policy"`
	// Target is what it is attached to: "Gateway ns/name", "Gateway ns/name listener l",
	// "ListenerSet ns/name", "TLSRoute ns/name".
	Target string `json:"target"`
	// Rules says what it allows: the ranges, the limits, per data plane replica.
	Rules string `json:"rules"`
}

// +kubebuilder:object:root=true

// AccessPolicyList is a list of AccessPolicies.
type AccessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AccessPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AccessPolicy{}, &AccessPolicyList{})
}
