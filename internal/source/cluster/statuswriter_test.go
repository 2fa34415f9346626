package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/testutil/kubetest"
	"github.com/snigate/snigate/internal/translate"
)

// The status writer writes route statuses several at a time, on the real API server, each
// once: a second pass with the same status writes nothing.
func TestStatusWriterWritesRoutesConcurrently(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme})
	ctx := context.Background()
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "routes"}}); err != nil {
		t.Fatal(err)
	}
	const routes = 24
	st := &translate.Status{}
	for i := range routes {
		name := fmt.Sprintf("db-%02d", i)
		r := &gwv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "routes", Name: name},
			Spec: gwv1.TLSRouteSpec{Hostnames: []gwv1.Hostname{gwv1.Hostname(name + ".example.test")},
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
				Rules:           []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: "db", Port: ptrTo(gwv1.PortNumber(5432))}}}}}}}
		if err := cluster.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		st.TLSRoutes = append(st.TLSRoutes, translate.ObjectStatus[gwv1.TLSRouteStatus]{Namespace: "routes", Name: name,
			Status: gwv1.TLSRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{{
				ParentRef: gwv1.ParentReference{Name: "edge"}, ControllerName: translate.DefaultControllerName,
				Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1, LastTransitionTime: metav1.Now()}},
			}}}}})
	}
	// Each update held a little, so that writes made together overlap.
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	direct, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cl := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			mu.Lock()
			if n > most.Load() {
				most.Store(n)
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			return c.Status().Update(ctx, obj, opts...)
		},
	})
	w := newStatusWriter(cl, cluster.Client, translate.DefaultControllerName, metrics.New(), slog.New(slog.DiscardHandler))
	if err := w.write(ctx, st); err != nil {
		t.Fatal(err)
	}
	if n := w.writes.Load(); n != routes {
		t.Errorf("%d route statuses written, want %d", n, routes)
	}
	if m := most.Load(); m < 2 || m > concurrentWrites {
		t.Errorf("at most %d route status writes in flight, want 2 to %d", m, concurrentWrites)
	}
	var list gwv1.TLSRouteList
	if err := cluster.Client.List(ctx, &list, client.InNamespace("routes")); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if len(r.Status.Parents) != 1 || r.Status.Parents[0].ControllerName != translate.DefaultControllerName {
			t.Errorf("route %s: status %+v", r.Name, r.Status)
		}
	}
	if err := w.write(ctx, st); err != nil {
		t.Fatal(err)
	}
	if n := w.writes.Load(); n != routes {
		t.Errorf("a second pass with the same status wrote: %d writes in all, want %d", n, routes)
	}
}
