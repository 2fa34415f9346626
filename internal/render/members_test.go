package render

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
)

func exposureStatus(t *testing.T, out *Result, name string) *Exposure {
	t.Helper()
	for i := range out.Exposures {
		if out.Exposures[i].Name == name {
			return &out.Exposures[i]
		}
	}
	t.Fatalf("no exposure %s", name)
	return nil
}

// A member's certificate verdict is part of the exposure's CertificateVerified (clients that
// reached the bootstrap name reconnect to every member), and it changes status only: the
// objects rendered are the previous render's, the same pointers, so the data plane is not
// rebuilt (pipeline: a verdict is a status-only run).
func TestMemberVerdicts(t *testing.T) {
	res := load(t, "testdata/members.in.yaml")
	first, _ := run(res, Options{Now: now})
	verified := func() Probe {
		return Probe{Reason: v1alpha1.ReasonVerified, Message: "verified", Endpoints: []v1alpha1.EndpointCertificate{
			{Address: "10.0.0.1:9093", Reason: v1alpha1.ReasonVerified, Serial: "01"}}}
	}
	probes := map[[2]string]Probe{}
	for _, r := range []string{"events", "events.broker-0", "events.broker-1", "events.broker-2"} {
		probes[[2]string{"acme", r}] = verified()
	}
	probes[[2]string{"acme", "events.broker-1"}] = Probe{Reason: v1alpha1.ReasonMissingDNSNames,
		Message: "the certificate lacks broker-1.events.kafka.example.com", Endpoints: []v1alpha1.EndpointCertificate{
			{Address: "10.0.0.2:9093", Reason: v1alpha1.ReasonMissingDNSNames, Serial: "0BAD"}}}
	second, _ := run(res, Options{Now: now, Previous: first, Probes: probes})
	if !second.SameObjects(first) {
		t.Error("a verdict changed the rendered objects")
	}
	x := exposureStatus(t, second, "events")
	c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionCertificateVerified)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonMissingDNSNames ||
		!strings.Contains(c.Message, "member broker-1") || !strings.Contains(c.Message, "lacks broker-1") {
		t.Errorf("CertificateVerified %+v; want False MissingDNSNames naming broker-1", c)
	}
	if m := x.Status.Members[1]; m.Name != "broker-1" || m.Certificate != v1alpha1.ReasonMissingDNSNames ||
		len(m.Endpoints) != 1 || m.Endpoints[0].Serial != "0BAD" {
		t.Errorf("broker-1's status %+v", m)
	}
	if len(x.Status.Endpoints) != 1 || x.Status.Endpoints[0].Serial != "01" {
		t.Errorf("the bootstrap route's endpoints %+v", x.Status.Endpoints)
	}

	// A new map for new verdicts, as a VerdictCache makes (Options.Probes is not changed
	// once given).
	probes = maps.Clone(probes)
	probes[[2]string{"acme", "events.broker-1"}] = verified()
	third, _ := run(res, Options{Now: now, Previous: second, Probes: probes})
	if c := meta.FindStatusCondition(exposureStatus(t, third, "events").Status.Conditions, v1alpha1.ConditionCertificateVerified); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("every route verified: CertificateVerified %+v", c)
	}
	probes = maps.Clone(probes)
	delete(probes, [2]string{"acme", "events.broker-2"})
	fourth, _ := run(res, Options{Now: now, Previous: third, Probes: probes})
	if c := meta.FindStatusCondition(exposureStatus(t, fourth, "events").Status.Conditions, v1alpha1.ConditionCertificateVerified); c == nil ||
		c.Reason != v1alpha1.ReasonProbePending || !strings.Contains(c.Message, "broker-2") {
		t.Errorf("broker-2 not probed: CertificateVerified %+v", c)
	}
}

// Removing a member removes its route and AccessPolicy, also the copies a cluster holds
// (owned by the exposure), and leaves the exposure's other routes the same objects; the
// probe targets follow.
func TestMemberRemoved(t *testing.T) {
	res := load(t, "testdata/members.in.yaml")
	for _, d := range res.DatabaseExposures {
		d.UID = types.UID("uid-" + d.Name) // as from a cluster: what it renders is owned
	}
	for _, tg := range res.TenantGateways {
		tg.UID = "uid-tenant"
	}
	first, _ := run(res, Options{Now: now})
	applied := first.Merge(res) // what the cluster holds once the controller applied it
	if len(first.TLSRoutes) != 11 || len(first.AccessPolicies) != 4 {
		t.Fatalf("first render: %d routes, %d policies", len(first.TLSRoutes), len(first.AccessPolicies))
	}
	if targets := ProbeTargets(res, first, nil, nil); len(targets) != 11 {
		t.Errorf("%d probe targets, want one per route (11)", len(targets))
	}

	next := *applied
	next.DatabaseExposures = nil
	for _, d := range applied.DatabaseExposures {
		if d.Name == "events" {
			d = d.DeepCopy()
			d.Spec.Members = d.Spec.Members[:2]
		}
		next.DatabaseExposures = append(next.DatabaseExposures, d)
	}
	second, _ := run(&next, Options{Now: now, Previous: first})
	merged := second.Merge(&next)
	for _, tr := range merged.TLSRoutes {
		if tr.Name == "events.broker-2" {
			t.Error("the removed member's route is still served")
		}
	}
	for _, ap := range merged.AccessPolicies {
		if ap.Name == "events.broker-2" {
			t.Error("the removed member's AccessPolicy is still in force")
		}
	}
	if len(second.TLSRoutes) != 10 || len(second.AccessPolicies) != 3 {
		t.Errorf("second render: %d routes, %d policies", len(second.TLSRoutes), len(second.AccessPolicies))
	}
	byName := func(out *Result) map[string]any {
		m := map[string]any{}
		for _, tr := range out.TLSRoutes {
			m[tr.Name] = tr
		}
		return m
	}
	a, b := byName(first), byName(second)
	for _, n := range []string{"events", "events.broker-0", "events.broker-1", "catalog.rs0-0"} {
		if a[n] != b[n] {
			t.Errorf("route %s was rebuilt", n)
		}
	}
	if targets := ProbeTargets(&next, second, nil, nil); len(targets) != 10 {
		t.Errorf("%d probe targets after the removal, want 10", len(targets))
	}
}

// A member of an exposure whose TenantGateway renders nothing new keeps its route, as the
// exposure's own route is kept.
func TestMembersKeptWithTheirExposure(t *testing.T) {
	res := load(t, "testdata/members.in.yaml")
	first, _ := run(res, Options{Now: now})
	bad := *res
	bad.Secrets = nil // the wildcard Secret gone: the TenantGateway renders nothing new
	kept, _ := run(&bad, Options{Now: now, Previous: first})
	if len(kept.TLSRoutes) != len(first.TLSRoutes) || len(kept.AccessPolicies) != len(first.AccessPolicies) {
		t.Errorf("kept %d routes and %d policies of %d and %d", len(kept.TLSRoutes), len(kept.AccessPolicies), len(first.TLSRoutes), len(first.AccessPolicies))
	}
	if got := kept.CertificateNames; len(got) != 1 || len(got[0].Hostnames) != 8 {
		t.Errorf("the shared Certificate's names: %+v; want the bootstrap's and every member's (8)", got)
	}
}
