package render

import (
	"fmt"
	"testing"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/testutil/platform"
)

// applied is res with what a first render of it made, as a cluster holds it once the
// controller applied that render.
func applied(res *resources.Resources) *resources.Resources {
	first := Render(res, Options{Now: now})
	res.ListenerSets = append(res.ListenerSets, first.ListenerSets...)
	res.Gateways = append(res.Gateways, first.Gateways...)
	res.HTTPRoutes = append(res.HTTPRoutes, first.HTTPRoutes...)
	res.TLSRoutes = append(res.TLSRoutes, first.TLSRoutes...)
	return res
}

// BenchmarkRender renders the platform again after one more exposure, as a controller does
// on each change: with the previous result, whose unchanged objects come back as the same
// pointers and whose unchanged TenantGateways and exposures come from its memo. Each
// iteration adds another exposure to the first tenant, on top of the last render, in its
// place in namespace/name order as the cluster lists it.
func BenchmarkRender(b *testing.B) {
	for _, c := range platform.Shapes {
		b.Run(c.Name, func(b *testing.B) {
			res := applied(platform.Build(c.Tenants, c.Per, c.Shared))
			platform.Sort(res) // as the cluster lists them
			prev := Render(res, Options{Now: now})
			i := 0
			for b.Loop() {
				res = platform.WithExposure(res, platform.Exposure("t-0000", fmt.Sprintf("new-%d", i)))
				i++
				prev = Render(res, Options{Now: now, Previous: prev})
				if len(prev.TLSRoutes) != c.Tenants*c.Per+i {
					b.Fatalf("%d routes rendered, want %d", len(prev.TLSRoutes), c.Tenants*c.Per+i)
				}
			}
		})
	}
}
