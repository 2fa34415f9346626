package pipeline

import (
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil/platform"
	"github.com/snigate/snigate/internal/translate"
)

var benchNow = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func now() metav1.Time { return benchNow }

// verdicts are a probe's results that do not change (render.VerdictSource).
type verdicts struct{ results map[probe.Key]probe.Result }

func (v *verdicts) Version() uint64                     { return 1 }
func (v *verdicts) Results() map[probe.Key]probe.Result { return maps.Clone(v.results) }

// BenchmarkRunChange is what one change costs a cluster's controller in the pipeline: one
// more exposure on the first tenant (in its place in namespace/name order, as the cluster
// lists it), rendered, translated, completed and applied, with every earlier run's memos
// (bench/cpscale's shapes, in memory), every exposure's certificate probed.
func BenchmarkRunChange(b *testing.B) {
	for _, c := range platform.Shapes {
		b.Run(c.Name, func(b *testing.B) {
			res := platform.Build(c.Tenants, c.Per, c.Shared)
			first := render.Render(res, render.Options{Now: now})
			res.ListenerSets = append(res.ListenerSets, first.ListenerSets...)
			res.TLSRoutes = append(res.TLSRoutes, first.TLSRoutes...)
			platform.Sort(res) // as the cluster lists them
			// Every exposure probed and verified, its verdict read as the controller reads
			// it (the tenant applier's renderInputs).
			verdicts := &verdicts{results: map[probe.Key]probe.Result{}}
			for _, x := range res.DatabaseExposures {
				verdicts.results[probe.Key{x.Namespace, x.Name}] = probe.Result{Reason: v1alpha1.ReasonVerified, Message: "verified",
					Endpoints: []probe.EndpointResult{{Address: "10.0.0.1:6379", Result: probe.Result{Reason: v1alpha1.ReasonVerified}}}}
			}
			var cache render.VerdictCache
			base := liveHeap()
			r, err := New(Config{Render: true, Cluster: true, RenderOptions: render.Options{CertManager: true}, Translate: translate.Options{Now: now},
				RenderInputs: func(o *render.Options) { o.Probes = cache.Of(verdicts) },
				Apply:        func(*snapshot.Snapshot) error { return nil }, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Run(res); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				res = platform.WithExposure(res, platform.Exposure("t-0000", fmt.Sprintf("new-%d", i)))
				i++
				if err := r.Run(res); err != nil {
					b.Fatal(err)
				}
			}
			// What the runner keeps from one change to the next (its memos, the last render,
			// the serving snapshot), beyond the input: the controller's live heap is this, the
			// cache's objects, and the tenant applier's and status writer's records.
			b.StopTimer()
			b.ReportMetric(float64(liveHeap()-base)/(1<<20), "state-MiB")
			runtime.KeepAlive(r)
		})
	}
}

// BenchmarkDataPlaneChange is what one new route costs a provisioned data plane of the
// shared Gateway (bench/cpscale's 1 000 tenants × 10, as the data plane watches them: the
// rendered ListenerSets and TLSRoutes, no tenant objects): translated for that Gateway
// alone (GatewayStatusOnly, as `snigate dataplane` runs), and, before it, translated a
// second time for the status of every Gateway, which a data plane never writes.
func BenchmarkDataPlaneChange(b *testing.B) {
	for _, c := range []struct {
		name string
		only bool
	}{{"gateway-only", true}, {"with-every-status", false}} {
		b.Run(c.name, func(b *testing.B) {
			res := platform.Build(1000, 10, true)
			res = render.Render(res, render.Options{Now: now}).Merge(res)
			res.TenantGateways, res.DatabaseExposures, res.TrustAnchors = nil, nil, nil
			platform.Sort(res)
			r, err := New(Config{Gateway: "platform/shared", GatewayStatusOnly: c.only, Translate: translate.Options{Now: now},
				Apply: func(*snapshot.Snapshot) error { return nil }, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Run(res); err != nil {
				b.Fatal(err)
			}
			routes := r.State().Status.TLSRoutes
			i := 0
			for b.Loop() {
				tr := res.TLSRoutes[0].DeepCopy()
				tr.Name, tr.UID = fmt.Sprintf("new-%d", i), ""
				tr.Spec.Hostnames = []gwv1.Hostname{gwv1.Hostname(fmt.Sprintf("new-%d.redis.t-0000.example.test", i))}
				i++
				more := *res
				at, _ := slices.BinarySearchFunc(res.TLSRoutes, tr, resources.Compare)
				more.TLSRoutes = slices.Insert(slices.Clip(res.TLSRoutes), at, tr)
				res = &more
				if err := r.Run(res); err != nil {
					b.Fatal(err)
				}
			}
			if got, want := len(r.State().Status.TLSRoutes), len(routes)+i; got != want {
				b.Fatalf("%d routes in the status, want %d", got, want)
			}
		})
	}
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}
