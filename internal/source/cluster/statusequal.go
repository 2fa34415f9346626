package cluster

import (
	"slices"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Equality of the tenant objects' statuses, field by field: is a status the applier is about
// to write the one it wrote last? Asked of every TenantGateway, DatabaseExposure and
// TrustAnchor on every pass (11 000 at bench/cpscale's 10 000 exposures).
//
// Why written here: reflect.DeepEqual, which this replaces, allocates and hashes a visited
// entry for every slice and pointer it compares and recurses through reflection; it was the
// largest part of a pass at that scale (2.6 s of the controller's 30 s CPU profile while
// exposures came and went, bench/results/notes.md). Nothing generates equality for API types.
// TestStatusEqualSeesEveryField fails when a field is added to a status and not here.
//
// A nil slice equals an empty one: both are omitted from the JSON the API server keeps.
// Times compare as values (==), as reflect did: what is compared is this applier's own
// earlier output.

func equalExposureStatus(a, b *v1alpha1.DatabaseExposureStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration &&
		slices.Equal(a.Conditions, b.Conditions) &&
		slices.Equal(a.Hostnames, b.Hostnames) &&
		a.Listener == b.Listener &&
		a.Port == b.Port &&
		slices.Equal(a.Addresses, b.Addresses) &&
		equalPtr(a.ServerCertificate, b.ServerCertificate, equalServerCertificate) &&
		equalEach(a.Endpoints, b.Endpoints, equalEndpointCertificate) &&
		equalEach(a.Members, b.Members, equalMember) &&
		a.Connect == b.Connect &&
		slices.Equal(a.Access, b.Access)
}

func equalServerCertificate(a, b *v1alpha1.ServerCertificate) bool {
	return a.Serial == b.Serial &&
		a.SHA256 == b.SHA256 &&
		a.NotBefore == b.NotBefore &&
		a.NotAfter == b.NotAfter &&
		slices.Equal(a.DNSNames, b.DNSNames) &&
		a.Issuer == b.Issuer &&
		a.CoversHostnames == b.CoversHostnames &&
		equalPtr(a.ChainsToTrustAnchor, b.ChainsToTrustAnchor, equalValue)
}

func equalEndpointCertificate(a, b *v1alpha1.EndpointCertificate) bool {
	return a.Address == b.Address &&
		a.Reason == b.Reason &&
		a.Serial == b.Serial &&
		equalPtr(a.NotAfter, b.NotAfter, equalValue)
}

func equalMember(a, b *v1alpha1.MemberStatus) bool {
	return a.Name == b.Name &&
		slices.Equal(a.Hostnames, b.Hostnames) &&
		a.Route == b.Route &&
		a.Reason == b.Reason &&
		a.Message == b.Message &&
		a.Certificate == b.Certificate &&
		equalEach(a.Endpoints, b.Endpoints, equalEndpointCertificate)
}

func equalTenantStatus(a, b *v1alpha1.TenantGatewayStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration &&
		slices.Equal(a.Conditions, b.Conditions) &&
		equalPtr(a.GatewayRef, b.GatewayRef, equalValue) &&
		equalEach(a.Addresses, b.Addresses, equalGatewayAddress) &&
		slices.Equal(a.Listeners, b.Listeners) &&
		a.ListenerCount == b.ListenerCount
}

func equalGatewayAddress(a, b *gwv1.GatewayStatusAddress) bool {
	return equalPtr(a.Type, b.Type, equalValue) && a.Value == b.Value
}

func equalAnchorStatus(a, b *v1alpha1.TrustAnchorStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration &&
		slices.Equal(a.Conditions, b.Conditions) &&
		a.SecretName == b.SecretName &&
		slices.Equal(a.Certificates, b.Certificates)
}

// equalEach compares two slices element by element with eq.
func equalEach[E any](a, b []E, eq func(a, b *E) bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !eq(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

// equalPtr compares what two pointers point to with eq; nil equals only nil.
func equalPtr[E any](a, b *E, eq func(a, b *E) bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return eq(a, b)
}

func equalValue[E comparable](a, b *E) bool { return *a == *b }
