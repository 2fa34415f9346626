package pipeline

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil/platform"
	"github.com/snigate/snigate/internal/translate"
)

var benchNow = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func now() metav1.Time { return benchNow }

// BenchmarkRunChange is what one change costs a cluster's controller in the pipeline: one
// more exposure on the first tenant (in its place in namespace/name order, as the cluster
// lists it), rendered, translated, completed and applied, with every earlier run's memos
// (bench/cpscale's shapes, in memory).
func BenchmarkRunChange(b *testing.B) {
	for _, c := range platform.Shapes {
		b.Run(c.Name, func(b *testing.B) {
			res := platform.Build(c.Tenants, c.Per, c.Shared)
			first := render.Render(res, render.Options{Now: now})
			res.ListenerSets = append(res.ListenerSets, first.ListenerSets...)
			res.TLSRoutes = append(res.TLSRoutes, first.TLSRoutes...)
			platform.Sort(res) // as the cluster lists them
			r, err := New(Config{Render: true, Cluster: true, RenderOptions: render.Options{CertManager: true}, Translate: translate.Options{Now: now},
				Apply: func(*snapshot.Snapshot) error { return nil }, Logger: slog.New(slog.DiscardHandler)})
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
		})
	}
}
