package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/trustanchor"
)

// The status of the tenant objects: TenantGateways, DatabaseExposures and TrustAnchors.
//
// A pass writes the status of an object only where it changed, compared with what this
// applier last wrote to that very object (its UID), or, the first time, with the cached
// object. The comparisons run in the pass itself, one after another (at 10 000 exposures a
// goroutine each cost more than the comparison: its stack grew for reflect's recursion);
// only the writes go out, concurrentWrites at a time, each one request (a JSON patch of the
// whole status, guarded by the UID): a change that touches many statuses (a TrustAnchor's
// CA rotated) must not take a round trip per object in a row, and the next pass, the one
// that applies a new exposure's route, waits for it.
const concurrentWrites = 16

// writeStatus writes each TenantGateway's and DatabaseExposure's status where it changed.
func (a *tenantApplier) writeStatus(ctx context.Context, res *resources.Resources, out *render.Result) []error {
	w := newBatch()
	// Looked up where they lie in the cluster's sorted lists (resources.Table), not through
	// maps of 10 000 made on every pass.
	tenants := resources.NewTable(res.TenantGateways)
	for i := range out.Tenants {
		t := &out.Tenants[i]
		obj := tenants.Get(t.Namespace, t.Name)
		if want, ok := changedStatus(a, "TenantGateway", obj,
			func(o *v1alpha1.TenantGateway) *v1alpha1.TenantGatewayStatus { return &o.Status },
			func(s *v1alpha1.TenantGatewayStatus) *[]metav1.Condition { return &s.Conditions }, equalTenantStatus, &t.Status); ok {
			w.write(func() error { _, err := patchStatus(ctx, a, "TenantGateway", obj, want); return err })
		}
	}
	exposures := resources.NewTable(res.DatabaseExposures)
	for i := range out.Exposures {
		x := &out.Exposures[i]
		obj := exposures.Get(x.Namespace, x.Name)
		if want, ok := changedStatus(a, "DatabaseExposure", obj,
			func(o *v1alpha1.DatabaseExposure) *v1alpha1.DatabaseExposureStatus { return &o.Status },
			func(s *v1alpha1.DatabaseExposureStatus) *[]metav1.Condition { return &s.Conditions }, equalExposureStatus, &x.Status); ok {
			w.write(func() error { _, err := patchStatus(ctx, a, "DatabaseExposure", obj, want); return err })
		}
	}
	return w.wait()
}

// writeAnchorStatus writes each TrustAnchor's status where it changed, and records its
// warnings as events when it does.
func (a *tenantApplier) writeAnchorStatus(ctx context.Context, res *resources.Resources, r *trustanchor.Result) []error {
	w := newBatch()
	anchors := resources.NewTable(res.TrustAnchors)
	for i := range r.Anchors {
		an := &r.Anchors[i]
		obj := anchors.Get(an.Namespace, an.Name)
		want, ok := changedStatus(a, "TrustAnchor", obj,
			func(o *v1alpha1.TrustAnchor) *v1alpha1.TrustAnchorStatus { return &o.Status },
			func(s *v1alpha1.TrustAnchorStatus) *[]metav1.Condition { return &s.Conditions }, equalAnchorStatus, &an.Status)
		if !ok {
			continue
		}
		w.write(func() error {
			written, err := patchStatus(ctx, a, "TrustAnchor", obj, want)
			if written && a.events != nil {
				for _, warn := range an.Warnings {
					a.events.Eventf(obj, nil, corev1.EventTypeWarning, warn.Reason, "Publish", "%s", warn.Message)
				}
			}
			return err
		})
	}
	return w.wait()
}

// batch runs a pass's writes concurrentWrites at a time.
type batch struct {
	wg   sync.WaitGroup
	sem  chan struct{}
	mu   sync.Mutex
	errs []error
}

func newBatch() *batch {
	return &batch{sem: make(chan struct{}, concurrentWrites)}
}

func (p *batch) write(f func() error) {
	p.sem <- struct{}{}
	p.wg.Go(func() {
		defer func() { <-p.sem }()
		if err := f(); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, err)
			p.mu.Unlock()
		}
	})
}

func (p *batch) wait() []error {
	p.wg.Wait()
	return p.errs
}

// tenantUIDs are the UIDs of the objects whose status the applier writes.
func tenantUIDs(res *resources.Resources) map[types.UID]bool {
	m := make(map[types.UID]bool, len(res.TenantGateways)+len(res.DatabaseExposures)+len(res.TrustAnchors))
	for _, o := range res.TenantGateways {
		m[o.UID] = true
	}
	for _, o := range res.DatabaseExposures {
		m[o.UID] = true
	}
	for _, o := range res.TrustAnchors {
		m[o.UID] = true
	}
	return m
}

// changedStatus returns want as the status to write to obj, the cached object, and whether
// it differs from the status last written (status(obj) the first time). A nil obj is gone
// from the cache: its status has no one to show it to.
//
// A condition whose status is the one last written (or, the first time, the cached one)
// keeps that LastTransitionTime: render stamps conditions against the cached object, which
// lags behind this applier's own writes, so the same condition could otherwise come out
// with a new time on each pass and be written again and again. Times are kept to the second,
// as the API server stores them.
//
// Statuses go by pointer, want's into the render's result (read only): passed and boxed by
// value, each of the 10 000 exposures' statuses was copied to the heap five times a pass, 11
// MiB of garbage a pass with nothing to write (BenchmarkStatusPass). The applier's memo
// keeps a copy of its own (copyOf): a pointer into a result would keep that whole result's
// array alive.
func changedStatus[T any, PT interface {
	*T
	client.Object
}, S any](a *tenantApplier, kind string, obj PT, status func(PT) *S, conds func(*S) *[]metav1.Condition, equal func(a, b *S) bool, want *S) (*S, bool) {
	if obj == nil || obj.GetUID() == "" {
		return want, false
	}
	uid := obj.GetUID()
	var prev *S
	last, memo := a.applied.lastStatus(kind, uid)
	if memo {
		prev = last.(*S)
	} else {
		prev = status(obj)
	}
	want = keepTransitions(want, conds, prev)
	// What this applier wrote last is compared exactly, field by field (equal: statusequal.go);
	// the cached object's status, decoded from the API server, semantically.
	if (memo && equal(prev, want)) || (!memo && equality.Semantic.DeepEqual(prev, want)) {
		if !memo {
			a.applied.statusDone(kind, uid, copyOf(want))
		}
		return want, false
	}
	return want, true
}

// copyOf is a copy of *s (sharing its slices, which nothing changes).
func copyOf[S any](s *S) *S {
	c := *s
	return &c
}

// patchStatus writes want as the status of obj and says whether it wrote. Its deletion
// meanwhile is no error.
func patchStatus[T any, PT interface {
	*T
	client.Object
}, S any](ctx context.Context, a *tenantApplier, kind string, obj PT, want *S) (bool, error) {
	uid := obj.GetUID()
	raw, err := json.Marshal([]map[string]any{
		// The very object the status was made for, not one created again by the same name.
		{"op": "test", "path": "/metadata/uid", "value": uid},
		{"op": "add", "path": "/status", "value": want},
	})
	if err != nil {
		return false, err
	}
	target := PT(new(T))
	target.SetNamespace(obj.GetNamespace())
	target.SetName(obj.GetName())
	err = a.cl.Status().Patch(ctx, target, client.RawPatch(types.JSONPatchType, raw))
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case isUIDTestFailure(err):
		return false, nil // deleted and created again: the next pass writes the new one's
	case err != nil:
		return false, fmt.Errorf("status of %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	a.statusWrites.Add(1)
	if a.metrics != nil {
		a.metrics.StatusWrites.WithLabelValues(kind).Inc()
	}
	a.applied.statusDone(kind, uid, copyOf(want))
	return true, nil
}

// isUIDTestFailure reports whether err is the API server refusing the JSON patch because
// its UID guard failed (422, naming the path), not because the status is invalid.
func isUIDTestFailure(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se) && se.Status().Code == http.StatusUnprocessableEntity &&
		strings.Contains(se.Status().Message, "/metadata/uid")
}

// keepTransitions returns want, or a copy, with the LastTransitionTime of every condition
// whose status prev's condition of the same type has, and the others' to the second.
func keepTransitions[S any](want *S, conds func(*S) *[]metav1.Condition, prev *S) *S {
	wc := *conds(want)
	if len(wc) == 0 {
		return want
	}
	pc := *conds(prev)
	time := func(c metav1.Condition) metav1.Time {
		for _, p := range pc {
			if p.Type == c.Type && p.Status == c.Status {
				return p.LastTransitionTime
			}
		}
		return c.LastTransitionTime.Rfc3339Copy()
	}
	// Most often every time is already the one to keep: no copy then.
	same := true
	for _, c := range wc {
		if t := time(c); t != c.LastTransitionTime {
			same = false
			break
		}
	}
	if same {
		return want
	}
	// A copy: want is the render's result's.
	out := make([]metav1.Condition, len(wc))
	for i, c := range wc {
		c.LastTransitionTime = time(c)
		out[i] = c
	}
	kept := copyOf(want)
	*conds(kept) = out
	return kept
}
