package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/testutil/kubetest"
	"github.com/snigate/snigate/internal/translate"
)

// BackendPolicy and ListenerPolicy on a real API server, the controller running as the
// install's ServiceAccount: their status (one ancestor each, Accepted with the reasons
// Accepted, TargetNotFound, Conflicted) and their effect on the snapshot (the backend's
// PROXY header, the port's trusted ranges).
func TestPoliciesOnRealAPIServer(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme,
		Options: kubetest.Options{CRDs: append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)}})
	cl := cluster.Client
	ctx := context.Background()
	cluster.Apply(t, "testdata/policies.yaml")
	// The conflicting policy comes a second later, so that it is the younger one.
	time.Sleep(1100 * time.Millisecond)
	var younger v1alpha1.BackendPolicy
	if err := yaml.Unmarshal([]byte(`
apiVersion: snigate.dev/v1alpha1
kind: BackendPolicy
metadata: {name: nats-v1, namespace: db}
spec:
  targetRefs: [{group: "", kind: Service, name: nats}]
  proxyProtocol: {version: v1}`), &younger); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &younger); err != nil {
		t.Fatal(err)
	}

	rec := &recorder{}
	c, err := New(Config{REST: cluster.As(kubetest.ControllerUser), Apply: rec.apply,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)

	ctrl := gwv1.GatewayController(translate.DefaultControllerName)
	accepted := func(st gwv1.PolicyStatus, reason string, gen int64) error {
		if len(st.Ancestors) != 1 {
			return fmt.Errorf("%d ancestors, want 1", len(st.Ancestors))
		}
		a := st.Ancestors[0]
		if a.ControllerName != ctrl {
			return fmt.Errorf("controllerName %q", a.ControllerName)
		}
		want := metav1.ConditionTrue
		if reason != "Accepted" {
			want = metav1.ConditionFalse
		}
		return condition(a.Conditions, "Accepted", want, reason, gen)
	}
	for name, reason := range map[string]string{"nats-proxy": "Accepted", "nowhere": "TargetNotFound", "nats-v1": "Conflicted"} {
		kubetest.Eventually(t, 30*time.Second, "BackendPolicy db/"+name+" "+reason, func() error {
			var p v1alpha1.BackendPolicy
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "db", Name: name}, &p); err != nil {
				return err
			}
			return accepted(p.Status, reason, p.Generation)
		})
	}
	kubetest.Eventually(t, 30*time.Second, "ListenerPolicy db/from-lb Accepted", func() error {
		var p v1alpha1.ListenerPolicy
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "db", Name: "from-lb"}, &p); err != nil {
			return err
		}
		if err := accepted(p.Status, "Accepted", p.Generation); err != nil {
			return err
		}
		if s := p.Status.Ancestors[0].AncestorRef.SectionName; s == nil || *s != "nats" {
			return fmt.Errorf("ancestor %+v, want the listener nats", p.Status.Ancestors[0].AncestorRef)
		}
		return nil
	})
	kubetest.Eventually(t, 30*time.Second, "the snapshot carries both policies", func() error {
		snap := rec.get()
		if snap == nil || len(snap.Ports) != 1 {
			return fmt.Errorf("snapshot %v", snap)
		}
		p := snap.Ports[0]
		if p.ProxyIn == nil || !p.ProxyIn.Required || len(p.ProxyIn.Trusted) != 1 {
			return fmt.Errorf("port %s reads %+v", p.Address, p.ProxyIn)
		}
		bs := p.TCP.Route.Backends
		if len(bs) != 1 || bs[0].Proxy == nil || bs[0].Proxy.Version != 2 || !bs[0].Proxy.Authority || bs[0].Proxy.ALPN {
			return fmt.Errorf("backends %+v", bs)
		}
		return nil
	})
}
