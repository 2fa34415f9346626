package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// Access control in a cluster, the controller running as the install's ServiceAccount and
// the kube-controller-manager's garbage collector running: a DatabaseExposure's and a
// TenantGateway's spec.access render AccessPolicies the exposure and the TenantGateway
// control, with status on every object and the access in force in the exposure's status;
// the snapshot carries them on the route and the listener. A tenant (an impersonated user
// with a Role in its namespace) cannot reach another namespace's route: a targetRef has no
// namespace (the API server refuses one, naming the field), a name of its own namespace that
// is another tenant's route there is TargetNotFound, and RBAC keeps it out of the other
// namespace. An invalid spec.access is refused by the API server naming the field. Taking
// spec.access away deletes the policy; deleting the exposure collects it.
func TestAccessPoliciesOnRealAPIServer(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{CRDs: crds, GarbageCollector: true}})
	cl, ctx := kc.Client, context.Background()
	create := func(c client.Client, objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
			}
		}
	}
	access := &v1alpha1.Access{SourceRanges: []string{"203.0.113.0/24"}, MaxConnections: ptrTo(int32(50)),
		PerClient: &v1alpha1.PerClientLimits{MaxConnections: ptrTo(int32(5)), ConnectionsPerMinute: ptrTo(int32(60))}}
	dbx := func(ns, name string, a *v1alpha1.Access) *v1alpha1.DatabaseExposure {
		return &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.DatabaseExposureSpec{
			Engine: v1alpha1.EnginePostgres, BackendRef: v1alpha1.DatabaseBackendRef{Name: name, Port: 5432}, Access: a}}
	}
	create(cl,
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "globex"}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}, Spec: v1alpha1.TenantGatewaySpec{
			Apex: "acme.example.test", Access: &v1alpha1.Access{DeniedRanges: []string{"198.51.100.0/24"}}}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "globex", Name: "globex"}, Spec: v1alpha1.TenantGatewaySpec{
			Apex: "globex.example.test", Access: nil}},
		dbx("acme", "orders", access),
		dbx("acme", "billing", nil),
		dbx("globex", "db", nil),
		// alice is acme's tenant: she may manage AccessPolicies in acme, nowhere else.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "access-admin"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"accesspolicies", "databaseexposures"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "access-admin"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}},
	)
	rec := &recorder{}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := New(Config{REST: kc.As(kubetest.ControllerUser), Apply: rec.apply, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)
	alice, err := client.New(kc.As("alice"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 30 * time.Second

	// policy checks AccessPolicy ns/name: controlled by kind/owner, targeting target, its
	// one ancestor Accepted with reason.
	policy := func(ns, name, kind, owner, target, reason string) func() error {
		return func() error {
			var p v1alpha1.AccessPolicy
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return err
			}
			if owner != "" {
				ref := metav1.GetControllerOf(&p)
				if ref == nil || ref.Kind != kind || ref.Name != owner {
					return fmt.Errorf("controller %+v, want %s %s", ref, kind, owner)
				}
			}
			if len(p.Spec.TargetRefs) != 1 || string(p.Spec.TargetRefs[0].Kind)+"/"+string(p.Spec.TargetRefs[0].Name) != target {
				return fmt.Errorf("targets %+v, want %s", p.Spec.TargetRefs, target)
			}
			if len(p.Status.Ancestors) != 1 {
				return fmt.Errorf("%d ancestors: %+v", len(p.Status.Ancestors), p.Status.Ancestors)
			}
			want := metav1.ConditionTrue
			if reason != "Accepted" {
				want = metav1.ConditionFalse
			}
			return condition(p.Status.Ancestors[0].Conditions, "Accepted", want, reason, p.Generation)
		}
	}
	kubetest.Eventually(t, timeout, "AccessPolicy acme/orders, the exposure's", policy("acme", "orders", "DatabaseExposure", "orders", "TLSRoute/orders", "Accepted"))
	kubetest.Eventually(t, timeout, "AccessPolicy acme/acme-access, the TenantGateway's", policy("acme", "acme-access", "TenantGateway", "acme", "Gateway/acme", "Accepted"))
	inForce := func(ns, name string, want ...string) func() error {
		return func() error {
			var d v1alpha1.DatabaseExposure
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				return err
			}
			var got []string
			for _, a := range d.Status.Access {
				got = append(got, a.Policy)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("status.access names %v, want %v", got, want)
			}
			return nil
		}
	}
	kubetest.Eventually(t, timeout, "orders' status: the tenant's policy, then its own", inForce("acme", "orders", "acme/acme-access", "acme/orders"))
	kubetest.Eventually(t, timeout, "billing's status: the tenant's policy", inForce("acme", "billing", "acme/acme-access"))
	kubetest.Eventually(t, timeout, "globex's db: nothing in force", inForce("globex", "db"))
	kubetest.Eventually(t, timeout, "the snapshot checks both on orders' path, nothing on globex's", func() error {
		snap := rec.get()
		if snap == nil {
			return fmt.Errorf("no snapshot")
		}
		var found []string
		for _, p := range snap.Ports {
			for _, e := range p.Listeners.Entries() {
				for _, re := range e.Value.Routes.Entries() {
					found = append(found, fmt.Sprintf("%s %s: %s+%s", re.Value.Name, re.Pattern, names(e.Value.Access), names(re.Value.Access)))
				}
			}
		}
		slices.Sort(found)
		want := []string{
			"TLSRoute/acme/billing billing.acme.example.test: acme/acme-access+",
			"TLSRoute/acme/billing billing.postgres.acme.example.test: acme/acme-access+",
			"TLSRoute/acme/orders orders.acme.example.test: acme/acme-access+acme/orders",
			"TLSRoute/acme/orders orders.postgres.acme.example.test: acme/acme-access+acme/orders",
		}
		var acme []string
		for _, f := range found {
			if strings.HasPrefix(f, "TLSRoute/acme/") {
				acme = append(acme, f)
			} else if !strings.HasSuffix(f, ": +") {
				return fmt.Errorf("globex's route has policies: %s", f)
			}
		}
		if !slices.Equal(acme, want) {
			return fmt.Errorf("acme's routes:\n%s\nwant\n%s", strings.Join(acme, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})

	t.Run("a tenant cannot reach another namespace's route", func(t *testing.T) {
		// A targetRef has no namespace: the API server refuses one, naming the field.
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(`
apiVersion: snigate.dev/v1alpha1
kind: AccessPolicy
metadata: {name: sneaky, namespace: acme}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: db, namespace: globex}]
  sourceRanges: [0.0.0.0/32]`), &u.Object); err != nil {
			t.Fatal(err)
		}
		err := alice.Create(ctx, &u, client.FieldValidation("Strict"))
		if err == nil || !strings.Contains(err.Error(), "spec.targetRefs[0].namespace") {
			t.Fatalf("a targetRef with a namespace: %v, want a refusal naming spec.targetRefs[0].namespace", err)
		}
		// RBAC keeps her out of globex altogether.
		other := &v1alpha1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "globex", Name: "sneaky"},
			Spec: v1alpha1.AccessPolicySpec{TargetRefs: targets("TLSRoute", "db"), Access: v1alpha1.Access{SourceRanges: []string{"0.0.0.0/32"}}}}
		if err := alice.Create(ctx, other); !apierrors.IsForbidden(err) {
			t.Fatalf("alice creating an AccessPolicy in globex: %v, want forbidden", err)
		}
		// "db" in her own namespace is not globex's db.
		mine := &v1alpha1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "sneaky"},
			Spec: v1alpha1.AccessPolicySpec{TargetRefs: targets("TLSRoute", "db"), Access: v1alpha1.Access{SourceRanges: []string{"0.0.0.0/32"}}}}
		create(alice, mine)
		kubetest.Eventually(t, timeout, "acme/sneaky TargetNotFound", policy("acme", "sneaky", "", "", "TLSRoute/db", "TargetNotFound"))
		kubetest.Eventually(t, timeout, "globex's db still without a policy", inForce("globex", "db"))
	})

	t.Run("an invalid spec.access is refused naming the field", func(t *testing.T) {
		bad := dbx("acme", "bad", &v1alpha1.Access{SourceRanges: []string{"203.0.113.0"}})
		err := alice.Create(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), "spec.access.sourceRanges") {
			t.Fatalf("sourceRanges [203.0.113.0]: %v, want a refusal naming spec.access.sourceRanges", err)
		}
		bad = dbx("acme", "bad", &v1alpha1.Access{PerClient: &v1alpha1.PerClientLimits{ConnectionsPerMinute: ptrTo(int32(0))}})
		err = alice.Create(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), "spec.access.perClient.connectionsPerMinute") {
			t.Fatalf("connectionsPerMinute 0: %v, want a refusal naming it", err)
		}
	})

	t.Run("spec.access removed, then the exposure deleted", func(t *testing.T) {
		var d v1alpha1.DatabaseExposure
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders"}, &d); err != nil {
			t.Fatal(err)
		}
		d.Spec.Access = nil
		if err := alice.Update(ctx, &d); err != nil {
			t.Fatal(err)
		}
		gone := func(name string) func() error {
			return func() error {
				var p v1alpha1.AccessPolicy
				err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: name}, &p)
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("AccessPolicy acme/%s still there (%v)", name, err)
			}
		}
		kubetest.Eventually(t, timeout, "orders' AccessPolicy deleted with its spec.access", gone("orders"))
		kubetest.Eventually(t, timeout, "orders' status: the tenant's policy alone", inForce("acme", "orders", "acme/acme-access"))
		// Back, then the exposure goes: the garbage collector takes its policy.
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders"}, &d); err != nil {
			t.Fatal(err)
		}
		d.Spec.Access = access
		if err := alice.Update(ctx, &d); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "orders' AccessPolicy back", policy("acme", "orders", "DatabaseExposure", "orders", "TLSRoute/orders", "Accepted"))
		if err := alice.Delete(ctx, &d); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "orders' AccessPolicy collected with the exposure", gone("orders"))
	})
}

func targets(kind, name string) []gwv1.LocalPolicyTargetReferenceWithSectionName {
	return []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{
		Group: gwv1.GroupName, Kind: gwv1.Kind(kind), Name: gwv1.ObjectName(name)}}}
}

func names(ps []*access.Policy) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}
