package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DatabaseExposure publishes one database release through its namespace's TenantGateway:
// snigate renders one TLSRoute for it on the engine's shared listener (tls-<engine> on the
// engine's native port, created with the first exposure of that engine and removed with the
// last), routed by SNI without terminating TLS, so the certificate a client checks is the
// database's own. A probe connects to the backend the way the engine's clients do and says
// in CertificateVerified whether that certificate names the external hostnames.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dbx,categories=snigate
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Hostname",type=string,JSONPath=`.status.hostnames[0]`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.status.port`
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.conditions[?(@.type=="Programmed")].status`
// +kubebuilder:printcolumn:name="Certificate",type=string,JSONPath=`.status.conditions[?(@.type=="CertificateVerified")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DatabaseExposure struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DatabaseExposureSpec `json:"spec"`
	// +optional
	Status DatabaseExposureStatus `json:"status,omitempty"`
}

// Engine names a database engine. The table of what each means (native port, listener,
// how its clients start TLS) is package engine's.
//
// +kubebuilder:validation:Enum=postgres;redis;valkey;mongodb;nats;kafka;clickhouse;rabbitmq;opensearch;mariadb;mysql;custom
type Engine string

// The engines.
const (
	EnginePostgres   Engine = "postgres"
	EngineRedis      Engine = "redis"
	EngineValkey     Engine = "valkey"
	EngineMongoDB    Engine = "mongodb"
	EngineNATS       Engine = "nats"
	EngineKafka      Engine = "kafka"
	EngineClickHouse Engine = "clickhouse"
	EngineRabbitMQ   Engine = "rabbitmq"
	EngineOpenSearch Engine = "opensearch"
	EngineMariaDB    Engine = "mariadb"
	EngineMySQL      Engine = "mysql"
	EngineCustom     Engine = "custom"
)

// DatabaseExposureSpec is one exposed database release.
//
// +kubebuilder:validation:XValidation:rule="self.engine != 'custom' || has(self.port)",message="engine custom has no native port: set port",fieldPath=".port"
type DatabaseExposureSpec struct {
	// Engine is the database engine.
	//
	// +required
	Engine Engine `json:"engine"`

	// Release names the database in its hostnames, <release>.<engine>.<apex> and
	// <release>.<apex> (default metadata.name): a DNS-1035 label, so it holds no dot.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Release string `json:"release,omitempty"`

	// BackendRef is the database's Service, in the same namespace.
	//
	// +required
	BackendRef DatabaseBackendRef `json:"backendRef"`

	// TLS says the database speaks TLS. It must: a plaintext external database is refused.
	//
	// +optional
	// +kubebuilder:default={enabled: true}
	TLS DatabaseTLS `json:"tls,omitempty"`

	// Port is the listener's port (default the engine's native port). For mariadb and mysql,
	// whose servers speak first so that no SNI can route them, it is required: the database
	// gets a TCP listener of its own on this port, on the same tenant address.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:validation:XValidation:rule="self != 80 && self != 443",message="ports 80 and 443 are the gateway's http and https ports"
	Port *int32 `json:"port,omitempty"`

	// TrustAnchorRef names the TrustAnchor (same namespace) clients verify the database
	// with; the probe checks that the served chain leads to it.
	//
	// +optional
	TrustAnchorRef *LocalRef `json:"trustAnchorRef,omitempty"`

	// CertificateRef names the cert-manager Certificate (same namespace) whose Secret the
	// database serves: snigate adds the external hostnames to its dnsNames (and takes off
	// only those again when the exposure goes), so that cert-manager reissues a certificate
	// that names them. Without it, CertificateVerified lists the names to add by hand.
	//
	// +optional
	CertificateRef *LocalRef `json:"certificateRef,omitempty"`

	// TenantGatewayRef names the TenantGateway to publish through (default: the one whose
	// tree the namespace is in).
	//
	// +optional
	TenantGatewayRef *TenantGatewayRef `json:"tenantGatewayRef,omitempty"`

	// Access restricts who may connect to the database and how much: its own allow-list
	// (what loadBalancerSourceRanges gave a database with a LoadBalancer of its own), block
	// list and connection limits. snigate renders it into an AccessPolicy on the
	// exposure's route, owned by the exposure, and one on each member's route; every
	// policy of the listener applies too.
	//
	// +optional
	Access *Access `json:"access,omitempty"`

	// Members are the nodes of a clustered database that clients reconnect to by name
	// after the first contact (Kafka brokers, MongoDB replica set members): each gets the
	// hostnames <member>.<release>.<engine>.<apex> (and <member>.<release>.<apex>, per
	// the TenantGateway's databaseHostnames) and a TLSRoute of its own to its own Service,
	// on the same listener as the exposure. backendRef stays the bootstrap (seed list)
	// Service, over every node. Each node must advertise its member hostname (Kafka
	// advertised.listeners, MongoDB replica set hosts or horizons): docs/engines.md.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Members []DatabaseMember `json:"members,omitempty"`
}

// DatabaseMember is one node of a clustered database, reached by a hostname of its own.
type DatabaseMember struct {
	// Name is the member's first hostname label: a DNS-1035 label (no dot).
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// BackendRef is the member's own Service (one node behind it), in the same namespace.
	//
	// +required
	BackendRef DatabaseBackendRef `json:"backendRef"`
}

// DatabaseBackendRef names a Service port in the DatabaseExposure's namespace.
type DatabaseBackendRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// DatabaseTLS is the database's TLS.
type DatabaseTLS struct {
	// Enabled must be true: snigate carries only TLS to an external database, and an
	// exposure that says otherwise is a mistake to refuse, not a mode to serve.
	//
	// +optional
	// +kubebuilder:default=true
	// +kubebuilder:validation:XValidation:rule="self == true",message="an external database must speak TLS: tls.enabled cannot be false (snigate routes databases by the SNI of their TLS ClientHello and never carries plaintext to them)"
	Enabled *bool `json:"enabled,omitempty"`
}

// LocalRef names an object in the same namespace.
type LocalRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// TenantGatewayRef names a TenantGateway.
type TenantGatewayRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace defaults to the root of the namespace's tenant tree.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// DatabaseExposureStatus says how the database is published and whether its certificate
// proves the external hostnames.
type DatabaseExposureStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Accepted, Programmed (the route is accepted and its listener serves on
	// the data plane), CertificateVerified (the probe's verdict).
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Hostnames clients connect to.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=4
	Hostnames []string `json:"hostnames,omitempty"`
	// Listener is the rendered Gateway's listener the route attaches to.
	//
	// +optional
	Listener string `json:"listener,omitempty"`
	// Port is that listener's port.
	//
	// +optional
	Port int32 `json:"port,omitempty"`
	// Addresses are the Gateway's addresses.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Addresses []string `json:"addresses,omitempty"`
	// ServerCertificate is what the backend served to the probe: the certificate of the
	// first endpoint whose verdict is CertificateVerified's (the first that fails, when
	// one does), or of the first endpoint when every one verifies.
	//
	// +optional
	ServerCertificate *ServerCertificate `json:"serverCertificate,omitempty"`
	// Endpoints are the ready endpoints of the exposure's own (bootstrap) Service, each
	// with the certificate it served to the probe: every one is probed.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Endpoints []EndpointCertificate `json:"endpoints,omitempty"`
	// Members are spec.members, each with its hostnames, whether it is published, and the
	// probe's verdict on its endpoints.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Members []MemberStatus `json:"members,omitempty"`
	// Connect is a client command for the engine that works as pasted (given the trust
	// anchor file).
	//
	// +optional
	Connect string `json:"connect,omitempty"`
	// Access lists the AccessPolicies a connection to the database must pass, in the order
	// they are checked (the listener's, then the route's); empty when every address may
	// connect without limit. Limits are counted by each data plane replica on its own.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Access []AccessInForce `json:"access,omitempty"`
}

// ServerCertificate is the leaf certificate a backend served, as the probe saw it.
type ServerCertificate struct {
	// Serial in hexadecimal.
	Serial string `json:"serial"`
	// SHA256 of the DER certificate, hexadecimal.
	SHA256    string      `json:"sha256"`
	NotBefore metav1.Time `json:"notBefore"`
	NotAfter  metav1.Time `json:"notAfter"`
	// +optional
	DNSNames []string `json:"dnsNames,omitempty"`
	// Issuer is the issuer's distinguished name.
	Issuer string `json:"issuer"`
	// CoversHostnames is true when every external hostname is among the certificate's
	// names.
	CoversHostnames bool `json:"coversHostnames"`
	// ChainsToTrustAnchor is whether the served chain verifies against the trust anchor
	// (absent without trustAnchorRef).
	//
	// +optional
	ChainsToTrustAnchor *bool `json:"chainsToTrustAnchor,omitempty"`
}

// EndpointCertificate is one ready endpoint of a route's Service, as the certificate probe
// saw it.
type EndpointCertificate struct {
	// Address is the endpoint, ip:port.
	Address string `json:"address"`
	// Reason is the probe's verdict on this endpoint: a reason of CertificateVerified.
	Reason string `json:"reason"`
	// Serial of the certificate it served, hexadecimal as openssl prints it (absent when
	// none was read).
	//
	// +optional
	Serial string `json:"serial,omitempty"`
	// NotAfter of that certificate.
	//
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
}

// MemberStatus is one member of a DatabaseExposure.
type MemberStatus struct {
	Name string `json:"name"`
	// Hostnames clients reach the member by.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=4
	Hostnames []string `json:"hostnames,omitempty"`
	// Route is the member's TLSRoute, in the exposure's namespace (absent when the member
	// is not published).
	//
	// +optional
	Route string `json:"route,omitempty"`
	// Reason is Accepted when the member is published, or why not all is well: refused
	// (HostnameConflict, NameInUse, ServerSpeaksFirst, Invalid: no route), or published
	// without a Service to send to (BackendNotFound).
	Reason string `json:"reason"`
	// Message explains Reason.
	//
	// +optional
	Message string `json:"message,omitempty"`
	// Certificate is the probe's verdict on the member's endpoints (a reason of
	// CertificateVerified: Verified only when each of them verifies).
	//
	// +optional
	Certificate string `json:"certificate,omitempty"`
	// Endpoints are the ready endpoints of the member's Service, each with the certificate
	// it served to the probe.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Endpoints []EndpointCertificate `json:"endpoints,omitempty"`
}

// Condition types and reasons of a DatabaseExposure (Accepted and its Accepted, Invalid,
// HostnameConflict reasons are shared with TenantGateway).
const (
	ConditionProgrammed          = "Programmed"
	ConditionCertificateVerified = "CertificateVerified"
	// ConditionMembersAccepted, present only with spec.members: True when every member is
	// published with its Service found.
	ConditionMembersAccepted = "MembersAccepted"

	ReasonServerSpeaksFirst        = "ServerSpeaksFirst"
	ReasonHostnameConflict         = "HostnameConflict"
	ReasonPortInUse                = "PortInUse"
	ReasonNoTenantGateway          = "NoTenantGateway"
	ReasonTenantGatewayNotRendered = "TenantGatewayNotRendered"
	ReasonProgrammed               = "Programmed"
	ReasonNotProgrammed            = "NotProgrammed"
	// ReasonBackendNotFound: a member's Service (or its port) does not exist.
	ReasonBackendNotFound = "BackendNotFound"

	ReasonVerified         = "Verified"
	ReasonMissingDNSNames  = "MissingDNSNames"
	ReasonExpired          = "Expired"
	ReasonNotYetValid      = "NotYetValid"
	ReasonUnknownAuthority = "UnknownAuthority"
	ReasonNotTLS           = "NotTLS"
	ReasonUnreachable      = "Unreachable"
	ReasonProbePending     = "Pending"
)

// DatabaseExposureList is a list of DatabaseExposures.
//
// +kubebuilder:object:root=true
type DatabaseExposureList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DatabaseExposure `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DatabaseExposure{}, &DatabaseExposureList{})
}
