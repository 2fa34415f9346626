package render

import (
	"bytes"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/resources"
)

// TargetCache hands back ProbeTargets' previous map while nothing ProbeTargets reads has
// changed, and keeps the parsed TrustAnchor bundles (Pools) from one call to the next:
//
//	var c render.TargetCache
//	if targets, changed := c.Of(res, out, bundles); changed {
//		probes.Set(targets)
//	}
//
// Why: the tenant applier asks on every pass, and at 10 000 exposures making the map (each
// target's ready endpoints looked up and formatted) and having the probe runner compare and
// copy it was a sixth of a pass, for a map that changes when an exposure, a Service, an
// EndpointSlice, a Secret, a TrustAnchor or a published bundle does. What ProbeTargets
// reads is compared by identity: an object changed is a new pointer (package resources'
// contract), an exposure rendered anew a new *ProbeTarget (a replayed one keeps its
// pointers). The map returned is not to be changed. The zero TargetCache is ready; it is
// not safe for concurrent calls.
type TargetCache struct {
	pools Pools
	// What the last call read, and what it made.
	exposures []targetRead
	services  []*corev1.Service
	slices    []*discoveryv1.EndpointSlice
	secrets   []*corev1.Secret
	anchors   []*v1alpha1.TrustAnchor
	bundles   map[types.NamespacedName][]byte
	targets   map[probe.Key]probe.Target
}

// targetRead is what ProbeTargets reads of one exposure of a Result.
type targetRead struct {
	namespace string
	rendered  bool
	target    *ProbeTarget
	members   []*ProbeTarget
}

// Of is ProbeTargets(res, out, bundles) with the cache's Pools, and whether it was made
// anew: when not, it is the very map the last call returned.
func (c *TargetCache) Of(res *resources.Resources, out *Result, bundles map[types.NamespacedName][]byte) (map[probe.Key]probe.Target, bool) {
	if c.targets != nil && c.same(res, out, bundles) {
		return c.targets, false
	}
	c.targets = ProbeTargets(res, out, bundles, &c.pools)
	c.exposures = c.exposures[:0]
	for i := range out.Exposures {
		x := &out.Exposures[i]
		c.exposures = append(c.exposures, targetRead{x.Namespace, x.Rendered, x.Target, x.MemberTargets})
	}
	c.services, c.slices, c.secrets, c.anchors = res.Services, res.EndpointSlices, res.Secrets, res.TrustAnchors
	c.bundles = bundles
	return c.targets, true
}

// same reports whether ProbeTargets would read in res, out and bundles what the last call
// read.
func (c *TargetCache) same(res *resources.Resources, out *Result, bundles map[types.NamespacedName][]byte) bool {
	if len(out.Exposures) != len(c.exposures) ||
		!slices.Equal(res.Services, c.services) || !slices.Equal(res.EndpointSlices, c.slices) ||
		!slices.Equal(res.Secrets, c.secrets) || !slices.Equal(res.TrustAnchors, c.anchors) ||
		!maps.EqualFunc(bundles, c.bundles, bytes.Equal) {
		return false
	}
	for i := range out.Exposures {
		x, r := &out.Exposures[i], &c.exposures[i]
		if x.Target != r.target || x.Rendered != r.rendered || x.Namespace != r.namespace || !slices.Equal(x.MemberTargets, r.members) {
			return false
		}
	}
	return true
}
