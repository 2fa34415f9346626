package v1alpha1

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrustAnchor publishes the CA certificates of a Secret a tenant may not read (one that
// holds a CA's key, say) as a key-free Secret the tenant may: <release>.tenant-ca with the
// one key ca.crt, and a Role and RoleBinding letting spec.readers get exactly that Secret.
// Only certificates that are CAs are published; anything else, a private key above all,
// stops the publication and says why.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=snigate
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrustAnchor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TrustAnchorSpec `json:"spec"`
	// +optional
	Status TrustAnchorStatus `json:"status,omitempty"`
}

// TrustAnchorSpec says what to publish and to whom.
type TrustAnchorSpec struct {
	// Release names the published Secret, <release>.tenant-ca (default metadata.name): a
	// DNS-1035 label, so that no other release's name can collide with it.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Release string `json:"release,omitempty"`

	// SourceSecretRef is the Secret (same namespace) whose key holds the CA certificates.
	//
	// +required
	SourceSecretRef SourceSecretRef `json:"sourceSecretRef"`

	// Readers may get the published Secret (and only it).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Readers []rbacv1.Subject `json:"readers,omitempty"`
}

// SourceSecretRef names a key of a Secret in the same namespace.
type SourceSecretRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key holding the PEM certificates (default ca.crt).
	//
	// +optional
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// TrustAnchorStatus says what was published.
type TrustAnchorStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the projection is published).
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// SecretName is the published Secret.
	//
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Certificates are the published CA certificates' subjects and SHA-256 fingerprints.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Certificates []PublishedCA `json:"certificates,omitempty"`
}

// PublishedCA is one CA certificate in the published bundle.
type PublishedCA struct {
	Subject  string      `json:"subject"`
	SHA256   string      `json:"sha256"`
	NotAfter metav1.Time `json:"notAfter"`
	// Previous is true for a CA kept from before a rotation while a backend still serves a
	// chain from it.
	//
	// +optional
	Previous bool `json:"previous,omitempty"`
}

// TrustAnchor reasons of the Ready condition.
const (
	ReasonPublished          = "Published"
	ReasonSourceNotFound     = "SourceNotFound"
	ReasonNotACertificate    = "NotACertificate"
	ReasonNotACA             = "NotACA"
	ReasonContainsPrivateKey = "ContainsPrivateKey"
	ReasonNameCollision      = "NameCollision"
)

// TrustAnchorList is a list of TrustAnchors.
//
// +kubebuilder:object:root=true
type TrustAnchorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrustAnchor `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TrustAnchor{}, &TrustAnchorList{})
}
