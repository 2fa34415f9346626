//go:build linux

package cpscale

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/source/cluster"
)

// The write floor: how long the API server of this machine takes to accept the writes that
// converging cannot do without, sent by a bare client as fast as the server takes them. It
// is the lower bound of initial convergence that no controller can beat here, so that a
// convergence target can be judged against the machine rather than guessed at.
//
// The writes, per exposure: its TLSRoute created, that route's status written, and the
// exposure's status written: three, against the 2.3 to 2.9 the controller made per exposure
// to converge in the full runs. The routes are copies of the controller's own (same spec,
// same status, so the same validation) in a namespace of their own, under other names;
// the exposures' statuses are the controller's with one message changed, so that each is a
// real write and not a no-op the server drops. The client authenticates as the controller
// does (its kubeconfig), so the server spends on it what it spends on the controller
// (impersonation, the audit log), with no client-side rate limit and 32 requests in flight.
// The controller is stopped first: the server serves the floor alone, and nothing acts on
// the copies (the cluster is not used after).

// writeFloorParallel is how many requests the floor keeps in flight: past what the API
// server runs at once on 2 cores, and below its default limit of mutating requests (200).
const writeFloorParallel = 32

// writeFloor measures the floor for the exposures the cluster holds (see above). The
// controller must be stopped; the exposures' statuses are left changed, so a step measured
// after it would count rewriting them: it runs after a shape's last step only.
func (e *env) writeFloor() WriteFloor {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1e6, 1e6 // no client-side limit: the server's pace is the floor
	scheme, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var routes gwv1.TLSRouteList
	var exposures v1alpha1.DatabaseExposureList
	if err := e.cl.List(ctx, &routes); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.List(ctx, &exposures); err != nil {
		t.Fatal(err)
	}
	const ns = "cpscale-write-floor"
	if err := e.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	work := make(chan func() error)
	var wg sync.WaitGroup
	for range writeFloorParallel {
		wg.Go(func() {
			for w := range work {
				if err := w(); err != nil {
					fail(err)
				} else {
					writes.Add(1)
				}
			}
		})
	}
	start, apiCPU := time.Now(), controlPlaneCPU()
	for i := range routes.Items {
		r := &routes.Items[i]
		cp := &gwv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%s", r.Namespace, r.Name),
			Labels: r.Labels, Annotations: r.Annotations}, Spec: *r.Spec.DeepCopy()}
		status := *r.Status.DeepCopy()
		work <- func() error {
			if err := cl.Create(ctx, cp); err != nil {
				return fmt.Errorf("creating TLSRoute %s/%s: %w", cp.Namespace, cp.Name, err)
			}
			writes.Add(1)
			cp.Status = status
			if err := cl.Status().Update(ctx, cp); err != nil {
				return fmt.Errorf("writing TLSRoute %s/%s's status: %w", cp.Namespace, cp.Name, err)
			}
			return nil
		}
	}
	for i := range exposures.Items {
		x := &exposures.Items[i]
		work <- func() error {
			before := x.DeepCopy()
			if c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionProgrammed); c != nil {
				c.Message += " (write floor)"
			} else {
				x.Status.Conditions = append(x.Status.Conditions, metav1.Condition{Type: "WriteFloor", Status: metav1.ConditionTrue,
					Reason: "WriteFloor", Message: "write floor", LastTransitionTime: metav1.Now()})
			}
			if err := cl.Status().Patch(ctx, x, client.MergeFrom(before)); err != nil {
				return fmt.Errorf("writing DatabaseExposure %s/%s's status: %w", x.Namespace, x.Name, err)
			}
			return nil
		}
	}
	close(work)
	wg.Wait()
	f := WriteFloor{Writes: int(writes.Load()), Seconds: time.Since(start).Seconds(), APIServerCPU: controlPlaneCPU() - apiCPU}
	if first != nil {
		t.Fatalf("the write floor: %v", first)
	}
	if want := 2*len(routes.Items) + len(exposures.Items); f.Writes != want {
		t.Fatalf("the write floor made %d writes, want %d", f.Writes, want)
	}
	t.Logf("write floor: %d writes (%d routes created and their statuses, %d exposures' statuses) in %.1f s; API server and etcd %.1f CPU s",
		f.Writes, len(routes.Items), len(exposures.Items), f.Seconds, f.APIServerCPU)
	return f
}
