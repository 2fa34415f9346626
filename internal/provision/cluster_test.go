package provision_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

type recorder struct {
	mu      sync.Mutex
	last    *snapshot.Snapshot
	applies int
}

func (r *recorder) apply(s *snapshot.Snapshot) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.applies = s, r.applies+1
	return nil
}

func (r *recorder) get() (*snapshot.Snapshot, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.applies
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// run starts c and stops it in t.Cleanup; done reports Start's result.
func run(t *testing.T, c *cluster.Controller) (stop func(), done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Error("controller did not stop within 30s")
		}
	})
	return cancel, ch
}

// table GETs path from the API server as a meta.k8s.io/v1 Table (what kubectl get prints)
// and returns column name → cell of the row named name.
func table(t *testing.T, cfg *rest.Config, path, name string) map[string]string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(base.String(), "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s as Table: %s: %s", path, resp.Status, body)
	}
	var tab metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&tab); err != nil {
		t.Fatalf("%s: decoding Table: %v", path, err)
	}
	for _, row := range tab.Rows {
		cells := map[string]string{}
		for i, c := range tab.ColumnDefinitions {
			cells[c.Name] = fmt.Sprint(row.Cells[i])
		}
		if cells["Name"] == name {
			return cells
		}
	}
	t.Fatalf("%s: no row %s in %+v", path, name, tab.Rows)
	return nil
}

func TestProvisionOnRealAPIServer(t *testing.T) {
	scheme, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	// The controller and the data plane run with the install manifests' RBAC and nothing
	// more: a missing permission fails this test. The CRDs are exactly as `kubectl apply -k
	// config/default` installs them, printer column patches included.
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{
		Options: kubetest.Options{CRDs: kubetest.KustomizedCRDs(t)},
		Scheme:  scheme,
		// The controller's own NetworkPolicy too: the API server validates it.
		Manifests: []string{"config/gatewayclass/gatewayclass.yaml", "config/controller/networkpolicy.yaml"},
	})
	env, cl, as := kc.Env, kc.Client, kc.As
	ctx := context.Background()

	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	tlsMode := gwv1.TLSModePassthrough
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "edge",
			Annotations: map[string]string{provision.ReplicasAnnotation: "2"}},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "snigate",
			Infrastructure:   &gwv1.GatewayInfrastructure{Labels: map[gwv1.LabelKey]gwv1.LabelValue{"team": "db"}},
			Listeners: []gwv1.Listener{
				{Name: "tls", Protocol: gwv1.TLSProtocolType, Port: 8443, TLS: &gwv1.ListenerTLSConfig{Mode: &tlsMode}},
				{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: 5432},
			},
		},
	}
	if err := cl.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctrl, err := cluster.New(cluster.Config{
		REST: as(kubetest.ControllerUser), Logger: log.With("process", "controller"),
		LeaderElection: true, LeaderElectionNamespace: "snigate-system",
		// Generous: on a loaded machine the API server can take seconds to answer, and a lost
		// lease stops the controller (a 3 s renew deadline failed a CI-like run under load).
		LeaseDuration: 20 * time.Second, RenewDeadline: 15 * time.Second, RetryPeriod: time.Second,
		Provision: &provision.Options{Image: "registry.example/snigate:test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctrl)

	name := provisioned(gw) // the provisioned objects
	owned := func(o client.Object) error {
		for _, r := range o.GetOwnerReferences() {
			if r.UID == gw.UID && r.Kind == "Gateway" && r.APIVersion == gwv1.GroupVersion.String() &&
				r.Controller != nil && *r.Controller && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
				return nil
			}
		}
		return fmt.Errorf("%s: no controller owner reference to Gateway %s: %+v", o.GetName(), gw.UID, o.GetOwnerReferences())
	}
	labelled := func(o client.Object) error {
		l := o.GetLabels()
		if l[provision.LabelGatewayName] != "edge" || l[provision.LabelGatewayClassName] != "snigate" || l["team"] != "db" {
			return fmt.Errorf("%s: labels %v", o.GetName(), l)
		}
		return nil
	}
	servicePorts := func(want ...int32) func() error {
		return func() error {
			var svc corev1.Service
			if err := cl.Get(ctx, name, &svc); err != nil {
				return err
			}
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
				return fmt.Errorf("Service type %s", svc.Spec.Type)
			}
			var got []int32
			for _, p := range svc.Spec.Ports {
				if p.Protocol != corev1.ProtocolTCP || p.TargetPort.IntVal != p.Port {
					return fmt.Errorf("port %+v", p)
				}
				got = append(got, p.Port)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("Service ports %v, want %v", got, want)
			}
			return errors.Join(owned(&svc), labelled(&svc))
		}
	}

	// The NetworkPolicy admits the listener ports and the metrics port to the data plane's
	// Pods, and nothing else.
	policyPorts := func(want ...int32) func() error {
		return func() error {
			var np networkingv1.NetworkPolicy
			if err := cl.Get(ctx, name, &np); err != nil {
				return err
			}
			var got []int32
			for _, r := range np.Spec.Ingress {
				if len(r.From) != 0 {
					return fmt.Errorf("ingress rule with sources %+v", r.From)
				}
				for _, p := range r.Ports {
					if p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP || p.Port == nil {
						return fmt.Errorf("port %+v", p)
					}
					got = append(got, p.Port.IntVal)
				}
			}
			if !slices.Equal(got, want) || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				return fmt.Errorf("NetworkPolicy ports %v (types %v), want %v", got, np.Spec.PolicyTypes, want)
			}
			var d appsv1.Deployment
			if err := cl.Get(ctx, name, &d); err != nil {
				return err
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				return fmt.Errorf("NetworkPolicy selector %v does not select the data plane Pods %v (%v)", np.Spec.PodSelector, d.Spec.Template.Labels, err)
			}
			return errors.Join(owned(&np), labelled(&np))
		}
	}

	t.Run("Provisioned", func(t *testing.T) {
		kubetest.Eventually(t, 30*time.Second, "Deployment", func() error {
			var d appsv1.Deployment
			if err := cl.Get(ctx, name, &d); err != nil {
				return err
			}
			c := d.Spec.Template.Spec.Containers[0]
			if *d.Spec.Replicas != 2 || c.Image != "registry.example/snigate:test" ||
				!slices.Equal(c.Args[:3], []string{"dataplane", "--gateway", "apps/edge"}) ||
				!slices.Contains(c.Args, "--admin=127.0.0.1:9901") || !slices.Contains(c.Args, "--metrics=:9902") ||
				c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Port.StrVal != "metrics" ||
				d.Spec.Template.Spec.ServiceAccountName != name.Name {
				return fmt.Errorf("Deployment: replicas %d, image %s, args %v, serviceAccount %s",
					*d.Spec.Replicas, c.Image, c.Args, d.Spec.Template.Spec.ServiceAccountName)
			}
			// Rollouts: none unavailable, the readiness grace and drain passed on, the
			// kubelet's deadline past both (the defaults: 5 s + 30 s + 5 s).
			if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 ||
				!slices.Contains(c.Args, "--shutdown-grace=5s") || !slices.Contains(c.Args, "--drain-timeout=30s") ||
				*d.Spec.Template.Spec.TerminationGracePeriodSeconds != 40 {
				return fmt.Errorf("Deployment: strategy %+v, args %v, terminationGracePeriodSeconds %v",
					d.Spec.Strategy, c.Args, d.Spec.Template.Spec.TerminationGracePeriodSeconds)
			}
			return errors.Join(owned(&d), labelled(&d))
		})
		kubetest.Eventually(t, 30*time.Second, "PodDisruptionBudget for the 2 replicas", func() error {
			var pdb policyv1.PodDisruptionBudget
			if err := cl.Get(ctx, name, &pdb); err != nil {
				return err
			}
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				return fmt.Errorf("maxUnavailable %v", pdb.Spec.MaxUnavailable)
			}
			return errors.Join(owned(&pdb), labelled(&pdb))
		})
		kubetest.Eventually(t, 30*time.Second, "ServiceAccount", func() error {
			var sa corev1.ServiceAccount
			if err := cl.Get(ctx, name, &sa); err != nil {
				return err
			}
			return errors.Join(owned(&sa), labelled(&sa))
		})
		kubetest.Eventually(t, 30*time.Second, "LoadBalancer Service with the two listener ports", servicePorts(5432, 8443))
		kubetest.Eventually(t, 30*time.Second, "NetworkPolicy for the listener ports and metrics", policyPorts(5432, 8443, 9902))
		kubetest.Eventually(t, 30*time.Second, "ClusterRoleBinding subjects", bindingSubjects(cl, "apps/edge-snigate"))
	})

	t.Run("AddressNotAssigned", func(t *testing.T) {
		kubetest.Eventually(t, 30*time.Second, "Gateway Programmed=False/AddressNotAssigned", func() error {
			var g gwv1.Gateway
			if err := cl.Get(ctx, gwKey(gw), &g); err != nil {
				return err
			}
			c := meta.FindStatusCondition(g.Status.Conditions, "Programmed")
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.GatewayReasonAddressNotAssigned) || c.ObservedGeneration != g.Generation {
				return fmt.Errorf("Programmed %+v", c)
			}
			if len(g.Status.Addresses) != 0 {
				return fmt.Errorf("addresses %+v before the load balancer assigned any", g.Status.Addresses)
			}
			return nil
		})
	})

	t.Run("ListenerPortChanged", func(t *testing.T) {
		var g gwv1.Gateway
		if err := cl.Get(ctx, gwKey(gw), &g); err != nil {
			t.Fatal(err)
		}
		g.Spec.Listeners[1].Port = 5433
		if err := cl.Update(ctx, &g); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "Service follows the listener port", servicePorts(5433, 8443))
		kubetest.Eventually(t, 30*time.Second, "NetworkPolicy follows the listener port", policyPorts(5433, 8443, 9902))
	})

	// The ports of the ListenerSets the Gateway allows count; a set it does not allow, or a
	// deleted one, does not.
	t.Run("ListenerSetPorts", func(t *testing.T) {
		var g gwv1.Gateway
		if err := cl.Get(ctx, gwKey(gw), &g); err != nil {
			t.Fatal(err)
		}
		g.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: ptr(gwv1.NamespacesFromSame)}}
		if err := cl.Update(ctx, &g); err != nil {
			t.Fatal(err)
		}
		set := func(ns, name string, port gwv1.PortNumber) *gwv1.ListenerSet {
			return &gwv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gwv1.ListenerSetSpec{
				ParentRef: gwv1.ParentGatewayReference{Name: gwv1.ObjectName(gw.Name), Namespace: ptr(gwv1.Namespace(gw.Namespace))},
				Listeners: []gwv1.ListenerEntry{{Name: "redis", Port: port, Protocol: gwv1.TLSProtocolType, Hostname: ptr(gwv1.Hostname("*.redis.example.test")),
					TLS: &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)}}},
			}}
		}
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}); err != nil {
			t.Fatal(err)
		}
		tenant := set(gw.Namespace, "tenant", 6379)
		for _, s := range []*gwv1.ListenerSet{tenant, set("elsewhere", "outsider", 7000)} {
			if err := cl.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		kubetest.Eventually(t, 30*time.Second, "Service with the allowed ListenerSet's port", servicePorts(5433, 6379, 8443))
		if err := cl.Delete(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "Service without the deleted ListenerSet's port", servicePorts(5433, 8443))
	})

	// A cloud controller fills status.loadBalancer.ingress; the Gateway reports it.
	t.Run("AddressFromLoadBalancer", func(t *testing.T) {
		var svc corev1.Service
		if err := cl.Get(ctx, name, &svc); err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {Hostname: "lb.example.test"}}
		if err := cl.Status().Update(ctx, &svc); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "Gateway addresses from the Service", func() error {
			var g gwv1.Gateway
			if err := cl.Get(ctx, gwKey(gw), &g); err != nil {
				return err
			}
			want := []gwv1.GatewayStatusAddress{
				{Type: ptr(gwv1.IPAddressType), Value: "192.0.2.10"},
				{Type: ptr(gwv1.HostnameAddressType), Value: "lb.example.test"},
			}
			if fmt.Sprint(deref(g.Status.Addresses)) != fmt.Sprint(deref(want)) {
				return fmt.Errorf("addresses %v, want %v", deref(g.Status.Addresses), deref(want))
			}
			c := meta.FindStatusCondition(g.Status.Conditions, "Programmed")
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != g.Generation {
				return fmt.Errorf("Programmed %+v", c)
			}
			return nil
		})
	})

	// kubectl get gateway,tlsroute: the apiserver's Table output (what kubectl prints).
	t.Run("PrinterColumns", func(t *testing.T) {
		gwRow := table(t, env.Config, "/apis/gateway.networking.k8s.io/v1/namespaces/apps/gateways", "edge")
		// The apiserver prints the first value of a multi-valued column.
		if gwRow["Address"] != "192.0.2.10" {
			t.Errorf("kubectl get gateway: Address %q", gwRow["Address"])
		}
		if gwRow["Programmed"] != "True" || gwRow["Class"] != "snigate" {
			t.Errorf("kubectl get gateway: %v", gwRow)
		}
		route := &gwv1.TLSRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
			Spec: gwv1.TLSRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge", SectionName: ptr(gwv1.SectionName("tls"))}}},
				Hostnames:       []gwv1.Hostname{"db.example.test", "db2.example.test"},
				Rules:           []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: "db", Port: ptr(gwv1.PortNumber(5432))}}}}},
			},
		}
		if err := cl.Create(ctx, route); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "TLSRoute columns", func() error {
			row := table(t, env.Config, "/apis/gateway.networking.k8s.io/v1/namespaces/apps/tlsroutes", "db")
			want := map[string]string{"Hostnames": `["db.example.test","db2.example.test"]`, "Parent": "edge",
				"Accepted": "True", "ResolvedRefs": "False"}
			for k, v := range want {
				if row[k] != v {
					return fmt.Errorf("column %s = %q, want %q (row %v)", k, row[k], v, row)
				}
			}
			return nil
		})
	})

	// A Gateway that moves to another controller's class loses what was provisioned for it.
	t.Run("LeavesOurClass", func(t *testing.T) {
		side := &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "side"},
			Spec: gwv1.GatewaySpec{GatewayClassName: "snigate", Listeners: []gwv1.Listener{
				{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: 6379}}},
		}
		if err := cl.Create(ctx, side); err != nil {
			t.Fatal(err)
		}
		key := provisioned(side)
		exists := func(want bool) func() error {
			return func() error {
				for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &corev1.ServiceAccount{}} {
					err := cl.Get(ctx, key, o)
					if want && err != nil {
						return err
					}
					if !want && !apierrors.IsNotFound(err) {
						return fmt.Errorf("%T %s still there (%v)", o, key, err)
					}
				}
				return nil
			}
		}
		kubetest.Eventually(t, 30*time.Second, "side provisioned", exists(true))
		kubetest.Eventually(t, 30*time.Second, "binding with both", bindingSubjects(cl, "apps/edge-snigate", "apps/side-snigate"))
		if err := cl.Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "other"},
			Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/other"}}); err != nil {
			t.Fatal(err)
		}
		if err := cl.Get(ctx, gwKey(side), side); err != nil {
			t.Fatal(err)
		}
		side.Spec.GatewayClassName = "other"
		if err := cl.Update(ctx, side); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "side's objects deleted", exists(false))
		kubetest.Eventually(t, 30*time.Second, "binding without side", bindingSubjects(cl, "apps/edge-snigate"))
	})

	// The provisioned data plane: `snigate dataplane` is this source, read-only, as the
	// Gateway's ServiceAccount (its only permissions come through the binding the controller
	// keeps). It serves the Gateway's snapshot and keeps it while the API server is gone.
	t.Run("DataPlane", func(t *testing.T) {
		rec := &recorder{}
		base, _, err := rest.DefaultServerUrlFor(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		link := testutil.NewLink(t, base.Host)
		dpREST := as("system:serviceaccount:apps:edge-snigate")
		dpREST.Host = "https://" + link.Addr()
		dp, err := cluster.New(cluster.Config{
			REST: dpREST, Gateway: "apps/edge", ReadOnly: true,
			Apply: rec.apply, Logger: log.With("process", "dataplane"),
		})
		if err != nil {
			t.Fatal(err)
		}
		_, done := run(t, dp)
		kubetest.Eventually(t, 30*time.Second, "data plane snapshot with both listener ports", func() error {
			s, _ := rec.get()
			if s == nil || s.Port("0.0.0.0:8443") == nil || s.Port("0.0.0.0:5433") == nil {
				return fmt.Errorf("snapshot %v", s)
			}
			return nil
		})
		if dp.StatusWrites() != 0 {
			t.Errorf("the data plane wrote status")
		}

		// Delete the Gateway: envtest runs no garbage collector, so the owned objects stay
		// (their owner references were checked above); the ServiceAccount leaves the binding.
		// The data plane then serves nothing for it.
		if err := cl.Delete(ctx, gw); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "binding without the deleted Gateway's ServiceAccount", bindingSubjects(cl))
		kubetest.Eventually(t, 30*time.Second, "data plane snapshot empty after the Gateway is deleted", func() error {
			// The data plane may lose access first (binding emptied): either way it must
			// not keep serving the deleted Gateway forever once it sees the deletion.
			s, _ := rec.get()
			if len(s.Ports) != 0 {
				return fmt.Errorf("ports %d", len(s.Ports))
			}
			return nil
		})
		// Recreate it, then cut the data plane off the API server: it keeps running and
		// serving its snapshot.
		gw2 := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "edge"}, Spec: *gw.Spec.DeepCopy()}
		if err := cl.Create(ctx, gw2); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "binding with the recreated Gateway's ServiceAccount", bindingSubjects(cl, "apps/edge-snigate"))
		kubetest.Eventually(t, 30*time.Second, "data plane serves the recreated Gateway", func() error {
			s, _ := rec.get()
			if s.Port("0.0.0.0:8443") == nil {
				return fmt.Errorf("snapshot %v", s)
			}
			return nil
		})
		before, applies := rec.get()
		link.Down()
		time.Sleep(3 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("data plane stopped when the API server went away: %v", err)
		default:
		}
		after, applies2 := rec.get()
		if after != before || applies2 != applies {
			t.Errorf("snapshot changed while the API server was unreachable (%d → %d applies)", applies, applies2)
		}
		if !dp.Runner().State().Ready {
			t.Errorf("data plane not ready while the API server is unreachable: %+v", dp.Runner().State())
		}
		// A change made meanwhile reaches the data plane within a second of the API server's
		// return, although client-go's watches are still backing off (0.8 s doubling): the data
		// plane's recovery watchdog reads the API server directly meanwhile.
		var g gwv1.Gateway
		if err := cl.Get(ctx, gwKey(gw), &g); err != nil {
			t.Fatal(err)
		}
		g.Spec.Listeners[0].Port = 9443
		if err := cl.Update(ctx, &g); err != nil {
			t.Fatal(err)
		}
		link.Up()
		back := time.Now()
		deadline := back.Add(time.Second)
		for {
			if s, _ := rec.get(); s.Port("0.0.0.0:9443") != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("data plane did not pick up the change within 1s of the API server's return")
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("data plane picked up a change %s after the API server became reachable again", time.Since(back).Round(10*time.Millisecond))
	})
}

// bindingSubjects checks that the data plane ClusterRoleBinding names exactly these
// ServiceAccounts ("namespace/name").
func bindingSubjects(cl client.Client, want ...string) func() error {
	return func() error {
		var crb rbacv1.ClusterRoleBinding
		if err := cl.Get(context.Background(), client.ObjectKey{Name: provision.DefaultClusterRoleBinding}, &crb); err != nil {
			return err
		}
		var got []string
		for _, s := range crb.Subjects {
			if s.Kind != "ServiceAccount" {
				return fmt.Errorf("subject %+v", s)
			}
			got = append(got, s.Namespace+"/"+s.Name)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("subjects %v, want %v", got, want)
		}
		return nil
	}
}

func provisioned(gw *gwv1.Gateway) client.ObjectKey {
	return client.ObjectKey{Namespace: gw.Namespace, Name: provision.Name(gw)}
}

func gwKey(gw *gwv1.Gateway) client.ObjectKey { return client.ObjectKeyFromObject(gw) }

func ptr[T any](v T) *T { return &v }

func deref(as []gwv1.GatewayStatusAddress) []string {
	var out []string
	for _, a := range as {
		out = append(out, string(*a.Type)+"="+a.Value)
	}
	return out
}
