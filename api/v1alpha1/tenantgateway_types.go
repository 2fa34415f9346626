package v1alpha1

import (
	acmev1 "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TenantGateway is one tenant's gateway: "this tenant publishes under apex". snigate renders
// it into a Gateway of the same name and namespace with its listeners, an HTTP-to-HTTPS
// redirect and, per certificate mode, the cert-manager objects; the status says what was
// rendered and why anything is not ready.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tgw,categories=snigate
// +kubebuilder:printcolumn:name="Apex",type=string,JSONPath=`.spec.apex`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.certificates.mode`
// +kubebuilder:printcolumn:name="Listeners",type=integer,JSONPath=`.status.listenerCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TenantGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TenantGatewaySpec `json:"spec"`
	// +optional
	Status TenantGatewayStatus `json:"status,omitempty"`
}

// TenantGatewaySpec is what a tenant publishes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.tlsPassthroughListeners) || !has(self.tlsPassthroughServices) || self.tlsPassthroughListeners.all(l, !(l.name in self.tlsPassthroughServices))",message="tlsPassthroughListeners[].name must differ from every tlsPassthroughServices entry: both render a listener named tls-<name>",fieldPath=".tlsPassthroughListeners"
// +kubebuilder:validation:XValidation:rule="!has(self.tlsPassthroughListeners) || self.tlsPassthroughListeners.all(a, self.tlsPassthroughListeners.filter(b, b.port == a.port).size() == 1)",message="tlsPassthroughListeners[].port must be unique",fieldPath=".tlsPassthroughListeners"
// +kubebuilder:validation:XValidation:rule="!has(self.tlsPassthroughListeners) || self.tlsPassthroughListeners.all(l, l.hostname == self.apex || l.hostname.endsWith('.' + self.apex))",message="tlsPassthroughListeners[].hostname must be the apex or a name under it",fieldPath=".tlsPassthroughListeners"
type TenantGatewaySpec struct {
	// Apex is the DNS subdomain the tenant publishes under (lowercase, no wildcard).
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Apex string `json:"apex"`

	// ParentGatewayRef renders the tenant's listeners as a ListenerSet on this shared
	// platform Gateway instead of a Gateway of its own: tenants then share its address
	// (every tenant's PostgreSQL on 5432, each under its own apex). The Gateway must allow
	// ListenerSets from the tenant's namespace (spec.allowedListeners); a listener that
	// another tenant's older set already holds is Conflicted. Routes then name the
	// ListenerSet (kind: ListenerSet, the TenantGateway's name) as their parent. The
	// plaintext port 80 takes two listeners, http (the apex) and http-sub (*.apex), since a
	// shared port cannot have one listener without hostname per tenant.
	//
	// +optional
	ParentGatewayRef *ParentGatewayReference `json:"parentGatewayRef,omitempty"`

	// GatewayClassName is the class of the rendered Gateway.
	//
	// +optional
	// +kubebuilder:default=snigate
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	GatewayClassName string `json:"gatewayClassName,omitempty"`

	// Certificates says where the HTTPS listeners' certificates come from.
	//
	// +optional
	// +kubebuilder:default={mode: http01}
	Certificates Certificates `json:"certificates,omitempty"`

	// TLSPassthroughServices are layer-7 services passed through on 443, next to the HTTPS
	// listeners: listener tls-<svc> with hostname <svc>.<apex>. Each is a DNS-1123 label.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=59
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TLSPassthroughServices []string `json:"tlsPassthroughServices,omitempty"`

	// TLSPassthroughListeners are TLS Passthrough listeners on ports of their own (a
	// database engine's native port): listener tls-<name>.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	TLSPassthroughListeners []PassthroughListener `json:"tlsPassthroughListeners,omitempty"`

	// AttachedNamespaces are platform namespaces (monitoring, a registry…) whose routes may
	// attach to this gateway. The controller labels them snigate.dev/gateway and records
	// that it did, so removing an entry removes only labels it wrote.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	AttachedNamespaces []string `json:"attachedNamespaces,omitempty"`

	// DatabaseHostnames says which hostnames a DatabaseExposure gets: subdomain
	// (<release>.<engine>.<apex>, listener hostname *.<engine>.<apex>), flat
	// (<release>.<apex>) or both (default; with flat or both the engine listener's hostname
	// is *.<apex>). snigate's listeners are isolated per port, so *.<apex> on an engine's
	// port never takes traffic of the 443 listeners, nor they its.
	//
	// +optional
	// +kubebuilder:default=both
	DatabaseHostnames DatabaseHostnames `json:"databaseHostnames,omitempty"`

	// Access restricts who may connect to every listener the tenant gateway owns (its
	// Gateway's, or its ListenerSet's on a shared Gateway) but the plaintext HTTP ones,
	// which must stay reachable for ACME HTTP-01 challenges: snigate renders it into an
	// AccessPolicy on that Gateway or ListenerSet, owned by the TenantGateway. Each
	// DatabaseExposure's own spec.access narrows it further.
	//
	// +optional
	Access *Access `json:"access,omitempty"`
}

// DatabaseHostnames is subdomain, flat or both.
//
// +kubebuilder:validation:Enum=subdomain;flat;both
type DatabaseHostnames string

// The DatabaseHostnames values.
const (
	DatabaseHostnamesSubdomain DatabaseHostnames = "subdomain"
	DatabaseHostnamesFlat      DatabaseHostnames = "flat"
	DatabaseHostnamesBoth      DatabaseHostnames = "both"
)

// CertificateMode names where HTTPS certificates come from.
//
// +kubebuilder:validation:Enum=http01;dns01;existingSecret
type CertificateMode string

const (
	// CertificatesHTTP01: one cert-manager Certificate per HTTPS hostname, solved over the
	// gateway's own http listener.
	CertificatesHTTP01 CertificateMode = "http01"
	// CertificatesDNS01: one wildcard cert-manager Certificate for the apex, *.<apex> and
	// every inheriting child's apex.
	CertificatesDNS01 CertificateMode = "dns01"
	// CertificatesExistingSecret: the wildcard certificate is a kubernetes.io/tls Secret
	// the platform supplies; nothing is rendered for cert-manager.
	CertificatesExistingSecret CertificateMode = "existingSecret"
)

// Certificates configures the HTTPS listeners' certificates.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'existingSecret' || has(self.wildcardSecretRef)",message="wildcardSecretRef is required with mode existingSecret",fieldPath=".wildcardSecretRef"
// +kubebuilder:validation:XValidation:rule="self.mode != 'dns01' || has(self.dns01) || has(self.issuerRef)",message="mode dns01 needs dns01 (a solver) or issuerRef (an issuer that has one)",fieldPath=".dns01"
// +kubebuilder:validation:XValidation:rule="!(has(self.acme) && has(self.issuerRef))",message="acme and issuerRef are exclusive: acme renders an Issuer, issuerRef names one",fieldPath=".acme"
type Certificates struct {
	// Mode is http01 (default), dns01 or existingSecret.
	//
	// +optional
	// +kubebuilder:default=http01
	Mode CertificateMode `json:"mode,omitempty"`

	// IssuerRef names a cert-manager Issuer or ClusterIssuer to use instead of rendering one.
	//
	// +optional
	IssuerRef *cmmeta.IssuerReference `json:"issuerRef,omitempty"`

	// ACME renders a per-tenant ACME Issuer for any ACME server.
	//
	// +optional
	ACME *ACMEIssuer `json:"acme,omitempty"`

	// DNS01 is the DNS-01 solver of the rendered Issuer: cert-manager's own type, so every
	// provider cert-manager supports works.
	//
	// +optional
	DNS01 *acmev1.ACMEChallengeSolverDNS01 `json:"dns01,omitempty"`

	// WildcardSecretRef names the existingSecret mode's kubernetes.io/tls Secret, in the
	// TenantGateway's namespace, covering <apex> and *.<apex>.
	//
	// +optional
	WildcardSecretRef *SecretRef `json:"wildcardSecretRef,omitempty"`
}

// ACMEIssuer is the ACME account of a rendered Issuer.
type ACMEIssuer struct {
	// Server is the ACME directory URL.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^https://`
	Server string `json:"server"`
	// Email is the account's contact address.
	//
	// +optional
	Email string `json:"email,omitempty"`
	// CABundle is the PEM bundle of CAs that sign the ACME server's own HTTPS certificate,
	// for a private ACME server (step-ca, an internal Boulder, Pebble); empty: the system's
	// roots. It is passed on to the Issuer's spec.acme.caBundle.
	//
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
}

// ParentGatewayReference names the shared Gateway of spec.parentGatewayRef.
type ParentGatewayReference struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SecretRef names a Secret, in the same namespace unless Namespace says otherwise.
type SecretRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace holds the Secret when it is not the TenantGateway's (one wildcard key for
	// several tenants, instead of a copy of the key in each namespace). A ReferenceGrant in
	// that namespace must allow Gateways of the TenantGateway's namespace to reference it;
	// without one the HTTPS listeners serve nothing and Ready says RefNotPermitted.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// PassthroughListener is a TLS Passthrough listener on a port of its own.
type PassthroughListener struct {
	// Name gives the listener its name, tls-<name>: a DNS-1123 label.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=59
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Port is the listener's port; 80 and 443 are the gateway's own.
	//
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:validation:XValidation:rule="self != 80 && self != 443",message="ports 80 and 443 are the gateway's http and https ports"
	Port int32 `json:"port"`
	// Hostname is exact or a left-most wildcard ("*.pg.<apex>"), the apex or under it.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Hostname string `json:"hostname"`
}

// TenantGatewayStatus says what was rendered and why anything is not ready.
type TenantGatewayStatus struct {
	// ObservedGeneration is the generation this status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Accepted (the spec is valid), Ready (the Gateway and every listener are
	// programmed), ListenerBudget (room left under the Gateway's 64 listeners).
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// GatewayRef is the rendered Gateway.
	//
	// +optional
	GatewayRef *GatewayRef `json:"gatewayRef,omitempty"`

	// Addresses are the rendered Gateway's addresses.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Addresses []gwv1.GatewayStatusAddress `json:"addresses,omitempty"`

	// Listeners are the rendered Gateway's listeners.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Listeners []TenantListenerStatus `json:"listeners,omitempty"`

	// ListenerCount is the number of listeners the spec and its routes assemble, even when
	// that is more than a Gateway can hold.
	//
	// +optional
	ListenerCount int32 `json:"listenerCount"`
}

// GatewayRef names a Gateway.
type GatewayRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// TenantListenerStatus is one rendered listener.
type TenantListenerStatus struct {
	Name     string `json:"name"`
	Port     int32  `json:"port"`
	Hostname string `json:"hostname,omitempty"`
	// Ready is true when the listener is programmed with everything it needs.
	Ready bool `json:"ready"`
	// Certificate names the Secret an HTTPS listener serves.
	//
	// +optional
	Certificate string `json:"certificate,omitempty"`
	// AttachedRoutes counts the routes attached to the listener.
	AttachedRoutes int32 `json:"attachedRoutes"`
	// Reason says why the listener is not ready.
	//
	// +optional
	Reason string `json:"reason,omitempty"`
}

// Condition types and reasons of a TenantGateway.
const (
	ConditionAccepted       = "Accepted"
	ConditionReady          = "Ready"
	ConditionListenerBudget = "ListenerBudget"

	ReasonAccepted        = "Accepted"
	ReasonInvalid         = "Invalid"
	ReasonHostnameOverlap = "HostnameOverlap"
	ReasonDuplicate       = "OneTenantGatewayPerNamespace"

	ReasonReady             = "Ready"
	ReasonPending           = "Pending"
	ReasonListenersNotReady = "ListenersNotReady"
	ReasonTooManyListeners  = "TooManyListeners"
	ReasonNameInUse         = "NameInUse"

	ReasonWithinBudget = "WithinBudget"
	ReasonNearLimit    = "NearLimit"

	// Listener reasons.
	ReasonCertificatesNeedCluster = "CertificatesNeedCluster"
	ReasonSecretNotFound          = "SecretNotFound"
	ReasonInvalidSecret           = "InvalidSecret"
	ReasonCertificatePending      = "CertificatePending"
	ReasonNoIssuer                = "NoIssuer"
	ReasonCertManagerNotInstalled = "CertManagerNotInstalled"
	ReasonWildcardNeedsDNS01      = "WildcardNeedsDNS01"
	ReasonRefNotPermitted         = "RefNotPermitted"
)

// TenantGatewayList is a list of TenantGateways.
//
// +kubebuilder:object:root=true
type TenantGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantGateway `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TenantGateway{}, &TenantGatewayList{})
}
