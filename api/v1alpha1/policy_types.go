package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// BackendPolicy sets how snigate connects to the backends of a Service: a policy attached
// directly to the Service (Gateway API policy attachment, GEP-713), taking effect wherever a
// route of one of snigate's Gateways sends traffic to it. Today it holds the PROXY protocol
// header snigate writes before anything else on each backend connection, so the database
// sees the client's address rather than the gateway's; it is the place for more backend
// settings later.
//
// One Service takes one BackendPolicy: of two that target it, the older (then the first by
// namespace/name) applies and the other says Accepted=False/Conflicted.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=snigate
// +kubebuilder:printcolumn:name="PROXY",type=string,JSONPath=`.spec.proxyProtocol.version`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackendPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackendPolicySpec `json:"spec"`
	// Status has one ancestor per Gateway through which a targeted Service is reached (or,
	// where none is, the target itself), with the Accepted condition saying whether the
	// policy took effect there and why not.
	//
	// +optional
	Status gwv1.PolicyStatus `json:"status,omitempty"`
}

// BackendPolicySpec is what a BackendPolicy sets.
type BackendPolicySpec struct {
	// TargetRefs are the Services, in the policy's namespace, whose backends the policy
	// configures.
	//
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:message="targetRefs must name Services (group \"\", kind Service)",rule="self.all(r, r.group == '' && r.kind == 'Service')"
	TargetRefs []gwv1.LocalPolicyTargetReference `json:"targetRefs"`

	// ProxyProtocol makes snigate write a PROXY protocol header, carrying the client's
	// address (and, in v2, the TLVs asked for), as the first bytes of every connection to
	// the backends. The backend must expect it: one that does not reads it as garbage.
	//
	// +optional
	ProxyProtocol *BackendProxyProtocol `json:"proxyProtocol,omitempty"`
}

// ProxyProtocolVersion is the PROXY protocol version written: v1 (text) or v2 (binary).
//
// +kubebuilder:validation:Enum=v1;v2
type ProxyProtocolVersion string

// The PROXY protocol versions.
const (
	ProxyProtocolV1 ProxyProtocolVersion = "v1"
	ProxyProtocolV2 ProxyProtocolVersion = "v2"
)

// ProxyProtocolTLV is a type-length-value field of a PROXY v2 header.
//
// +kubebuilder:validation:Enum=authority;alpn
type ProxyProtocolTLV string

// The TLVs snigate can write.
const (
	// TLVAuthority (PP2_TYPE_AUTHORITY) is the server name the client asked for: the SNI of
	// its ClientHello.
	TLVAuthority ProxyProtocolTLV = "authority"
	// TLVALPN (PP2_TYPE_ALPN) is the application protocol: the one negotiated where snigate
	// terminates TLS, the client's first offer where it passes TLS through (the backend has
	// not chosen yet when the header is written).
	TLVALPN ProxyProtocolTLV = "alpn"
)

// BackendProxyProtocol is the PROXY header written to a backend.
//
// +kubebuilder:validation:XValidation:message="tlvs need version v2",rule="!has(self.tlvs) || size(self.tlvs) == 0 || self.version == 'v2'"
type BackendProxyProtocol struct {
	// +required
	Version ProxyProtocolVersion `json:"version"`
	// TLVs to add to a v2 header.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	TLVs []ProxyProtocolTLV `json:"tlvs,omitempty"`
}

// +kubebuilder:object:root=true

// BackendPolicyList is a list of BackendPolicies.
type BackendPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackendPolicy `json:"items"`
}

// ListenerPolicy sets how a Gateway's listeners accept connections: a policy attached
// directly to a Gateway, or to one listener of it with sectionName. Today it holds whether
// connections begin with a PROXY protocol header (a load balancer in front that sends one)
// and from which addresses snigate believes it.
//
// The header comes before the ClientHello, so it is a property of the bound port: every
// listener sharing a port with a listener the policy targets gets the same setting, and a
// second policy that asks something else for the same port says Accepted=False/Conflicted.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=snigate
// +kubebuilder:printcolumn:name="Required",type=boolean,JSONPath=`.spec.proxyProtocol.required`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ListenerPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ListenerPolicySpec `json:"spec"`
	// Status has one ancestor per targeted Gateway, with the Accepted condition.
	//
	// +optional
	Status gwv1.PolicyStatus `json:"status,omitempty"`
}

// ListenerPolicySpec is what a ListenerPolicy sets.
type ListenerPolicySpec struct {
	// TargetRefs are the Gateways (with sectionName: their listeners), in the policy's
	// namespace.
	//
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:message="targetRefs must name Gateways (group gateway.networking.k8s.io, kind Gateway)",rule="self.all(r, r.group == 'gateway.networking.k8s.io' && r.kind == 'Gateway')"
	TargetRefs []gwv1.LocalPolicyTargetReferenceWithSectionName `json:"targetRefs"`

	// ProxyProtocol accepts a PROXY protocol header (v1 or v2) at the start of connections
	// from TrustedRanges. The address it carries is the client's for everything after it:
	// logs, metrics, the access log, and the header written to backends.
	//
	// +optional
	ProxyProtocol *ListenerProxyProtocol `json:"proxyProtocol,omitempty"`
}

// ListenerProxyProtocol says whom snigate believes a PROXY header from.
type ListenerProxyProtocol struct {
	// TrustedRanges are the source addresses (CIDR: 10.0.0.0/8, 2001:db8::/32, 192.0.2.7/32)
	// allowed to send a header: the load balancers. A connection from elsewhere that begins
	// with a PROXY header is closed without a byte sent (a client must not choose the
	// address it is logged and authorized as).
	//
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:message="trustedRanges must be CIDRs",rule="self.all(r, isCIDR(r))"
	TrustedRanges []string `json:"trustedRanges"`
	// Required closes a connection from a trusted range that does not begin with a header.
	// False passes it on with its own address (a load balancer's health check, say).
	//
	// +optional
	Required bool `json:"required,omitempty"`
}

// +kubebuilder:object:root=true

// ListenerPolicyList is a list of ListenerPolicies.
type ListenerPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ListenerPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BackendPolicy{}, &BackendPolicyList{}, &ListenerPolicy{}, &ListenerPolicyList{})
}

// Policy is what every policy kind of snigate's has: a gwv1.PolicyStatus, which the status
// writer merges the same way for all of them.
//
// +kubebuilder:object:generate=false
type Policy interface {
	PolicyStatus() *gwv1.PolicyStatus
}

// PolicyStatus is the policy's status.
func (b *BackendPolicy) PolicyStatus() *gwv1.PolicyStatus { return &b.Status }

// PolicyStatus is the policy's status.
func (l *ListenerPolicy) PolicyStatus() *gwv1.PolicyStatus { return &l.Status }

// PolicyStatus is the policy's status.
func (a *AccessPolicy) PolicyStatus() *gwv1.PolicyStatus { return &a.Status }
