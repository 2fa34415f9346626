package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/translate"
)

// statusWriter is the one goroutine that writes status to the API server. The reconciler
// hands it the latest translate.Status (Publish, never blocking); the writer compares each
// object's desired status with the stored one and writes only what differs, retrying on
// conflict. It runs only on the leader (manager.LeaderElectionRunnable), so several replicas
// never fight over status; every replica still translates and serves its own snapshot.
type statusWriter struct {
	cached         client.Client // reads from the informer cache, writes to the API server
	api            client.Reader // uncached reads after a conflict
	controllerName gwv1.GatewayController
	log            *slog.Logger
	retryAfter     time.Duration

	latest[translate.Status]              // what to write next, and the write loop
	writes                   atomic.Int64 // status updates sent (tests, logs)
	metrics                  *metrics.Metrics

	// ensured is, per object, the desired status this writer last brought it in line with
	// (written, or found so): a pass skips every object whose desired status did not
	// change, without reading or copying it. Every change makes a pass, and 10 000 routes
	// each read, copied and compared cost a pass 10 000 times what the one route that
	// changed does. Forgotten every ensuredFor (resync), so that a status someone else
	// changed is put back within that.
	ensured      map[objectKey]any
	ensuredSince time.Time
	ensuredMu    sync.Mutex // routes are written concurrentWrites at a time (writeRoutes)
}

// ensuredFor is how long the writer trusts what it ensured before it reads every object
// again.
const ensuredFor = 10 * time.Minute

// ensure runs write for the object kind/namespace/name unless desired is the status last
// ensured for it; a write that succeeds records desired.
func (w *statusWriter) ensure(kind, namespace, name string, desired any, write func() error) error {
	k := objectKey{kind, namespace, name}
	if w.isEnsured(k, desired) {
		return nil
	}
	err := write()
	w.ensuredMu.Lock()
	defer w.ensuredMu.Unlock()
	if err != nil {
		delete(w.ensured, k)
		return err
	}
	w.ensured[k] = desired
	return nil
}

// isEnsured reports whether desired is the status last ensured for k.
func (w *statusWriter) isEnsured(k objectKey, desired any) bool {
	w.ensuredMu.Lock()
	defer w.ensuredMu.Unlock()
	prev, ok := w.ensured[k]
	return ok && equality.Semantic.DeepEqual(prev, desired)
}

var (
	_ manager.Runnable               = (*statusWriter)(nil)
	_ manager.LeaderElectionRunnable = (*statusWriter)(nil)
)

func newStatusWriter(c client.Client, api client.Reader, controllerName string, m *metrics.Metrics, log *slog.Logger) *statusWriter {
	return &statusWriter{
		cached: c, api: api, controllerName: gwv1.GatewayController(controllerName), log: log, metrics: m,
		retryAfter: time.Second, latest: newLatest[translate.Status](),
	}
}

// NeedLeaderElection makes the manager start the writer only on the elected replica.
func (w *statusWriter) NeedLeaderElection() bool { return true }

// Publish replaces the status to write; only the latest one is ever written.
func (w *statusWriter) Publish(s *translate.Status) { w.publish(s) }

// Start writes the latest status whenever it changes until ctx is done. A failed pass is
// tried again after retryAfter (or sooner, when a newer status arrives).
func (w *statusWriter) Start(ctx context.Context) error {
	w.log.Info("status writer started (leader)")
	w.metrics.Leader.Set(1)
	defer w.metrics.Leader.Set(0)
	// A new term: what this writer ensured before may have been changed by another leader
	// meanwhile (reads, not writes, make sure of it), and the latest status is written even
	// if nothing new is published.
	w.ensured = nil
	w.again()
	return w.run(ctx, w.retryAfter, w.log, "writing status", w.write)
}

// write brings every object's status in line with s. It goes on after an error and returns
// all errors joined.
func (w *statusWriter) write(ctx context.Context, s *translate.Status) error {
	if w.ensured == nil || time.Since(w.ensuredSince) > ensuredFor {
		w.ensured, w.ensuredSince = map[objectKey]any{}, time.Now()
	}
	var errs []error
	for _, st := range s.GatewayClasses {
		errs = append(errs, w.ensure("GatewayClass", "", st.Name, st.Status, func() error {
			return writeOne(ctx, w, &gwv1.GatewayClass{}, "", st.Name, func(o *gwv1.GatewayClass) bool {
				next := o.Status.DeepCopy()
				next.Conditions = mergeConditions(o.Status.Conditions, st.Status.Conditions)
				next.SupportedFeatures = st.Status.SupportedFeatures
				return w.set(&o.Status, next)
			})
		}))
	}
	for _, st := range s.Gateways {
		if fromRender(st.Status.Conditions) {
			continue
		}
		errs = append(errs, w.ensure("Gateway", st.Namespace, st.Name, st.Status, func() error {
			return writeOne(ctx, w, &gwv1.Gateway{}, st.Namespace, st.Name, func(o *gwv1.Gateway) bool {
				return w.set(&o.Status, mergeGatewayStatus(&o.Status, &st.Status))
			})
		}))
	}
	for _, st := range s.ListenerSets {
		if fromRender(st.Status.Conditions) {
			continue
		}
		errs = append(errs, w.ensure("ListenerSet", st.Namespace, st.Name, st.Status, func() error {
			return writeOne(ctx, w, &gwv1.ListenerSet{}, st.Namespace, st.Name, func(o *gwv1.ListenerSet) bool {
				return w.set(&o.Status, mergeListenerSetStatus(&o.Status, &st.Status))
			})
		}))
	}
	for _, pk := range s.Policies() {
		kind := resources.KindOf(v1alpha1.GroupName, pk.Kind)
		for _, st := range pk.List {
			if slices.ContainsFunc(st.Status.Ancestors, func(a gwv1.PolicyAncestorStatus) bool { return fromRender(a.Conditions) }) {
				continue
			}
			errs = append(errs, w.ensure(pk.Kind, st.Namespace, st.Name, st.Status, func() error {
				return writeOne(ctx, w, kind.New(), st.Namespace, st.Name, func(o resources.Object) bool {
					ps := o.(v1alpha1.Policy).PolicyStatus()
					return w.set(ps, mergePolicyStatus(ps, &st.Status, w.controllerName))
				})
			}))
		}
	}
	errs = append(errs, writeRoutes(ctx, w, &gwv1.TLSRouteList{}, s.TLSRoutes,
		func(l *gwv1.TLSRouteList) []*gwv1.TLSRoute { return ptrs(l.Items) },
		func(o *gwv1.TLSRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		func(st *gwv1.TLSRouteStatus) *gwv1.RouteStatus { return &st.RouteStatus }))
	errs = append(errs, writeRoutes(ctx, w, &gwv1.TCPRouteList{}, s.TCPRoutes,
		func(l *gwv1.TCPRouteList) []*gwv1.TCPRoute { return ptrs(l.Items) },
		func(o *gwv1.TCPRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		func(st *gwv1.TCPRouteStatus) *gwv1.RouteStatus { return &st.RouteStatus }))
	errs = append(errs, writeRoutes(ctx, w, &gwv1.HTTPRouteList{}, s.HTTPRoutes,
		func(l *gwv1.HTTPRouteList) []*gwv1.HTTPRoute { return ptrs(l.Items) },
		func(o *gwv1.HTTPRoute) *gwv1.RouteStatus { return &o.Status.RouteStatus },
		func(st *gwv1.HTTPRouteStatus) *gwv1.RouteStatus { return &st.RouteStatus }))
	return errors.Join(errs...)
}

// mergePolicyStatus is want's ancestors (this controller's) with the other controllers'
// entries of cur kept, and each condition's lastTransitionTime kept where its status did not
// change.
func mergePolicyStatus(cur, want *gwv1.PolicyStatus, ctrl gwv1.GatewayController) *gwv1.PolicyStatus {
	next := &gwv1.PolicyStatus{}
	for _, a := range cur.Ancestors {
		if a.ControllerName != ctrl {
			next.Ancestors = append(next.Ancestors, a)
		}
	}
	for _, a := range want.Ancestors {
		for _, old := range cur.Ancestors {
			if old.ControllerName == ctrl && equality.Semantic.DeepEqual(old.AncestorRef, a.AncestorRef) {
				a.Conditions = mergeConditions(old.Conditions, a.Conditions)
			}
		}
		next.Ancestors = append(next.Ancestors, a)
	}
	return next
}

// set stores next in *cur and reports whether it differs. equality.Semantic treats nil and
// empty lists as equal and compares times by value.
func (w *statusWriter) set(cur, next any) bool {
	switch c := cur.(type) {
	case *gwv1.GatewayClassStatus:
		n := next.(*gwv1.GatewayClassStatus)
		if equality.Semantic.DeepEqual(c, n) {
			return false
		}
		*c = *n
	case *gwv1.GatewayStatus:
		n := next.(*gwv1.GatewayStatus)
		if equality.Semantic.DeepEqual(c, n) {
			return false
		}
		*c = *n
	case *gwv1.ListenerSetStatus:
		n := next.(*gwv1.ListenerSetStatus)
		if equality.Semantic.DeepEqual(c, n) {
			return false
		}
		*c = *n
	case *gwv1.PolicyStatus:
		n := next.(*gwv1.PolicyStatus)
		if equality.Semantic.DeepEqual(c, n) {
			return false
		}
		*c = *n
	case *gwv1.RouteStatus:
		n := next.(*gwv1.RouteStatus)
		if equality.Semantic.DeepEqual(c, n) {
			return false
		}
		*c = *n
	default:
		panic(fmt.Sprintf("statusWriter.set: unexpected %T", cur))
	}
	return true
}

// writeOne updates the status of one object: mutate changes the object's status in place and
// reports whether it changed. The first attempt reads the informer cache (no API call when
// nothing changed); after a conflict the object is read from the API server and mutate runs
// again on the fresh copy.
func writeOne[T client.Object](ctx context.Context, w *statusWriter, obj T, namespace, name string, mutate func(T) bool) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	var reader client.Reader = w.cached
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := reader.Get(ctx, key, obj); err != nil {
			return err
		}
		reader = w.api // a conflict means the cache was stale
		if !mutate(obj) {
			return nil
		}
		if err := w.cached.Status().Update(ctx, obj); err != nil {
			return err
		}
		w.writes.Add(1)
		w.metrics.StatusWrites.WithLabelValues(kindName(obj)).Inc()
		w.log.Debug("status written", "kind", fmt.Sprintf("%T", obj), "namespace", namespace, "name", name)
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: nothing to write
	}
	if err != nil {
		return fmt.Errorf("%T %s: %w", obj, key, err)
	}
	return nil
}

// kindName is the kind of a typed object, from its Go type (typed objects read from the
// cache carry no TypeMeta).
func kindName(o client.Object) string {
	t := reflect.TypeOf(o)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// writeRoutes reconciles our entries in status.parents of every route of one kind: routes in
// desired get exactly the parents translate computed, every other route loses the entries
// with our controllerName (a parentRef to our Gateway was removed). Entries of other
// controllers are kept as they are.
//
// The routes are written concurrentWrites at a time, each its own read-modify-write: one
// after another, a round trip each on an API server busy with the tenant applier's writes,
// a controller's start wrote 10 000 route statuses at 12 to 27 a second (bench/cpscale's
// audit log), and the rest of them were still being written a minute after every exposure
// was served, in the way of every change made meanwhile.
func writeRoutes[L client.ObjectList, R client.Object, S any](ctx context.Context, w *statusWriter,
	list L, desired []translate.ObjectStatus[S], items func(L) []R,
	routeStatus func(R) *gwv1.RouteStatus, want func(*S) *gwv1.RouteStatus,
) error {
	// Without copies: only the routes whose status is written are copied (writeOne).
	if err := w.cached.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing %T: %w", list, err)
	}
	byKey := make(map[client.ObjectKey]*gwv1.RouteStatus, len(desired))
	for i := range desired {
		d := &desired[i]
		byKey[client.ObjectKey{Namespace: d.Namespace, Name: d.Name}] = want(&d.Status)
	}
	b := newBatch()
	for _, r := range items(list) {
		key := client.ObjectKeyFromObject(r)
		d := byKey[key]
		if d == nil && !hasOurs(routeStatus(r), w.controllerName) {
			continue // never ours: skip the read-modify-write
		}
		if d != nil && slices.ContainsFunc(d.Parents, func(p gwv1.RouteParentStatus) bool { return fromRender(p.Conditions) }) {
			continue
		}
		kind := r.GetObjectKind().GroupVersionKind().Kind
		if kind == "" {
			kind = fmt.Sprintf("%T", r)
		}
		if w.isEnsured(objectKey{kind, key.Namespace, key.Name}, d) {
			continue // no goroutine for what needs no write
		}
		b.write(func() error {
			return w.ensure(kind, key.Namespace, key.Name, d, func() error {
				return writeOne(ctx, w, r.DeepCopyObject().(R), key.Namespace, key.Name, func(o R) bool {
					cur := routeStatus(o)
					return w.set(cur, mergeRouteStatus(cur, d, w.controllerName))
				})
			})
		})
	}
	return errors.Join(b.wait()...)
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func hasOurs(s *gwv1.RouteStatus, ctrl gwv1.GatewayController) bool {
	for _, p := range s.Parents {
		if p.ControllerName == ctrl {
			return true
		}
	}
	return false
}

// fromRender reports whether conditions were computed from an object the controller
// rendered and the API server does not hold yet as rendered (its generation 0: every object
// of an API server has 1 or more): the object the status would be written to is another
// (older, or not yet created), and its status waits for its own translation
// (render.AnnotationRendered).
func fromRender(conditions []metav1.Condition) bool {
	return slices.ContainsFunc(conditions, func(c metav1.Condition) bool { return c.ObservedGeneration == 0 })
}

// mergeConditions returns want with each condition's lastTransitionTime taken from cur when
// the condition of that type had the same status there: the time marks a transition of the
// status, not the latest write (Gateway API and metav1.Condition semantics).
func mergeConditions(cur, want []metav1.Condition) []metav1.Condition {
	if want == nil {
		return nil
	}
	out := make([]metav1.Condition, len(want))
	for i, c := range want {
		if old := meta.FindStatusCondition(cur, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		out[i] = c
	}
	return out
}

func mergeGatewayStatus(cur, want *gwv1.GatewayStatus) *gwv1.GatewayStatus {
	next := want.DeepCopy()
	next.Conditions = mergeConditions(cur.Conditions, want.Conditions)
	mergeListeners(cur.Listeners, next.Listeners, func(l *gwv1.ListenerStatus) (gwv1.SectionName, *[]metav1.Condition) {
		return l.Name, &l.Conditions
	})
	return next
}

// mergeListenerSetStatus is mergeGatewayStatus for a ListenerSet: unchanged conditions keep
// their lastTransitionTime.
func mergeListenerSetStatus(cur, want *gwv1.ListenerSetStatus) *gwv1.ListenerSetStatus {
	next := want.DeepCopy()
	next.Conditions = mergeConditions(cur.Conditions, want.Conditions)
	mergeListeners(cur.Listeners, next.Listeners, func(l *gwv1.ListenerEntryStatus) (gwv1.SectionName, *[]metav1.Condition) {
		return l.Name, &l.Conditions
	})
	return next
}

// mergeListeners merges each listener's conditions of next with those of the listener of
// the same name in cur (Gateways and ListenerSets list their listeners in two types).
func mergeListeners[L any](cur, next []L, of func(*L) (gwv1.SectionName, *[]metav1.Condition)) {
	for i := range next {
		name, conds := of(&next[i])
		for j := range cur {
			if oldName, old := of(&cur[j]); oldName == name {
				*conds = mergeConditions(*old, *conds)
				break
			}
		}
	}
}

// mergeRouteStatus keeps the parents of other controllers in their order and replaces ours
// with want's (want nil: none of ours). A parent of ours that stays keeps the
// lastTransitionTime of its unchanged conditions.
func mergeRouteStatus(cur, want *gwv1.RouteStatus, ctrl gwv1.GatewayController) *gwv1.RouteStatus {
	// The CRD requires status.parents to be present: an empty list, never null.
	next := &gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{}}
	for _, p := range cur.Parents {
		if p.ControllerName != ctrl {
			next.Parents = append(next.Parents, *p.DeepCopy())
		}
	}
	if want == nil {
		return next
	}
	for _, p := range want.Parents {
		p := *p.DeepCopy()
		for _, old := range cur.Parents {
			if old.ControllerName == ctrl && equality.Semantic.DeepEqual(old.ParentRef, p.ParentRef) {
				p.Conditions = mergeConditions(old.Conditions, p.Conditions)
				break
			}
		}
		next.Parents = append(next.Parents, p)
	}
	return next
}
