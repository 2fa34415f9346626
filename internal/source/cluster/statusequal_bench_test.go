package cluster

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/testutil/platform"
)

// BenchmarkStatusPass is a tenant applier's status pass at bench/cpscale's largest step
// (1 000 TenantGateways of 10 DatabaseExposures) when no status changed: every status is
// compared with the one written last, and nothing is written (so no API server is needed).
func BenchmarkStatusPass(b *testing.B) {
	res := platform.Build(1000, 10, true)
	platform.Sort(res) // as the cluster lists them
	out := render.Render(res, render.Options{Now: func() metav1.Time { return metav1.Unix(1_800_000_000, 0) }})
	a := &tenantApplier{applied: newApplied()}
	tenants, exposures := resources.NewTable(res.TenantGateways), resources.NewTable(res.DatabaseExposures)
	for _, t := range out.Tenants {
		a.applied.statusDone("TenantGateway", tenants.Get(t.Namespace, t.Name).UID, copyOf(&t.Status))
	}
	for _, x := range out.Exposures {
		a.applied.statusDone("DatabaseExposure", exposures.Get(x.Namespace, x.Name).UID, copyOf(&x.Status))
	}
	ctx := context.Background()
	for b.Loop() {
		if errs := a.writeStatus(ctx, res, out); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
	if n := a.statusWrites.Load(); n != 0 {
		b.Fatalf("%d statuses written, want none", n)
	}
}
