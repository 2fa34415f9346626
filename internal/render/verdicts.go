package render

import (
	"reflect"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/probe"
)

// verdict is what Options.Probes holds of a probe's result.
func verdict(r probe.Result) Probe {
	p := Probe{Reason: r.Reason, Message: r.Message, Certificate: r.Certificate}
	for _, e := range r.Endpoints {
		ec := v1alpha1.EndpointCertificate{Address: e.Address, Reason: e.Reason}
		if c := e.Certificate; c != nil {
			ec.Serial, ec.NotAfter = c.Serial, c.NotAfter.DeepCopy()
		}
		p.Endpoints = append(p.Endpoints, ec)
	}
	return p
}

// VerdictSource is what VerdictCache reads: a probe.Runner.
type VerdictSource interface {
	Version() uint64
	Results() map[probe.Key]probe.Result
}

// VerdictCache makes Options.Probes of a probe's results for each render: the very same
// map while no verdict changed, and, when some did, a new map in which every verdict that
// did not is the previous Probe itself. Render tells what changed by that identity
// (probeChanges) and asks the probe questions of those exposures alone: at 10 000
// exposures, converting every result and comparing every verdict on every render took
// about a tenth of the controller's render. Not safe for concurrent use.
type VerdictCache struct {
	converted bool
	version   uint64
	results   map[probe.Key]probe.Result
	probes    map[[2]string]Probe
}

// Of returns Options.Probes for src's current results.
func (c *VerdictCache) Of(src VerdictSource) map[[2]string]Probe {
	// The version first: a change between the two reads makes the next call convert again.
	v := src.Version()
	if c.converted && v == c.version {
		return c.probes
	}
	results := src.Results()
	out := make(map[[2]string]Probe, len(results))
	for k, r := range results {
		if old, ok := c.results[k]; ok && probe.SameVerdict(old, r) {
			out[k] = c.probes[k]
		} else {
			out[k] = verdict(r)
		}
	}
	c.converted, c.version, c.results, c.probes = true, v, results, out
	return out
}

// probeChanges are the verdicts of b that are not those of a by identity (a VerdictCache's
// maps), and those a had and b has not. The same map is no change; ok is false when the
// two cannot be told apart so (every verdict may have changed).
func probeChanges(a, b map[[2]string]Probe) (changed map[[2]string]struct{}, ok bool) {
	if reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return nil, true
	}
	if a == nil || b == nil {
		return nil, false
	}
	changed = map[[2]string]struct{}{}
	for k, p := range b {
		if q, had := a[k]; !had || !sameProbe(p, q) {
			changed[k] = struct{}{}
		}
	}
	for k := range a {
		if _, has := b[k]; !has {
			changed[k] = struct{}{}
		}
	}
	return changed, true
}

// sameProbe reports whether p and q are the same Probe value by identity: equal strings,
// the same certificate and the same endpoints' array. A copy made anew is "not the same"
// even when equal: its questions are asked again, which only costs time.
func sameProbe(p, q Probe) bool {
	return p.Reason == q.Reason && p.Message == q.Message && p.Certificate == q.Certificate &&
		len(p.Endpoints) == len(q.Endpoints) && (len(p.Endpoints) == 0 || &p.Endpoints[0] == &q.Endpoints[0])
}
