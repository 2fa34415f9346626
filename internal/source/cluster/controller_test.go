package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
	"github.com/snigate/snigate/internal/translate"
)

// repoRoot is the repository root, two folders above this package.
const repoRoot = "../../.."

// The install manifests carry the standard-channel CRDs of the gateway-api module in go.mod,
// byte for byte.
func TestInstalledCRDsMatchModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("locating sigs.k8s.io/gateway-api: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	upstream, _ := filepath.Glob(filepath.Join(dir, "config", "crd", "standard", "*.yaml"))
	ours, _ := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "standard", "*.yaml"))
	if len(upstream) == 0 || len(upstream) != len(ours) {
		t.Fatalf("config/crd/standard has %d files, gateway-api %s has %d", len(ours), version, len(upstream))
	}
	for _, u := range upstream {
		want, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(repoRoot, "config", "crd", "standard", filepath.Base(u)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("config/crd/standard/%s differs from gateway-api %s: copy it again", filepath.Base(u), version)
		}
		if !bytes.Contains(got, []byte("gateway.networking.k8s.io/bundle-version: "+version)) && !strings.Contains(u, "_vap_") {
			t.Errorf("%s: no bundle-version %s", filepath.Base(u), version)
		}
	}
}

func condition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, gen int64) error {
	c := meta.FindStatusCondition(conds, typ)
	switch {
	case c == nil:
		return fmt.Errorf("no %s condition in %v", typ, conds)
	case c.Status != status || (reason != "" && c.Reason != reason):
		return fmt.Errorf("%s=%s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	case c.ObservedGeneration != gen:
		return fmt.Errorf("%s observedGeneration %d, want %d", typ, c.ObservedGeneration, gen)
	}
	return nil
}

type recorder struct {
	mu   sync.Mutex
	last *snapshot.Snapshot
}

func (r *recorder) apply(s *snapshot.Snapshot) error {
	r.mu.Lock()
	r.last = s
	r.mu.Unlock()
	return nil
}

func (r *recorder) get() *snapshot.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func TestControllerOnRealAPIServer(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	// The controller runs as the ServiceAccount of the install manifests, with their RBAC
	// and nothing more: a missing permission fails this test.
	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme})
	cl := cluster.Client
	ctx := context.Background()
	asSA := cluster.As(kubetest.ControllerUser)
	cluster.Apply(t, "testdata/cluster.yaml")
	cert := testutil.NewCA(t).Issue(t, "*.example.test")
	if err := cl.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "edge-cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: cert.CertPEM, corev1.TLSPrivateKeyKey: cert.KeyPEM},
	}); err != nil {
		t.Fatal(err)
	}

	rec := &recorder{}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := New(Config{
		REST: asSA, Gateway: "apps/edge", Apply: rec.apply, Logger: log,
		LeaderElection: true, LeaderElectionNamespace: "snigate-system",
		// Generous: on a loaded machine the API server can take seconds to answer, and a lost
		// lease stops the controller (a 3 s renew deadline failed a CI-like run under load).
		LeaseDuration: 20 * time.Second, RenewDeadline: 15 * time.Second, RetryPeriod: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)

	const timeout = 30 * time.Second
	ctrlName := gwv1.GatewayController(translate.DefaultControllerName)

	t.Run("GatewayClass", func(t *testing.T) {
		var gc gwv1.GatewayClass
		kubetest.Eventually(t, timeout, "GatewayClass snigate Accepted", func() error {
			if err := cl.Get(ctx, client.ObjectKey{Name: "snigate"}, &gc); err != nil {
				return err
			}
			if err := condition(gc.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", gc.Generation); err != nil {
				return err
			}
			if len(gc.Status.SupportedFeatures) == 0 {
				return errors.New("no supportedFeatures")
			}
			return nil
		})
		var other gwv1.GatewayClass
		if err := cl.Get(ctx, client.ObjectKey{Name: "other"}, &other); err != nil {
			t.Fatal(err)
		}
		// The CRD's default status (Accepted=Unknown/Pending) is left alone.
		if err := condition(other.Status.Conditions, "Accepted", metav1.ConditionUnknown, "Pending", 0); err != nil {
			t.Errorf("GatewayClass other: %v", err)
		}
	})

	t.Run("Gateway", func(t *testing.T) {
		kubetest.Eventually(t, timeout, "Gateway apps/edge Accepted and Programmed", func() error {
			var gw gwv1.Gateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "edge"}, &gw); err != nil {
				return err
			}
			for _, typ := range []string{"Accepted", "Programmed"} {
				if err := condition(gw.Status.Conditions, typ, metav1.ConditionTrue, "", gw.Generation); err != nil {
					return err
				}
			}
			if len(gw.Status.Listeners) != 2 {
				return fmt.Errorf("%d listener statuses, want 2", len(gw.Status.Listeners))
			}
			attached := map[string]int32{"passthrough": 2, "terminate": 1}
			for _, l := range gw.Status.Listeners {
				if err := condition(l.Conditions, "Programmed", metav1.ConditionTrue, "", gw.Generation); err != nil {
					return fmt.Errorf("listener %s: %w", l.Name, err)
				}
				if l.AttachedRoutes != attached[string(l.Name)] {
					return fmt.Errorf("listener %s: attachedRoutes %d, want %d", l.Name, l.AttachedRoutes, attached[string(l.Name)])
				}
			}
			return nil
		})
		var foreign gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "foreign"}, &foreign); err != nil {
			t.Fatal(err)
		}
		if len(foreign.Status.Listeners) != 0 || meta.FindStatusCondition(foreign.Status.Conditions, "Programmed").Reason != "Pending" {
			t.Errorf("Gateway of another class got status from us: %+v", foreign.Status)
		}
	})

	t.Run("TLSRoutes", func(t *testing.T) {
		routeParents := func(name string) ([]gwv1.RouteParentStatus, int64, error) {
			var r gwv1.TLSRoute
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "apps", Name: name}, &r); err != nil {
				return nil, 0, err
			}
			return r.Status.Parents, r.Generation, nil
		}
		check := func(name, resolvedReason string, resolved metav1.ConditionStatus) func() error {
			return func() error {
				parents, gen, err := routeParents(name)
				if err != nil {
					return err
				}
				if len(parents) != 1 {
					return fmt.Errorf("%d parents, want 1: %+v", len(parents), parents)
				}
				p := parents[0]
				if p.ControllerName != ctrlName {
					return fmt.Errorf("controllerName %q", p.ControllerName)
				}
				if p.ParentRef.Group == nil || *p.ParentRef.Group != gwv1.GroupName || p.ParentRef.Kind == nil || *p.ParentRef.Kind != "Gateway" {
					return fmt.Errorf("parentRef group/kind not explicit: %+v", p.ParentRef)
				}
				if err := condition(p.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", gen); err != nil {
					return err
				}
				return condition(p.Conditions, "ResolvedRefs", resolved, resolvedReason, gen)
			}
		}
		kubetest.Eventually(t, timeout, "TLSRoute apps/db", check("db", "ResolvedRefs", metav1.ConditionTrue))
		kubetest.Eventually(t, timeout, "TLSRoute apps/missing", check("missing", "BackendNotFound", metav1.ConditionFalse))
		parents, _, err := routeParents("elsewhere")
		if err != nil {
			t.Fatal(err)
		}
		if len(parents) != 0 {
			t.Errorf("route of another controller's Gateway got parents from us: %+v", parents)
		}
	})

	t.Run("Snapshot", func(t *testing.T) {
		kubetest.Eventually(t, timeout, "snapshot routes db.example.test to the EndpointSlice", func() error {
			s := rec.get()
			p := s.Port("127.0.0.1:8443")
			if p == nil {
				return fmt.Errorf("no port 127.0.0.1:8443 in snapshot %+v", s)
			}
			_, r := p.Lookup([]byte("db.example.test"))
			if r == nil || len(r.Backends) != 1 || len(r.Backends[0].Endpoints) != 1 ||
				r.Backends[0].Endpoints[0].String() != "10.1.2.3:5432" {
				return fmt.Errorf("route for db.example.test: %+v", r)
			}
			return nil
		})
		if c.Runner().State().Status == nil || !c.Runner().State().Ready {
			t.Errorf("admin state not ready: %+v", c.Runner().State())
		}
	})

	// Status that did not change must not be written again: a translation triggered by an
	// unrelated change leaves every resourceVersion alone.
	t.Run("UnchangedStatusNotRewritten", func(t *testing.T) {
		quiesce(t, c)
		before := versions(t, cl)
		writes := c.StatusWrites()
		gen, passes := c.Runner().State().Generation, c.writer.passes.Load()
		if err := cl.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unrelated"},
			StringData: map[string]string{"a": "b"},
		}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "a new translation and status pass", func() error {
			if c.Runner().State().Generation <= gen || c.writer.passes.Load() <= passes {
				return errors.New("waiting")
			}
			return nil
		})
		quiesce(t, c)
		if after := versions(t, cl); !mapsEqual(before, after) {
			t.Errorf("resourceVersions changed without a status change:\nbefore %v\nafter  %v", before, after)
		}
		if w := c.StatusWrites(); w != writes {
			t.Errorf("%d status writes for an unchanged status", w-writes)
		}
	})

	// A spec change bumps observedGeneration everywhere and keeps lastTransitionTime of the
	// conditions whose status did not change.
	t.Run("GenerationBump", func(t *testing.T) {
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "edge"}, &gw); err != nil {
			t.Fatal(err)
		}
		oldAccepted := *meta.FindStatusCondition(gw.Status.Conditions, "Accepted")
		gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{
			Name: "extra", Protocol: gwv1.TLSProtocolType, Port: 8445,
			TLS: &gwv1.ListenerTLSConfig{Mode: ptrTo(gwv1.TLSModePassthrough)},
		})
		if err := cl.Update(ctx, &gw); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "Gateway observedGeneration bump", func() error {
			var g gwv1.Gateway
			if err := cl.Get(ctx, client.ObjectKeyFromObject(&gw), &g); err != nil {
				return err
			}
			if err := condition(g.Status.Conditions, "Accepted", metav1.ConditionTrue, "", g.Generation); err != nil {
				return err
			}
			if len(g.Status.Listeners) != 3 {
				return fmt.Errorf("%d listeners in status, want 3", len(g.Status.Listeners))
			}
			if got := meta.FindStatusCondition(g.Status.Conditions, "Accepted").LastTransitionTime; !got.Equal(&oldAccepted.LastTransitionTime) {
				return fmt.Errorf("Accepted lastTransitionTime moved from %v to %v without a transition", oldAccepted.LastTransitionTime, got)
			}
			return nil
		})
		kubetest.Eventually(t, timeout, "proxy snapshot has the new listener", func() error {
			if rec.get().Port("127.0.0.1:8445") == nil {
				return errors.New("no 127.0.0.1:8445")
			}
			return nil
		})
	})

	t.Run("ConflictRetried", func(t *testing.T) { testConflictRetried(t, cl) })

	// Removing a route's parentRef to our Gateway removes our entry from its status.
	t.Run("ParentRemoved", func(t *testing.T) {
		var r gwv1.TLSRoute
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "missing"}, &r); err != nil {
			t.Fatal(err)
		}
		r.Spec.ParentRefs = []gwv1.ParentReference{{Name: "foreign"}}
		if err := cl.Update(ctx, &r); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "our parent entry removed", func() error {
			var got gwv1.TLSRoute
			if err := cl.Get(ctx, client.ObjectKeyFromObject(&r), &got); err != nil {
				return err
			}
			if len(got.Status.Parents) != 0 {
				return fmt.Errorf("parents %+v", got.Status.Parents)
			}
			return nil
		})
	})
}

// staleReader serves one stale copy of an object, the way a lagging informer cache does.
type staleReader struct {
	client.Client
	stale client.Object
	gets  int
}

func (r *staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	if r.stale != nil && key == client.ObjectKeyFromObject(r.stale) {
		r.stale.DeepCopyObject().(*gwv1.GatewayClass).DeepCopyInto(obj.(*gwv1.GatewayClass))
		r.stale = nil
		return nil
	}
	return r.Client.Get(ctx, key, obj, opts...)
}

// A write based on a stale read hits a conflict, reads the object again from the API server
// and succeeds.
func testConflictRetried(t *testing.T, cl client.Client) {
	ctx := context.Background()
	var stale gwv1.GatewayClass
	if err := cl.Get(ctx, client.ObjectKey{Name: "other"}, &stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale.DeepCopy()
	fresh.Annotations = map[string]string{"touched": "yes"}
	if err := cl.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	r := &staleReader{Client: cl, stale: &stale}
	api := &staleReader{Client: cl}
	w := newStatusWriter(r, api, translate.DefaultControllerName, metrics.New(), slog.New(slog.DiscardHandler))
	err := writeOne(ctx, w, &gwv1.GatewayClass{}, "", "other", func(o *gwv1.GatewayClass) bool {
		next := o.Status.DeepCopy()
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: "Probe", Status: metav1.ConditionTrue, Reason: "Probe", ObservedGeneration: o.Generation})
		return w.set(&o.Status, next)
	})
	if err != nil {
		t.Fatalf("writeOne after a stale read: %v", err)
	}
	if r.gets != 1 || api.gets != 1 || w.writes.Load() != 1 {
		t.Errorf("cached reads %d, API reads %d, writes %d; want 1 stale read, a conflict, 1 API read and 1 write", r.gets, api.gets, w.writes.Load())
	}
	var got gwv1.GatewayClass
	if err := cl.Get(ctx, client.ObjectKey{Name: "other"}, &got); err != nil {
		t.Fatal(err)
	}
	if meta.FindStatusCondition(got.Status.Conditions, "Probe") == nil || got.Annotations["touched"] != "yes" {
		t.Errorf("after the retried write: annotations %v, conditions %+v", got.Annotations, got.Status.Conditions)
	}
}

// quiesce waits until the controller has translated and written everything pending: no new
// translation or status pass for a while.
func quiesce(t *testing.T, c *Controller) {
	t.Helper()
	last := [2]int64{-1, -1}
	stable := 0
	for i := 0; i < 100 && stable < 10; i++ {
		now := [2]int64{int64(c.Runner().State().Generation), c.writer.passes.Load()}
		if now == last {
			stable++
		} else {
			stable = 0
		}
		last = now
		time.Sleep(100 * time.Millisecond)
	}
	if stable < 10 {
		t.Fatal("controller did not settle within 10s")
	}
}

// versions maps every Gateway API object to its resourceVersion, read from the API server.
func versions(t *testing.T, cl client.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var gcs gwv1.GatewayClassList
	var gws gwv1.GatewayList
	var rts gwv1.TLSRouteList
	for _, l := range []client.ObjectList{&gcs, &gws, &rts} {
		if err := cl.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	add := func(kind string, o client.Object) {
		out[kind+"/"+o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
	}
	for i := range gcs.Items {
		add("GatewayClass", &gcs.Items[i])
	}
	for i := range gws.Items {
		add("Gateway", &gws.Items[i])
	}
	for i := range rts.Items {
		add("TLSRoute", &rts.Items[i])
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func ptrTo[T any](v T) *T { return &v }

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runUntilCleanup starts c and stops it when the test ends, failing the test when it
// returns an error or does not stop within 30 s.
func runUntilCleanup(t *testing.T, c *Controller) {
	t.Helper()
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("controller: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("controller did not stop within 30s")
		}
	})
}
