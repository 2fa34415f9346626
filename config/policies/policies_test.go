// Package policies_test runs the admission policies of config/policies on the real
// kube-apiserver, as the users they are about: a tenant user, the controller's
// ServiceAccount and a system:masters member (impersonated from the admin config).
package policies_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

const (
	tenantUser = "alice"                 // may write namespaces, Gateways and routes (RBAC below)
	masterUser = "bob"                   // impersonated with the group system:masters
	apex       = "acme.example.com"      // namespace acme's
	childApex  = "shop.acme.example.com" // namespace shop's, a child in acme's tree
)

// policyFiles are the files config/policies/kustomization.yaml lists, so the test applies
// what the install applies.
func policyFiles(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("config/policies/kustomization.yaml lists no resources")
	}
	return k.Resources
}

// TestDefaultInstallsPolicies keeps config/policies in the kustomize install.
func TestDefaultInstallsPolicies(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "default", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, r := range k.Resources {
		if r == "../policies" {
			return
		}
	}
	t.Errorf("config/default/kustomization.yaml resources %v lack ../policies", k.Resources)
}

// TestPolicyFilesDecode checks every policy and binding decodes strictly into the
// admissionregistration/v1 types and that each policy fails closed and each binding denies.
func TestPolicyFilesDecode(t *testing.T) {
	policies, bindings := map[string]bool{}, map[string]bool{}
	for _, f := range policyFiles(t) {
		for _, doc := range documents(t, f) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatal(err)
			}
			switch meta.Kind {
			case "ValidatingAdmissionPolicy":
				var p admissionv1.ValidatingAdmissionPolicy
				if err := yaml.UnmarshalStrict(doc, &p); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
					t.Errorf("%s: policy %s: failurePolicy is not Fail", f, p.Name)
				}
				for i, v := range p.Spec.Validations {
					if v.Message == "" || v.MessageExpression == "" {
						t.Errorf("%s: policy %s: validations[%d] lacks message or messageExpression", f, p.Name, i)
					}
				}
				policies[p.Name] = true
			case "ValidatingAdmissionPolicyBinding":
				var b admissionv1.ValidatingAdmissionPolicyBinding
				if err := yaml.UnmarshalStrict(doc, &b); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny {
					t.Errorf("%s: binding %s: validationActions %v, want [Deny]", f, b.Name, b.Spec.ValidationActions)
				}
				bindings[b.Spec.PolicyName] = true
			default:
				t.Errorf("%s: unexpected kind %q", f, meta.Kind)
			}
		}
	}
	if len(policies) != 4 {
		t.Errorf("policies %v, want 4", policies)
	}
	for p := range policies {
		if !bindings[p] {
			t.Errorf("policy %s has no binding", p)
		}
	}
}

func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// step is one request of the table: do sends it as user; policy is the policy that must deny
// it, with a message containing each of deny, or "" when it must be allowed.
type step struct {
	name   string
	user   string
	do     func(ctx context.Context, c client.Client) error
	policy string
	deny   []string
}

func TestPolicies(t *testing.T) {
	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{})
	ctx := context.Background()
	admin := cluster.Client

	// Authorization runs before admission: the tenant user may do everything the cases try,
	// so a denial is the policies'. The controller's ServiceAccount gets namespace writes
	// for the label cases only.
	applyObjects(t, admin,
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "policies-test"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"namespaces", "namespaces/status"}, Verbs: []string{"get", "list", "create", "update", "patch"}},
				{APIGroups: []string{"gateway.networking.k8s.io"}, Resources: []string{"gateways", "listenersets", "httproutes", "tlsroutes"}, Verbs: []string{"get", "list", "create", "update", "patch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "policies-test"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "policies-test"},
			Subjects: []rbacv1.Subject{
				{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: tenantUser},
				{Kind: "ServiceAccount", Name: "snigate", Namespace: "snigate-system"},
			},
		},
		namespace("acme", map[string]string{"snigate.dev/host": apex, "snigate.dev/gateway": "acme"}),
		namespace("shop", map[string]string{"snigate.dev/host": childApex, "snigate.dev/gateway": "acme"}),
		namespace("nohost", map[string]string{"snigate.dev/gateway": "acme"}),
		namespace("plain", map[string]string{"team": "web"}),
		namespace("hostonly", map[string]string{"snigate.dev/host": "other.example.com"}),
		namespace("labels", map[string]string{"snigate.dev/host": "labels.example.com", "team": "web"}),
	)

	for _, f := range policyFiles(t) {
		cluster.Apply(t, f)
	}

	// The policies' status.typeChecking (expression warnings) is written by
	// kube-controller-manager, which this test does not run; every expression and message
	// expression is exercised by the steps below instead, whose messages the test checks
	// (a messageExpression that fails to evaluate falls back to the static message).

	clients := map[string]client.Client{}
	for _, u := range []struct {
		name string
		cfg  rest.ImpersonationConfig
	}{
		{tenantUser, rest.ImpersonationConfig{UserName: tenantUser}},
		{kubetest.ControllerUser, rest.ImpersonationConfig{UserName: kubetest.ControllerUser}},
		{masterUser, rest.ImpersonationConfig{UserName: masterUser, Groups: []string{"system:masters"}}},
	} {
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = u.cfg
		c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		clients[u.name] = c
	}

	// A policy is enforced a moment after it is created: wait until a canary of each is
	// denied. The canaries are dry runs (admission runs, nothing is stored), so one that
	// passes before its policy is enforced leaves nothing behind.
	canaries := map[string]client.Object{
		"gateway-hostnames.snigate.dev": gateway("acme", "canary", listener("https", "HTTPS", 443, "canary.other.com")),
		"route-hostnames.snigate.dev":   route("HTTPRoute", "acme", "canary", "canary.other.com"),
		"namespace-labels.snigate.dev":  namespace("canary", map[string]string{"snigate.dev/host": "canary.example.com"}),
	}
	for name, o := range canaries {
		kubetest.Eventually(t, 30*time.Second, "policy "+name+" enforced", func() error {
			err := clients[tenantUser].Create(ctx, o.DeepCopyObject().(client.Object), client.DryRunAll)
			if err == nil {
				return fmt.Errorf("canary allowed")
			}
			if !strings.Contains(err.Error(), name) {
				return err
			}
			return nil
		})
	}

	const (
		gatewayPolicy = "gateway-hostnames.snigate.dev"
		routePolicy   = "route-hostnames.snigate.dev"
		labelPolicy   = "namespace-labels.snigate.dev"
	)
	tenantListeners := []map[string]any{
		listener("http", "HTTP", 80, ""),
		listener("https", "HTTPS", 443, "*."+apex),
		listener("https-apex", "HTTPS", 443, apex),
		listener("tls-vault", "TLS", 443, "vault."+apex),
		listener("tls-pg", "TLS", 5432, "*.pg."+apex),
	}
	redirect := route("HTTPRoute", "acme", "acme-http-redirect", apex, "*."+apex)
	redirect.SetLabels(map[string]string{"snigate.dev/tenant-gateway": "acme"})

	steps := []step{
		// Routes in a tenant's tree.
		{name: "HTTPRoute outside the apex", user: tenantUser,
			do:     create(route("HTTPRoute", "acme", "outside", "app."+apex, "x.other.com")),
			policy: routePolicy, deny: []string{`spec.hostnames[1] "x.other.com" is not under the namespace's apex acme.example.com`}},
		{name: "HTTPRoute without hostnames", user: tenantUser,
			do:     create(route("HTTPRoute", "acme", "nohostnames")),
			policy: routePolicy, deny: []string{"spec.hostnames: a route in a tenant namespace must declare hostnames", apex}},
		{name: "HTTPRoute in a tree namespace without host label", user: tenantUser,
			do:     create(route("HTTPRoute", "nohost", "app", "app."+apex)),
			policy: routePolicy, deny: []string{"namespace nohost is in tenant acme's tree", "no snigate.dev/host label"}},
		{name: "HTTPRoute suffix without dot", user: tenantUser,
			do:     create(route("HTTPRoute", "acme", "evil", "evil"+apex)),
			policy: routePolicy, deny: []string{`spec.hostnames[0] "evilacme.example.com" is not under`}},
		{name: "HTTPRoute wildcard above the apex", user: tenantUser,
			do:     create(route("HTTPRoute", "acme", "wide", "*.example.com")),
			policy: routePolicy, deny: []string{`spec.hostnames[0] "*.example.com"`}},
		{name: "HTTPRoute inside the apex", user: tenantUser,
			do: create(route("HTTPRoute", "acme", "app", apex, "*."+apex, "app."+apex, "*.a.b."+apex))},
		{name: "HTTPRoute updated to a hostname outside", user: tenantUser,
			do: update(&unstructured.Unstructured{}, "HTTPRoute", "acme", "app", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringSlice(u.Object, []string{"app." + apex, "app.other.com"}, "spec", "hostnames")
			}),
			policy: routePolicy, deny: []string{`spec.hostnames[1] "app.other.com" is not under`}},
		{name: "HTTPRoute in a child, under the tenant's apex but not the child's", user: tenantUser,
			do:     create(route("HTTPRoute", "shop", "app", "app."+apex)),
			policy: routePolicy, deny: []string{`"app.acme.example.com" is not under the namespace's apex shop.acme.example.com`}},
		{name: "HTTPRoute in a child, under its apex", user: tenantUser,
			do: create(route("HTTPRoute", "shop", "cart", "cart."+childApex))},
		{name: "the TenantGateway's redirect route", user: kubetest.ControllerUser,
			do: create(redirect)},
		{name: "cert-manager's HTTP-01 solver route", user: tenantUser,
			do: create(route("HTTPRoute", "acme", "cm-acme-http-solver-x", "app."+apex))},
		{name: "HTTPRoute in a namespace outside any tree, no hostnames", user: tenantUser,
			do: create(route("HTTPRoute", "plain", "any"))},
		{name: "HTTPRoute in a namespace outside any tree, any hostname", user: tenantUser,
			do: create(route("HTTPRoute", "plain", "other", "www.other.com"))},
		{name: "HTTPRoute in a host-only namespace (no tree), no hostnames", user: tenantUser,
			do: create(route("HTTPRoute", "hostonly", "any"))},
		{name: "TLSRoute outside the apex", user: tenantUser,
			do:     create(route("TLSRoute", "acme", "outside", "db.other.com")),
			policy: routePolicy, deny: []string{`spec.hostnames[0] "db.other.com" is not under the namespace's apex acme.example.com`}},
		{name: "TLSRoute in a tree namespace without host label", user: tenantUser,
			do:     create(route("TLSRoute", "nohost", "db", "db."+apex)),
			policy: routePolicy, deny: []string{"no snigate.dev/host label"}},
		{name: "TLSRoute inside the apex", user: tenantUser,
			do: create(route("TLSRoute", "acme", "vault", "vault."+apex, "*.pg."+apex))},
		{name: "TLSRoute in a namespace outside any tree", user: tenantUser,
			do: create(route("TLSRoute", "plain", "db", "db.other.com"))},

		// Gateways and ListenerSets in a namespace with an apex.
		{name: "Gateway listener outside the apex", user: tenantUser,
			do: create(gateway("acme", "outside", listener("http", "HTTP", 80, ""),
				listener("https", "HTTPS", 443, "www.other.com"))),
			policy: gatewayPolicy, deny: []string{`spec.listeners[1] (https): hostname "www.other.com" is not under the namespace's apex acme.example.com`}},
		{name: "Gateway HTTPS listener without hostname", user: tenantUser,
			do:     create(gateway("acme", "catchall", listener("https", "HTTPS", 443, ""))),
			policy: gatewayPolicy, deny: []string{"spec.listeners[0] (https): a listener of protocol HTTPS without hostname takes every name"}},
		{name: "Gateway TLS listener without hostname", user: tenantUser,
			do:     create(gateway("acme", "catchall-tls", listener("tls", "TLS", 443, ""))),
			policy: gatewayPolicy, deny: []string{"spec.listeners[0] (tls): a listener of protocol TLS without hostname"}},
		{name: "Gateway TCP listener (never has a hostname)", user: tenantUser,
			do:     create(gateway("acme", "tcp", listener("tcp", "TCP", 5432, ""))),
			policy: gatewayPolicy, deny: []string{"spec.listeners[0] (tcp): a listener of protocol TCP without hostname"}},
		{name: "Gateway as TenantGateway renders it, http listener without hostname", user: kubetest.ControllerUser,
			do: create(gateway("acme", "acme", tenantListeners...))},
		{name: "Gateway inside the apex, as the tenant user", user: tenantUser,
			do: create(gateway("acme", "inside", listener("http", "HTTP", 80, ""), listener("https", "HTTPS", 443, "app."+apex)))},
		{name: "Gateway updated to a listener outside the apex", user: kubetest.ControllerUser,
			do: update(&unstructured.Unstructured{}, "Gateway", "acme", "acme", func(u *unstructured.Unstructured) {
				ls, _, _ := unstructured.NestedSlice(u.Object, "spec", "listeners")
				ls = append(ls, listener("https-x", "HTTPS", 443, "x.example.com"))
				_ = unstructured.SetNestedSlice(u.Object, ls, "spec", "listeners")
			}),
			policy: gatewayPolicy, deny: []string{`spec.listeners[5] (https-x): hostname "x.example.com" is not under`}},
		{name: "Gateway in a child, listener under the tenant's apex only", user: tenantUser,
			do:     create(gateway("shop", "shop", listener("https", "HTTPS", 443, "*."+apex))),
			policy: gatewayPolicy, deny: []string{`hostname "*.acme.example.com" is not under the namespace's apex shop.acme.example.com`}},
		{name: "Gateway in a namespace without apex, listeners without hostname", user: tenantUser,
			do: create(gateway("plain", "edge", listener("https", "HTTPS", 443, ""), listener("tcp", "TCP", 5432, "")))},
		{name: "Gateway in a tree namespace without host label (its routes are refused instead)", user: tenantUser,
			do: create(gateway("nohost", "edge", listener("https", "HTTPS", 443, "www.other.com")))},
		{name: "Gateway in a host-only namespace, under its apex", user: tenantUser,
			do: create(gateway("hostonly", "edge", listener("https", "HTTPS", 443, "www.other.example.com")))},
		{name: "Gateway in a host-only namespace, outside its apex", user: tenantUser,
			do:     create(gateway("hostonly", "wrong", listener("https", "HTTPS", 443, "www."+apex))),
			policy: gatewayPolicy, deny: []string{"is not under the namespace's apex other.example.com"}},
		{name: "ListenerSet listener outside the apex", user: tenantUser,
			do:     create(listenerSet("acme", "extra", listener("https", "HTTPS", 443, "www.other.com"))),
			policy: gatewayPolicy, deny: []string{`spec.listeners[0] (https): hostname "www.other.com" is not under`}},
		{name: "ListenerSet listener inside the apex", user: tenantUser,
			do: create(listenerSet("acme", "extra-ok", listener("https", "HTTPS", 443, "extra."+apex)))},

		// The namespace labels.
		{name: "tenant user creates a namespace with snigate.dev/host", user: tenantUser,
			do:     create(namespace("mine", map[string]string{"snigate.dev/host": "mine.example.com"})),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/host"]: alice may not set, change or remove it`, "system:serviceaccount:snigate-system:snigate", "system:masters"}},
		{name: "tenant user creates a namespace with snigate.dev/gateway", user: tenantUser,
			do:     create(namespace("mine", map[string]string{"snigate.dev/gateway": "acme"})),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/gateway"]: alice may not`}},
		{name: "tenant user creates a namespace with other labels", user: tenantUser,
			do: create(namespace("mine", map[string]string{"team": "web"}))},
		{name: "tenant user adds snigate.dev/host", user: tenantUser,
			do:     setLabel("plain", "snigate.dev/host", "plain.example.com"),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/host"]: alice may not`}},
		{name: "tenant user adds snigate.dev/gateway", user: tenantUser,
			do:     setLabel("plain", "snigate.dev/gateway", "acme"),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/gateway"]: alice may not`}},
		{name: "tenant user changes snigate.dev/host", user: tenantUser,
			do:     setLabel("labels", "snigate.dev/host", "other.example.com"),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/host"]: alice may not`}},
		{name: "tenant user removes snigate.dev/host", user: tenantUser,
			do:     removeLabel("labels", "snigate.dev/host"),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/host"]: alice may not`}},
		{name: "tenant user changes snigate.dev/host through the status subresource", user: tenantUser,
			do:     setLabelStatus("labels", "snigate.dev/host", "other.example.com"),
			policy: labelPolicy, deny: []string{`metadata.labels["snigate.dev/host"]: alice may not`}},
		{name: "tenant user changes another label", user: tenantUser,
			do: setLabel("labels", "team", "db")},
		{name: "tenant user adds another label", user: tenantUser,
			do: setLabel("labels", "tier", "gold")},
		{name: "tenant user removes another label", user: tenantUser,
			do: removeLabel("labels", "tier")},
		{name: "tenant user sets snigate.dev/host to the value it has", user: tenantUser,
			do: setLabel("labels", "snigate.dev/host", "labels.example.com")},
		{name: "controller changes snigate.dev/host", user: kubetest.ControllerUser,
			do: setLabel("labels", "snigate.dev/host", "changed.example.com")},
		{name: "controller removes snigate.dev/host", user: kubetest.ControllerUser,
			do: removeLabel("labels", "snigate.dev/host")},
		{name: "controller creates a namespace with both labels", user: kubetest.ControllerUser,
			do: create(namespace("by-controller", map[string]string{"snigate.dev/host": "c.example.com", "snigate.dev/gateway": "acme"}))},
		{name: "system:masters member adds snigate.dev/host", user: masterUser,
			do: setLabel("labels", "snigate.dev/host", "labels.example.com")},
		{name: "system:masters member changes snigate.dev/gateway", user: masterUser,
			do: setLabel("plain", "snigate.dev/gateway", "acme")},
		{name: "system:masters member removes snigate.dev/gateway", user: masterUser,
			do: removeLabel("plain", "snigate.dev/gateway")},
		{name: "system:masters member creates a namespace with snigate.dev/host", user: masterUser,
			do: create(namespace("by-admin", map[string]string{"snigate.dev/host": "admin.example.com"}))},
		// Why the policy matches namespaces/status: an update through it keeps label changes.
		{name: "system:masters member changes snigate.dev/host through the status subresource, and it sticks", user: masterUser,
			do: func(ctx context.Context, c client.Client) error {
				if err := setLabelStatus("labels", "snigate.dev/host", "status.example.com")(ctx, c); err != nil {
					return err
				}
				var ns corev1.Namespace
				if err := c.Get(ctx, client.ObjectKey{Name: "labels"}, &ns); err != nil {
					return err
				}
				if got := ns.Labels["snigate.dev/host"]; got != "status.example.com" {
					return fmt.Errorf("label after the status update: %q (the status subresource dropped the change: matching it is unneeded)", got)
				}
				return nil
			}},
	}

	runSteps(t, ctx, clients, steps)

	t.Run("allowed list patched", func(t *testing.T) {
		testAllowedListPatched(t, cluster, clients[tenantUser])
	})
}

// runSteps sends the steps in order (some build on the objects of earlier ones) and checks
// each is allowed, or denied by its policy with its message.
func runSteps(t *testing.T, ctx context.Context, clients map[string]client.Client, steps []step) {
	t.Helper()
	for _, s := range steps {
		err := s.do(ctx, clients[s.user])
		switch {
		case s.policy == "" && err != nil:
			t.Errorf("%s (as %s): denied, want allowed: %v", s.name, s.user, err)
		case s.policy != "" && err == nil:
			t.Errorf("%s (as %s): allowed, want denied by %s", s.name, s.user, s.policy)
		case s.policy != "":
			msg := err.Error()
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("%s (as %s): error is not Forbidden or Invalid: %v", s.name, s.user, err)
			}
			want := append([]string{"ValidatingAdmissionPolicy '" + s.policy + "'"}, s.deny...)
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s (as %s): message lacks %q:\n%s", s.name, s.user, w, msg)
				}
			}
			t.Logf("%s: denied: %s", s.name, msg)
		default:
			t.Logf("%s: allowed", s.name)
		}
	}
}

// testAllowedListPatched applies the namespace-labels policy as examples/install-overlay
// patches it and checks the users and group it adds may set the labels, and others still
// may not.
func testAllowedListPatched(t *testing.T, cluster *kubetest.Cluster, tenant client.Client) {
	kubectl, err := exec.LookPath("kubectl")
	testutil.Require(t, "kubectl (renders examples/install-overlay with kustomize)", err)
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(cluster.Root, "examples", "install-overlay")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize examples/install-overlay: %v", err)
	}
	var patched *admissionv1.ValidatingAdmissionPolicy
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for patched == nil {
		doc, err := r.Read()
		if err != nil {
			t.Fatalf("no ValidatingAdmissionPolicy namespace-labels.snigate.dev in the overlay: %v", err)
		}
		var p admissionv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal(doc, &p); err == nil && p.Kind == "ValidatingAdmissionPolicy" && p.Name == "namespace-labels.snigate.dev" {
			patched = &p
		}
	}

	ctx := context.Background()
	const argo = "system:serviceaccount:argocd:argocd-application-controller"
	applyObjects(t, cluster.Client, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "policies-test-patched"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "policies-test"},
		Subjects: []rbacv1.Subject{
			{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "platform-admins"},
			{Kind: "ServiceAccount", Name: "argocd-application-controller", Namespace: "argocd"},
		},
	})
	var current admissionv1.ValidatingAdmissionPolicy
	if err := cluster.Client.Get(ctx, client.ObjectKey{Name: patched.Name}, &current); err != nil {
		t.Fatal(err)
	}
	current.Spec = patched.Spec
	if err := cluster.Client.Update(ctx, &current); err != nil {
		t.Fatal(err)
	}

	as := func(cfg rest.ImpersonationConfig) client.Client {
		rc := rest.CopyConfig(cluster.Config)
		rc.Impersonate = cfg
		c, err := client.New(rc, client.Options{Scheme: clientgoscheme.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	carol := as(rest.ImpersonationConfig{UserName: "carol", Groups: []string{"platform-admins"}})
	// The update is enforced a moment later, like the creation.
	kubetest.Eventually(t, 30*time.Second, "platform-admins may set snigate.dev/host", func() error {
		return setLabel("labels", "snigate.dev/host", "carol.example.com")(ctx, carol)
	})
	if err := setLabel("labels", "snigate.dev/host", "argo.example.com")(ctx, as(rest.ImpersonationConfig{UserName: argo})); err != nil {
		t.Errorf("Argo CD's controller (added to allowedUsers): denied: %v", err)
	}
	if err := setLabel("labels", "snigate.dev/gateway", "acme")(ctx, as(rest.ImpersonationConfig{UserName: kubetest.ControllerUser})); err != nil {
		t.Errorf("the snigate controller (kept in allowedUsers): denied: %v", err)
	}
	err = setLabel("labels", "snigate.dev/host", "alice.example.com")(ctx, tenant)
	if err == nil {
		t.Fatal("tenant user: allowed, want denied")
	}
	if want := "only the users [system:serviceaccount:snigate-system:snigate, " + argo + "] and the groups [system:masters, platform-admins] may"; !strings.Contains(err.Error(), want) {
		t.Errorf("tenant user: message lacks %q:\n%v", want, err)
	}
}

func applyObjects(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func create(o client.Object) func(ctx context.Context, c client.Client) error {
	return func(ctx context.Context, c client.Client) error {
		// A copy: Create fills in server fields, and the step's object stays as written.
		return c.Create(ctx, o.DeepCopyObject().(client.Object))
	}
}

func update(u *unstructured.Unstructured, kind, ns, name string, edit func(*unstructured.Unstructured)) func(ctx context.Context, c client.Client) error {
	return func(ctx context.Context, c client.Client) error {
		u.SetAPIVersion("gateway.networking.k8s.io/v1")
		u.SetKind(kind)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return fmt.Errorf("test setup: %w", err)
		}
		edit(u)
		return c.Update(ctx, u)
	}
}

func editNamespace(name string, status bool, edit func(labels map[string]string)) func(ctx context.Context, c client.Client) error {
	return func(ctx context.Context, c client.Client) error {
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
			return fmt.Errorf("test setup: %w", err)
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		edit(ns.Labels)
		if status {
			return c.Status().Update(ctx, &ns)
		}
		return c.Update(ctx, &ns)
	}
}

func setLabel(ns, key, value string) func(ctx context.Context, c client.Client) error {
	return editNamespace(ns, false, func(l map[string]string) { l[key] = value })
}

func setLabelStatus(ns, key, value string) func(ctx context.Context, c client.Client) error {
	return editNamespace(ns, true, func(l map[string]string) { l[key] = value })
}

func removeLabel(ns, key string) func(ctx context.Context, c client.Client) error {
	return editNamespace(ns, false, func(l map[string]string) { delete(l, key) })
}

func route(kind, ns, name string, hostnames ...string) *unstructured.Unstructured {
	spec := map[string]any{
		"parentRefs": []any{map[string]any{"name": "acme", "namespace": "acme"}},
	}
	if len(hostnames) > 0 {
		hs := make([]any, len(hostnames))
		for i, h := range hostnames {
			hs[i] = h
		}
		spec["hostnames"] = hs
	}
	backend := map[string]any{"backendRefs": []any{map[string]any{"name": "app", "port": int64(443)}}}
	spec["rules"] = []any{backend}
	return object(kind, ns, name, spec)
}

func listener(name, protocol string, port int64, hostname string) map[string]any {
	l := map[string]any{"name": name, "protocol": protocol, "port": port}
	if hostname != "" {
		l["hostname"] = hostname
	}
	switch protocol {
	case "HTTPS":
		l["tls"] = map[string]any{"mode": "Terminate", "certificateRefs": []any{map[string]any{"name": "wildcard-tls"}}}
	case "TLS":
		l["tls"] = map[string]any{"mode": "Passthrough"}
	}
	return l
}

func listeners(ls []map[string]any) []any {
	out := make([]any, len(ls))
	for i, l := range ls {
		out[i] = l
	}
	return out
}

func gateway(ns, name string, ls ...map[string]any) *unstructured.Unstructured {
	return object("Gateway", ns, name, map[string]any{"gatewayClassName": "snigate", "listeners": listeners(ls)})
}

func listenerSet(ns, name string, ls ...map[string]any) *unstructured.Unstructured {
	return object("ListenerSet", ns, name, map[string]any{
		"parentRef": map[string]any{"name": "acme", "group": "gateway.networking.k8s.io", "kind": "Gateway"},
		"listeners": listeners(ls),
	})
}

func object(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("gateway.networking.k8s.io/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
