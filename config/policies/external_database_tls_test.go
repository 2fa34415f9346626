package policies_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil/kubetest"
)

const (
	dbPolicy = "external-database-tls.snigate.dev"
	dbGroup  = "apps.example.com" // the stand-in group the shipped policy matches
	dbNS     = "db"
)

// The stand-in kinds of a platform's databases, each with spec.external and spec.tls.enabled,
// and each letting a null through to admission differently:
//   - Postgres (the kind the shipped policy matches): enabled is nullable, so a null reaches
//     the policy as null;
//   - Redis: enabled is not nullable, so the API server drops a null before admission and
//     the policy sees it unset;
//   - Kafka: spec preserves unknown fields and declares none, so every null (and any type)
//     reaches the policy as sent.
//
// Redis and Kafka are matched only after the test patches the policy's resourceRules the way
// external-database-tls.yaml documents.
func standInCRDs() []*apiextensionsv1.CustomResourceDefinition {
	typed := func(nullable bool) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"external":  {Type: "boolean"},
				"instances": {Type: "integer"},
				"tls": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"enabled": {Type: "boolean", Nullable: nullable},
				}},
			},
		}
	}
	preserve := true
	return []*apiextensionsv1.CustomResourceDefinition{
		standInCRD("Postgres", "postgreses", typed(true)),
		standInCRD("Redis", "redises", typed(false)),
		standInCRD("Kafka", "kafkas", apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}),
	}
}

func standInCRD(kind, plural string, spec apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + dbGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: dbGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind),
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec},
				}},
			}},
		},
	}
}

// db is a stand-in database object in namespace db; spec nil: none at all.
func db(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	u.SetAPIVersion(dbGroup + "/v1")
	u.SetKind(kind)
	u.SetNamespace(dbNS)
	u.SetName(name)
	return u
}

// tls is a spec.tls with enabled set to v (nil: null); tlsEmpty is one without enabled.
func tls(v any) map[string]any { return map[string]any{"enabled": v} }

var tlsEmpty = map[string]any{}

func external(v any, tls any) map[string]any {
	return map[string]any{"external": v, "tls": tls}
}

// editDB gets the object, lets edit change it and updates it.
func editDB(kind, name string, edit func(u *unstructured.Unstructured)) func(ctx context.Context, c client.Client) error {
	return func(ctx context.Context, c client.Client) error {
		u := db(kind, name, nil)
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return fmt.Errorf("test setup: %w", err)
		}
		edit(u)
		return c.Update(ctx, u)
	}
}

func setSpec(kind, name string, value any, path ...string) func(ctx context.Context, c client.Client) error {
	return editDB(kind, name, func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, append([]string{"spec"}, path...)...); err != nil {
			panic(err)
		}
	})
}

func removeSpec(kind, name string, path ...string) func(ctx context.Context, c client.Client) error {
	return editDB(kind, name, func(u *unstructured.Unstructured) {
		unstructured.RemoveNestedField(u.Object, append([]string{"spec"}, path...)...)
	})
}

// reaches checks what the API server makes of spec before admission: it creates the object
// as a dry run (admission runs, nothing is stored; no mutating admission is installed, so the
// answer is the object the policies saw) and compares the field at path with want ("unset",
// "null" or the value).
func reaches(kind string, spec map[string]any, want string, path ...string) func(ctx context.Context, c client.Client) error {
	return func(ctx context.Context, c client.Client) error {
		u := db(kind, "probe", spec)
		if err := c.Create(ctx, u, client.DryRunAll); err != nil {
			return err
		}
		got := "unset"
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, append([]string{"spec"}, path...)...); found {
			got = fmt.Sprint(v)
			if v == nil {
				got = "null"
			}
		}
		if got != want {
			return fmt.Errorf("spec.%s as admission sees it: %s, want %s", strings.Join(path, "."), got, want)
		}
		return nil
	}
}

// TestExternalDatabaseTLS runs external-database-tls.snigate.dev on the real API server
// against stand-in database kinds: installed (as the install does) on a cluster that serves
// none of them, then enforced once the CRDs appear, then patched for two more kinds as its
// file documents.
func TestExternalDatabaseTLS(t *testing.T) {
	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{})
	ctx := context.Background()
	admin := cluster.Client

	applyObjects(t, admin,
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "databases-test"},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{dbGroup},
				Resources: []string{"postgreses", "redises", "kafkas"},
				Verbs:     []string{"get", "list", "create", "update", "patch", "delete"},
			}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "databases-test"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "databases-test"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: tenantUser}},
		},
	)

	// The install, on a cluster without the stand-in CRDs: the API server takes a policy
	// whose rules name resources nobody serves, and requests go on as before.
	for _, f := range policyFiles(t) {
		cluster.Apply(t, f)
	}
	var vap admissionv1.ValidatingAdmissionPolicy
	if err := admin.Get(ctx, client.ObjectKey{Name: dbPolicy}, &vap); err != nil {
		t.Fatalf("policy %s not installed: %v", dbPolicy, err)
	}
	applyObjects(t, admin, namespace(dbNS, nil))

	// The CRDs come later; the policy matches them as soon as they are served.
	if _, err := envtest.InstallCRDs(cluster.Config, envtest.CRDInstallOptions{CRDs: standInCRDs()}); err != nil {
		t.Fatal(err)
	}
	clients := map[string]client.Client{}
	for name, cfg := range map[string]rest.ImpersonationConfig{
		tenantUser: {UserName: tenantUser},
		masterUser: {UserName: masterUser, Groups: []string{"system:masters"}},
	} {
		rc := rest.CopyConfig(cluster.Config)
		rc.Impersonate = cfg
		c, err := client.New(rc, client.Options{Scheme: clientgoscheme.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		clients[name] = c
	}
	enforced := func(kind string) {
		t.Helper()
		kubetest.Eventually(t, 30*time.Second, "policy "+dbPolicy+" enforced on "+kind, func() error {
			err := clients[tenantUser].Create(ctx, db(kind, "canary", external(true, nil)), client.DryRunAll)
			if err == nil {
				return fmt.Errorf("canary allowed")
			}
			if !strings.Contains(err.Error(), dbPolicy) {
				return err
			}
			return nil
		})
	}
	enforced("Postgres")

	const (
		why       = "must set spec.tls.enabled: true explicitly"
		noDefault = "an unset or null spec.tls.enabled is denied rather than defaulted from spec.external, because such defaults hide mistakes"
		turnOff   = "turning TLS off while spec.external stays true is denied"
	)
	steps := []step{
		// What the API server hands admission, for the kind the shipped policy matches.
		{name: "Postgres tls.enabled: null (nullable) reaches admission as null", user: tenantUser,
			do: reaches("Postgres", external(false, tls(nil)), "null", "tls", "enabled")},
		{name: "Postgres external: null (not nullable) is dropped before admission", user: tenantUser,
			do: reaches("Postgres", external(nil, tls(false)), "unset", "external")},
		{name: "Postgres tls: null (not nullable) is dropped before admission", user: tenantUser,
			do: reaches("Postgres", external(false, nil), "unset", "tls")},

		// CREATE with external true: TLS explicitly on, or denied.
		{name: "create external, tls.enabled false", user: tenantUser,
			do:     create(db("Postgres", "x", external(true, tls(false)))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is false, but spec.external is true", why, "reachable in plaintext from outside the cluster"}},
		{name: "create external, no tls", user: tenantUser,
			do:     create(db("Postgres", "x", map[string]any{"external": true})),
			policy: dbPolicy, deny: []string{"spec.tls is unset, but spec.external is true", why, noDefault}},
		{name: "create external, tls: {}", user: tenantUser,
			do:     create(db("Postgres", "x", external(true, tlsEmpty))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is unset, but spec.external is true", why, noDefault}},
		{name: "create external, tls.enabled: null", user: tenantUser,
			do:     create(db("Postgres", "x", external(true, tls(nil)))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is null, but spec.external is true", why, noDefault}},
		{name: "create external, tls: null (dropped: arrives unset)", user: tenantUser,
			do:     create(db("Postgres", "x", external(true, nil))),
			policy: dbPolicy, deny: []string{"spec.tls is unset, but spec.external is true"}},
		{name: "create external, tls.enabled false, as a system:masters member", user: masterUser,
			do:     create(db("Postgres", "x", external(true, tls(false)))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is false, but spec.external is true"}},

		// Allowed.
		{name: "create external, tls.enabled true", user: tenantUser,
			do: create(db("Postgres", "ext", external(true, tls(true))))},
		{name: "create external false, tls.enabled false", user: tenantUser,
			do: create(db("Postgres", "int", external(false, tls(false))))},
		{name: "create without external and tls", user: tenantUser,
			do: create(db("Postgres", "bare", map[string]any{"instances": int64(1)}))},
		{name: "create without spec", user: tenantUser,
			do: create(db("Postgres", "nospec", nil))},
		{name: "create external: null (dropped: unset), tls.enabled false", user: tenantUser,
			do: create(db("Postgres", "nullext", external(nil, tls(false))))},

		// UPDATE of the allowed external object.
		{name: "update external to tls.enabled false", user: tenantUser,
			do:     setSpec("Postgres", "ext", false, "tls", "enabled"),
			policy: dbPolicy, deny: []string{turnOff + " (spec.tls.enabled is false)", "set spec.external to false to turn TLS off"}},
		{name: "update external to remove tls", user: tenantUser,
			do:     removeSpec("Postgres", "ext", "tls"),
			policy: dbPolicy, deny: []string{turnOff + " (spec.tls is unset)"}},
		{name: "update external to remove tls.enabled", user: tenantUser,
			do:     removeSpec("Postgres", "ext", "tls", "enabled"),
			policy: dbPolicy, deny: []string{turnOff + " (spec.tls.enabled is unset)"}},
		{name: "update external to tls.enabled null", user: tenantUser,
			do:     setSpec("Postgres", "ext", nil, "tls", "enabled"),
			policy: dbPolicy, deny: []string{turnOff + " (spec.tls.enabled is null)"}},
		{name: "update external to tls.enabled false, as a system:masters member", user: masterUser,
			do:     setSpec("Postgres", "ext", false, "tls", "enabled"),
			policy: dbPolicy, deny: []string{turnOff}},
		{name: "update external, another field, TLS kept", user: tenantUser,
			do: setSpec("Postgres", "ext", int64(3), "instances")},
		{name: "update external, a label", user: tenantUser,
			do: editDB("Postgres", "ext", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "db"}) })},
		{name: "update external false and TLS off in one request", user: tenantUser,
			do: editDB("Postgres", "ext", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, false, "spec", "external")
				_ = unstructured.SetNestedField(u.Object, false, "spec", "tls", "enabled")
			})},
		{name: "update back to external, TLS still off (making it external, not turning TLS off)", user: tenantUser,
			do:     setSpec("Postgres", "ext", true, "external"),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is false, but spec.external is true", why}},
		{name: "update an internal object to external without TLS", user: tenantUser,
			do:     setSpec("Postgres", "int", true, "external"),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is false, but spec.external is true"}},
		{name: "update an internal object to external with TLS", user: tenantUser,
			do: editDB("Postgres", "int", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, true, "spec", "external")
				_ = unstructured.SetNestedField(u.Object, true, "spec", "tls", "enabled")
			})},
		{name: "update an object without spec to external", user: tenantUser,
			do:     setSpec("Postgres", "nospec", true, "external"),
			policy: dbPolicy, deny: []string{"spec.tls is unset, but spec.external is true"}},

		// Kinds the rules do not name are not checked: objects that break the rule, made
		// before the policy covers their kind.
		{name: "Redis external without TLS, before the policy names redises", user: tenantUser,
			do: create(db("Redis", "legacy", map[string]any{"external": true, "instances": int64(1)}))},
		{name: "Redis external without TLS with a finalizer, before the policy names redises", user: tenantUser,
			do: func(ctx context.Context, c client.Client) error {
				u := db("Redis", "legacy-final", map[string]any{"external": true})
				u.SetFinalizers([]string{"apps.example.com/operator"})
				return c.Create(ctx, u)
			}},
	}
	runSteps(t, ctx, clients, steps)

	// "Edit resourceRules for your kinds": the JSON patch external-database-tls.yaml shows,
	// here naming the other two stand-in kinds.
	patch := []byte(`[
		{"op": "test", "path": "/spec/matchConstraints/resourceRules/0/apiGroups/0", "value": "apps.example.com"},
		{"op": "replace", "path": "/spec/matchConstraints/resourceRules/0/apiGroups", "value": ["apps.example.com"]},
		{"op": "replace", "path": "/spec/matchConstraints/resourceRules/0/resources", "value": ["postgreses", "redises", "kafkas"]}
	]`)
	if err := admin.Patch(ctx, &vap, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		t.Fatalf("patching the policy's resourceRules: %v", err)
	}
	enforced("Redis")
	enforced("Kafka")

	steps = []step{
		// Redis: enabled is not nullable, so a null never reaches the policy; it is denied as
		// unset.
		{name: "Redis tls.enabled: null (not nullable) is dropped before admission", user: tenantUser,
			do: reaches("Redis", external(false, tls(nil)), "unset", "tls", "enabled")},
		{name: "Redis create external, tls.enabled: null (arrives unset)", user: tenantUser,
			do:     create(db("Redis", "x", external(true, tls(nil)))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is unset, but spec.external is true", noDefault}},
		{name: "Redis create external, tls.enabled true", user: tenantUser,
			do: create(db("Redis", "ext", external(true, tls(true))))},

		// Kafka: spec preserves unknown fields, so nulls and wrong types reach the policy.
		{name: "Kafka tls.enabled: null (unknown field) reaches admission as null", user: tenantUser,
			do: reaches("Kafka", external(false, tls(nil)), "null", "tls", "enabled")},
		{name: "Kafka tls: null (unknown field) reaches admission as null", user: tenantUser,
			do: reaches("Kafka", external(false, nil), "null", "tls")},
		{name: "Kafka create external, tls.enabled: null", user: tenantUser,
			do:     create(db("Kafka", "x", external(true, tls(nil)))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is null, but spec.external is true", noDefault}},
		{name: "Kafka create external, tls: null", user: tenantUser,
			do:     create(db("Kafka", "x", external(true, nil))),
			policy: dbPolicy, deny: []string{"spec.tls is null, but spec.external is true"}},
		{name: "Kafka create external, tls a string", user: tenantUser,
			do:     create(db("Kafka", "x", external(true, "on"))),
			policy: dbPolicy, deny: []string{"spec.tls is not an object, but spec.external is true"}},
		{name: `Kafka create external, tls.enabled "true" (a string)`, user: tenantUser,
			do:     create(db("Kafka", "x", external(true, tls("true")))),
			policy: dbPolicy, deny: []string{"spec.tls.enabled is not the boolean true, but spec.external is true"}},
		{name: `Kafka create external "yes" (counts as external), no tls`, user: tenantUser,
			do:     create(db("Kafka", "x", map[string]any{"external": "yes"})),
			policy: dbPolicy, deny: []string{"spec.tls is unset, but spec.external is true"}},
		{name: "Kafka create external: null, tls.enabled false", user: tenantUser,
			do: create(db("Kafka", "nullext", external(nil, tls(false))))},
		{name: "Kafka create external, tls.enabled true", user: tenantUser,
			do: create(db("Kafka", "ext", external(true, tls(true))))},
		{name: "Kafka update external to tls.enabled null", user: tenantUser,
			do:     setSpec("Kafka", "ext", nil, "tls", "enabled"),
			policy: dbPolicy, deny: []string{turnOff + " (spec.tls.enabled is null)"}},
		{name: "Kafka update external to tls: null", user: tenantUser,
			do:     setSpec("Kafka", "ext", nil, "tls"),
			policy: dbPolicy, deny: []string{turnOff + " (spec.tls is null)"}},

		// An object made before the policy covered its kind: metadata-only updates pass, so it
		// can be relabelled and deleted; a change to its spec must bring TLS on.
		{name: "legacy Redis: a label", user: tenantUser,
			do: editDB("Redis", "legacy", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "db"}) })},
		{name: "legacy Redis: another spec field, TLS still unset", user: tenantUser,
			do:     setSpec("Redis", "legacy", int64(2), "instances"),
			policy: dbPolicy, deny: []string{"spec.tls is unset, but spec.external is true", why}},
		{name: "legacy Redis: TLS on", user: tenantUser,
			do: setSpec("Redis", "legacy", true, "tls", "enabled")},
		{name: "legacy Redis with a finalizer: deleted, and its operator removes the finalizer", user: tenantUser,
			do: func(ctx context.Context, c client.Client) error {
				if err := c.Delete(ctx, db("Redis", "legacy-final", nil)); err != nil {
					return err
				}
				if err := editDB("Redis", "legacy-final", func(u *unstructured.Unstructured) { u.SetFinalizers(nil) })(ctx, c); err != nil {
					return err
				}
				err := c.Get(ctx, client.ObjectKey{Namespace: dbNS, Name: "legacy-final"}, db("Redis", "legacy-final", nil))
				if err == nil {
					return fmt.Errorf("still there after its finalizer was removed")
				}
				return client.IgnoreNotFound(err)
			}},
	}
	runSteps(t, ctx, clients, steps)
}
