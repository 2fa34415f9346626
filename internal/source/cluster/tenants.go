package cluster

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/translate"
	"github.com/snigate/snigate/internal/trustanchor"
)

// FieldManager is the server-side apply field manager of everything snigate renders.
const FieldManager = "snigate"

// AnnotationDNSNamesAdded on a cert-manager Certificate lists (comma-separated) the
// dnsNames snigate added for the DatabaseExposures that name it in spec.certificateRef: the
// names it takes off again when they go, never the owner's.
const AnnotationDNSNamesAdded = "snigate.dev/dns-names-added"

// AnnotationStampedBy on a Namespace records that the controller wrote its tree labels
// (snigate.dev/gateway, and snigate.dev/host on a TenantGateway's own namespace) for the
// TenantGateway named in it ("namespace/name"): removing the TenantGateway or the
// attachedNamespaces entry removes only labels the controller wrote.
const AnnotationStampedBy = "snigate.dev/gateway-stamped-by"

// tenantApplier is the cluster side of the tenant stage, on the elected leader only: it
// renders the TenantGateways of the latest view of the cluster (package render, a pure
// function), applies the rendered objects with server-side apply under FieldManager, deletes
// what a TenantGateway owned and no longer renders, stamps the attached namespaces, and
// writes each TenantGateway's status. The reconciler hands it the latest view (Publish,
// never blocking); like the status writer, a failed pass is tried again after a second.
type tenantApplier struct {
	cl          client.Client // cached reads, writes to the API server
	stores      *stores       // the cache read in place (loadcache.go)
	log         *slog.Logger
	certManager bool // cert-manager's CRDs are served: Issuers and Certificates are applied

	latest[tenantInput]

	// anchors is the last TrustAnchor projection applied without error.
	anchors *trustanchor.Result
	// guards keeps the TrustAnchor bundles' checks from one render to the next, and
	// anchorCopies the typed copies of their objects (anchorObjects): a pass compares an
	// unchanged object by pointer, not by content, a thousand times a change.
	guards       trustanchor.GuardMemo
	anchorCopies map[client.Object]client.Object
	// probes probes the DatabaseExposures' backend certificates (leader only, like the
	// applier); a changed verdict makes the applier render again.
	probes *probe.Runner
	// targets makes the probe's targets anew only when what they are made of changed, and
	// keeps their parsed CA bundles from one pass to the next.
	targets render.TargetCache
	// verdicts makes the probes' verdicts into the render's, the same map while none
	// changed (renderInputs is called by the pipeline's runs, one at a time).
	verdicts render.VerdictCache
	// events records the TrustAnchors' warnings (a name held by someone else) as Warning
	// events on them; nil records nothing.
	events events.EventRecorder
	// applied is what the applier wrote (applied.go): a pass writes only what changed.
	applied *applied
	// want (the objects this pass renders) and fresh (the DatabaseExposures rendered anew)
	// are a pass's, kept for the next one to fill again.
	want  map[objectKey]bool
	fresh map[types.NamespacedName]bool
	// newFirst applies what the render made anew at the start of each pass (applyNew):
	// set with provisioned data planes, which serve a change once its objects reach the
	// API server. A controller serving with its own proxy has served it already, and there
	// the early writes split the initial burst of a start into more runs of the pipeline
	// (bench/cpscale at 1 000 tenants: 899 runs to converge against 733–818, 302 s against
	// 258–287).
	newFirst bool
	// applies and statusWrites count the server-side applies and status updates sent.
	applies, statusWrites atomic.Int64
	metrics               *metrics.Metrics // nil in tests
}

type tenantInput struct {
	res      *resources.Resources
	rendered *render.Result // the controller's render of res, completed with status
	status   *translate.Status
}

var (
	_ manager.Runnable               = (*tenantApplier)(nil)
	_ manager.LeaderElectionRunnable = (*tenantApplier)(nil)
)

// newTenantApplier returns the applier; verdict is called when a certificate probe's verdict
// changes (the controller renders again).
func newTenantApplier(cl client.Client, informers cache.Informers, certManager bool, m *metrics.Metrics, log *slog.Logger, verdict func()) *tenantApplier {
	a := &tenantApplier{cl: cl, stores: newStores(informers, cl.Scheme()), certManager: certManager, log: log, latest: newLatest[tenantInput](), applied: newApplied(), metrics: m,
		want: map[objectKey]bool{}, fresh: map[types.NamespacedName]bool{}}
	po := probe.RunnerOptions{OnChange: verdict}
	if m != nil {
		po.Expiry, po.Probes = m.BackendCertificateExpiry, m.CertificateProbes
	}
	a.probes = probe.NewRunner(po)
	return a
}

// NeedLeaderElection makes the manager start the applier only on the elected replica.
func (a *tenantApplier) NeedLeaderElection() bool { return true }

// Publish replaces what to apply: the view of the cluster, its render (completed with st);
// only the latest one is ever applied.
func (a *tenantApplier) Publish(res *resources.Resources, rendered *render.Result, st *translate.Status) {
	a.publish(&tenantInput{res: res, rendered: rendered, status: st})
}

// renderInputs is what the controller's render reads besides the resources: cert-manager's
// Issuers and Certificates (from the cache: a name they hold is never taken over) and the
// certificate probes' verdicts (none on a replica that is not the leader: it writes no
// status).
func (a *tenantApplier) renderInputs(ctx context.Context, o *render.Options) error {
	o.CertManager = a.certManager
	o.Probes = a.verdicts.Of(a.probes)
	if !a.certManager {
		o.NoCertManagerReason = v1alpha1.ReasonCertManagerNotInstalled
		return nil
	}
	// Read only, without copies.
	var issuers cmv1.IssuerList
	var certs cmv1.CertificateList
	if err := a.cl.List(ctx, &issuers, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing Issuers: %w", err)
	}
	if err := a.cl.List(ctx, &certs, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing Certificates: %w", err)
	}
	o.Issuers = ptrs(issuers.Items)
	o.Certificates = ptrs(certs.Items)
	return nil
}

// Start applies the latest view whenever it changes until ctx is done; a failed pass is
// tried again after a second.
func (a *tenantApplier) Start(ctx context.Context) error {
	a.log.Info("tenant applier started (leader)", "certManager", a.certManager)
	go a.probes.Run(ctx)
	a.again() // a new term applies the latest render even if nothing new is published
	return a.run(ctx, time.Second, a.log, "applying what the TenantGateways render", a.apply)
}

// apply makes the cluster match in's render.
func (a *tenantApplier) apply(ctx context.Context, in *tenantInput) error {
	if a.metrics != nil {
		defer observeSince(a.metrics.StageSeconds.WithLabelValues("tenant_apply"), time.Now())
	}
	out := in.rendered
	objs := renderedObjects(out, a.certManager)
	var early map[objectKey]bool
	var errs []error
	if a.newFirst {
		early, errs = a.applyNew(ctx, objs)
	}
	anchors, err := a.renderAnchors(ctx, in.res, out)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}

	errs = append(errs, a.stampNamespaces(ctx, in.res)...)
	// want and fresh are kept from pass to pass, cleared: at 10 000 exposures, maps of
	// 11 000 and 10 000 entries made anew on every pass.
	want := a.want
	clear(want)
	objs = append(objs, a.anchorObjects(anchors)...)
	var changed []client.Object
	lv := a.live(ctx)
	for _, o := range objs {
		key := keyOf(o)
		want[key] = true
		if early[key] {
			continue // applied at the start of this pass
		}
		same, err := a.applied.unchanged(o, lv)
		if err != nil {
			return err
		}
		if !same {
			changed = append(changed, o)
		}
	}
	errs = append(errs, a.applyParentsFirst(ctx, changed)...)
	a.applied.forget(want)
	if len(errs) == 0 {
		errs = append(errs, a.deleteStale(ctx, out, want)...)
		errs = append(errs, a.deleteStaleAnchorObjects(ctx, want)...)
	}
	if a.certManager {
		errs = append(errs, a.certificateNames(ctx, out.CertificateNames)...)
	}
	errs = append(errs, a.writeStatus(ctx, in.res, out)...)
	errs = append(errs, a.writeAnchorStatus(ctx, in.res, anchors)...)
	// The statuses of objects gone are forgotten once the memo holds more than there are
	// objects: the set of every UID, 11 000 at 10 000 exposures, is not made on every pass,
	// and a dead UID's entry is never asked for again (UIDs are not reused).
	if n := len(in.res.TenantGateways) + len(in.res.DatabaseExposures) + len(in.res.TrustAnchors); a.applied.statuses() > n {
		a.applied.forgetStatus(tenantUIDs(in.res))
	}
	if len(errs) == 0 {
		a.anchors = anchors
	}
	if targets, changed := a.targets.Of(in.res, out, anchors.Bundles()); changed {
		a.probes.Set(targets)
	}
	return errors.Join(errs...)
}

// applyNew applies, at the start of a pass, the rendered objects this applier has not
// applied yet (a new exposure's route, an edited one's), when newFirst: with provisioned
// data planes that write is what serves a change, and the rest of the pass (the
// TrustAnchors' render, every object checked against the cache, the namespaces' labels)
// took 40 % of a pass at 10 000 exposures (bench/cpscale --provision, the controller's CPU
// profile) before it. Parents go first (applyParentsFirst). It returns the objects it
// tried, which the rest of the pass leaves alone.
func (a *tenantApplier) applyNew(ctx context.Context, objs []client.Object) (map[objectKey]bool, []error) {
	var fresh []client.Object
	for _, o := range objs {
		if !a.applied.rendered(o) {
			fresh = append(fresh, o)
		}
	}
	if len(fresh) == 0 {
		return nil, nil
	}
	tried := make(map[objectKey]bool, len(fresh))
	for _, o := range fresh {
		tried[keyOf(o)] = true
	}
	return tried, a.applyParentsFirst(ctx, fresh)
}

// applyParentsFirst applies objs, the Gateways and ListenerSets before the rest, so that no
// route is seen without its parent.
func (a *tenantApplier) applyParentsFirst(ctx context.Context, objs []client.Object) []error {
	var parents, rest []client.Object
	for _, o := range objs {
		switch keyOf(o).kind {
		case "Gateway", "ListenerSet":
			parents = append(parents, o)
		default:
			rest = append(rest, o)
		}
	}
	errs := a.applyAll(ctx, parents)
	return append(errs, a.applyAll(ctx, rest)...)
}

// live looks up the cache's copy of a rendered object, for applied.unchanged.
func (a *tenantApplier) live(ctx context.Context) liveOf {
	return func(o client.Object) (live, bool, error) {
		m, err := a.stores.get(ctx, o.GetObjectKind().GroupVersionKind(), o.GetNamespace(), o.GetName())
		if err != nil || m == nil {
			return live{}, false, err
		}
		return live{generation: m.GetGeneration(), labels: m.GetLabels()}, true, nil
	}
}

// observeSince records the time since start in o.
func observeSince(o prometheus.Observer, start time.Time) { o.Observe(time.Since(start).Seconds()) }

// renderAnchors renders the TrustAnchors (package trustanchor) against the Roles and
// RoleBindings that carry its label (the cache: they are watched).
func (a *tenantApplier) renderAnchors(ctx context.Context, res *resources.Resources, rendered *render.Result) (*trustanchor.Result, error) {
	if len(res.TrustAnchors) == 0 && a.anchors == nil {
		return &trustanchor.Result{}, nil
	}
	// The cache's own objects, read only (trustanchor.Render changes nothing it is given):
	// a copy of each, a thousand of each kind with a TrustAnchor per tenant, was a copy per
	// pass.
	in := trustanchor.Input{TrustAnchors: res.TrustAnchors, Secrets: res.Secrets}
	var err error
	if in.Roles, err = labelledAs[*rbacv1.Role](ctx, a.stores, rbacv1.SchemeGroupVersion.WithKind("Role"), trustanchor.LabelTrustAnchor); err != nil {
		return nil, err
	}
	if in.RoleBindings, err = labelledAs[*rbacv1.RoleBinding](ctx, a.stores, rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), trustanchor.LabelTrustAnchor); err != nil {
		return nil, err
	}
	return trustanchor.Render(in, trustanchor.Options{Previous: a.anchors, InUse: a.inUse(rendered), Memo: &a.guards}), nil
}

// anchorObjects lists what a TrustAnchor projection holds for the API server: copies with
// their kind set, the same copy as last pass for an object the render kept (the render
// hands back its previous pointer for an unchanged object).
func (a *tenantApplier) anchorObjects(r *trustanchor.Result) []client.Object {
	objs := make([]client.Object, 0, len(r.Secrets)+len(r.Roles)+len(r.RoleBindings))
	next := make(map[client.Object]client.Object, cap(objs))
	add := func(o client.Object, gvk schema.GroupVersionKind) {
		c, ok := a.anchorCopies[o]
		if !ok {
			c = withKind(o, gvk)
		}
		next[o] = c
		objs = append(objs, c)
	}
	for _, s := range r.Secrets {
		add(s, corev1.SchemeGroupVersion.WithKind("Secret"))
	}
	for _, o := range r.Roles {
		add(o, rbacv1.SchemeGroupVersion.WithKind("Role"))
	}
	for _, o := range r.RoleBindings {
		add(o, rbacv1.SchemeGroupVersion.WithKind("RoleBinding"))
	}
	a.anchorCopies = next
	return objs
}

// withKind sets o's apiVersion and kind, which server-side apply needs, on a copy.
func withKind[T client.Object](o T, gvk schema.GroupVersionKind) client.Object {
	c := o.DeepCopyObject().(client.Object)
	c.GetObjectKind().SetGroupVersionKind(gvk)
	return c
}

// deleteStaleAnchorObjects deletes the Secrets, Roles and RoleBindings a TrustAnchor
// controls that its projection no longer holds (the projection is the whole desired state).
func (a *tenantApplier) deleteStaleAnchorObjects(ctx context.Context, want map[objectKey]bool) []error {
	var errs []error
	for _, gvk := range []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Secret"),
		rbacv1.SchemeGroupVersion.WithKind("Role"), rbacv1.SchemeGroupVersion.WithKind("RoleBinding")} {
		objs, err := a.stores.labelled(ctx, gvk, trustanchor.LabelTrustAnchor)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			ref := metav1.GetControllerOf(o)
			if ref == nil || ref.Kind != "TrustAnchor" || want[objectKey{gvk.Kind, o.GetNamespace(), o.GetName()}] {
				continue
			}
			a.log.Info("deleting what a TrustAnchor no longer publishes", "kind", gvk.Kind,
				"namespace", o.GetNamespace(), "name", o.GetName(), "trustAnchor", ref.Name)
			if err := a.cl.Delete(ctx, metadataOf(gvk, o)); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err))
			}
		}
	}
	return errs
}

// inUse is, per TrustAnchor, the certificates its exposures' backends served at their last
// probe (nil until the probes report).
func (a *tenantApplier) inUse(rendered *render.Result) map[types.NamespacedName][]*x509.Certificate {
	if rendered == nil {
		return nil
	}
	return render.AnchorsInUse(rendered, a.probes.Results())
}

// renderedObjects lists what out holds for the API server: the Gateway API objects, and
// the cert-manager ones where cert-manager is installed.
func renderedObjects(out *render.Result, certManager bool) []client.Object {
	var objs []client.Object
	for _, g := range out.Gateways {
		objs = append(objs, g)
	}
	for _, ls := range out.ListenerSets {
		objs = append(objs, ls)
	}
	for _, h := range out.HTTPRoutes {
		objs = append(objs, h)
	}
	for _, r := range out.TLSRoutes {
		objs = append(objs, r)
	}
	for _, r := range out.TCPRoutes {
		objs = append(objs, r)
	}
	for _, a := range out.AccessPolicies {
		objs = append(objs, a)
	}
	if certManager {
		for _, i := range out.Issuers {
			objs = append(objs, i)
		}
		for _, c := range out.Certificates {
			objs = append(objs, c)
		}
	}
	return objs
}

type objectKey struct {
	kind, namespace, name string
}

func keyOf(o client.Object) objectKey {
	return objectKey{o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName()}
}

// applyAll applies objs, concurrentWrites at a time, and records those applied.
func (a *tenantApplier) applyAll(ctx context.Context, objs []client.Object) []error {
	ok := make([]bool, len(objs))
	w := newBatch()
	for i, o := range objs {
		w.write(func() error {
			if err := a.serverSideApply(ctx, o); err != nil {
				return err
			}
			ok[i] = true
			a.applies.Add(1)
			return nil
		})
	}
	errs := w.wait()
	for i, o := range objs {
		if ok[i] {
			a.applied.done(o)
		}
	}
	return errs
}

// serverSideApply applies o's fields under FieldManager, taking them over from other
// managers (the rendered object is what the TenantGateway says). Status is not applied.
func (a *tenantApplier) serverSideApply(ctx context.Context, o client.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	// Through unstructured: cert-manager's and Gateway API's types come without generated
	// apply configurations, and the rendered object is the whole desired state anyway.
	if err := a.cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// staleKinds are the kinds a TenantGateway renders, with their list types.
var staleKinds = []struct {
	gvk         schema.GroupVersionKind
	certManager bool
}{
	{gwv1.SchemeGroupVersion.WithKind("Gateway"), false},
	{gwv1.SchemeGroupVersion.WithKind("ListenerSet"), false},
	{gwv1.SchemeGroupVersion.WithKind("HTTPRoute"), false},
	{v1alpha1.GroupVersion.WithKind("AccessPolicy"), false},
	{cmv1.SchemeGroupVersion.WithKind(cmv1.IssuerKind), true},
	{cmv1.SchemeGroupVersion.WithKind(cmv1.CertificateKind), true},
}

// deleteStale deletes the objects labelled with a TenantGateway it controls that this render
// did not produce: a Certificate after a switch to existingSecret, the HTTPS listener's
// Certificate of a hostname no route uses any more. Only TenantGateways rendered anew this
// time are considered: one whose input cannot be rendered keeps what it had.
func (a *tenantApplier) deleteStale(ctx context.Context, out *render.Result, want map[objectKey]bool) []error {
	fresh := map[types.NamespacedName]bool{}
	for _, t := range out.Tenants {
		if t.Rendered {
			fresh[types.NamespacedName{Namespace: t.Namespace, Name: t.Name}] = true
		}
	}
	var errs []error
	errs = append(errs, a.deleteStaleRoutes(ctx, out, want)...)
	for _, k := range staleKinds {
		if k.certManager && !a.certManager {
			continue
		}
		objs, err := a.stores.labelled(ctx, k.gvk, render.LabelTenantGateway)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			ref := metav1.GetControllerOf(o)
			if ref == nil || ref.Kind != "TenantGateway" || !fresh[types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}] {
				continue
			}
			if want[objectKey{k.gvk.Kind, o.GetNamespace(), o.GetName()}] {
				continue
			}
			a.log.Info("deleting what a TenantGateway no longer renders", "kind", k.gvk.Kind,
				"namespace", o.GetNamespace(), "name", o.GetName(), "tenantGateway", ref.Name)
			if err := a.cl.Delete(ctx, metadataOf(k.gvk, o), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting %s %s/%s: %w", k.gvk.Kind, o.GetNamespace(), o.GetName(), err))
			}
		}
	}
	return errs
}

// certificateNames makes each cert-manager Certificate named by exposures carry their
// hostnames in spec.dnsNames, and takes the names it added off the Certificates no exposure
// names any more. It writes spec.dnsNames and nothing else of the owner's, under its own
// field manager: the owner's names kept, in their order, then its own, with what it added
// recorded in AnnotationDNSNamesAdded, so that removing its names never removes the owner's.
//
// cert-manager declares dnsNames an atomic list, so no field manager can own single
// names: whoever writes the list owns all of it, by a server-side apply (which would have
// to force the conflict with the owner's ownership) as by the merge patch used here. An
// owner that later applies its own list again meets that conflict, or, forcing it, takes
// snigate's names off until the next pass puts them back (its watch on Certificates
// triggers one at once); the annotation keeps the two lists apart either way.
func (a *tenantApplier) certificateNames(ctx context.Context, want []render.CertificateNames) []error {
	var certs cmv1.CertificateList
	if err := a.cl.List(ctx, &certs); err != nil {
		return []error{fmt.Errorf("listing Certificates: %w", err)}
	}
	wanted := map[types.NamespacedName][]string{}
	for _, w := range want {
		wanted[types.NamespacedName{Namespace: w.Namespace, Name: w.Name}] = w.Hostnames
	}
	var errs []error
	for i := range certs.Items {
		c := &certs.Items[i]
		key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		hosts, named := wanted[key]
		added := splitNames(c.Annotations[AnnotationDNSNamesAdded])
		if !named && len(added) == 0 {
			continue
		}
		var owners []string // the names that are not snigate's
		for _, n := range c.Spec.DNSNames {
			if !slices.Contains(added, n) {
				owners = append(owners, n)
			}
		}
		names, mine := slices.Clone(owners), []string(nil)
		for _, h := range hosts {
			if !slices.Contains(names, h) {
				names = append(names, h)
				mine = append(mine, h)
			}
		}
		if slices.Equal(names, c.Spec.DNSNames) && slices.Equal(mine, added) {
			continue
		}
		annotation := any(strings.Join(mine, ","))
		if len(mine) == 0 {
			annotation = nil
		}
		a.log.Info("setting the dnsNames of a Certificate a DatabaseExposure names", "namespace", c.Namespace,
			"name", c.Name, "added", mine, "owners", owners)
		patch := map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{AnnotationDNSNamesAdded: annotation}},
			"spec":     map[string]any{"dnsNames": names},
		}
		raw, err := json.Marshal(patch)
		if err == nil {
			// A merge patch: only these two fields, and no forced takeover of fields the
			// owner's apply manages elsewhere in the object.
			err = a.cl.Patch(ctx, c, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager))
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("dnsNames of Certificate %s: %w", key, err))
		}
	}
	return errs
}

func splitNames(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// deleteStaleRoutes deletes the routes and AccessPolicies of DatabaseExposures rendered anew
// this time that they no longer have: the route of an exposure that lost a conflict, or
// whose engine moved it from a TLSRoute to a TCPRoute; the AccessPolicy of one whose
// spec.access was removed. A deleted exposure's objects go with it (garbage collection); one
// whose TenantGateway kept its previous objects keeps them.
func (a *tenantApplier) deleteStaleRoutes(ctx context.Context, out *render.Result, want map[objectKey]bool) []error {
	fresh := a.fresh
	clear(fresh)
	for _, x := range out.Exposures {
		if x.Rendered {
			fresh[types.NamespacedName{Namespace: x.Namespace, Name: x.Name}] = true
		}
	}
	var errs []error
	for _, gvk := range []schema.GroupVersionKind{gwv1.SchemeGroupVersion.WithKind("TLSRoute"), gwv1.SchemeGroupVersion.WithKind("TCPRoute"),
		v1alpha1.GroupVersion.WithKind("AccessPolicy")} {
		kind := gvk.Kind
		objs, err := a.stores.labelled(ctx, gvk, render.LabelDatabaseExposure)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			ref := metav1.GetControllerOf(o)
			if ref == nil || ref.Kind != "DatabaseExposure" || !fresh[types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}] {
				continue
			}
			if want[objectKey{kind, o.GetNamespace(), o.GetName()}] {
				continue
			}
			a.log.Info("deleting what a DatabaseExposure no longer has", "kind", kind,
				"namespace", o.GetNamespace(), "name", o.GetName())
			if err := a.cl.Delete(ctx, metadataOf(gvk, o)); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting %s %s/%s: %w", kind, o.GetNamespace(), o.GetName(), err))
			}
		}
	}
	return errs
}

// stampNamespaces puts each TenantGateway's namespace and its attached namespaces into its
// tree: snigate.dev/gateway=<its namespace> on both, and snigate.dev/host=<apex> on its own
// namespace, so the admission policies hold its routes to the apex. What it stamps it
// records (AnnotationStampedBy), and it takes its labels off again when the TenantGateway or
// the entry goes. A namespace whose labels someone else set is left alone.
func (a *tenantApplier) stampNamespaces(ctx context.Context, res *resources.Resources) []error {
	type stamp struct{ by, gateway, host string }
	wanted := map[string]stamp{} // namespace -> labels to stamp
	for _, t := range res.TenantGateways {
		by := t.Namespace + "/" + t.Name
		if _, taken := wanted[t.Namespace]; !taken {
			wanted[t.Namespace] = stamp{by, t.Namespace, t.Spec.Apex}
		}
		for _, ns := range t.Spec.AttachedNamespaces {
			if _, taken := wanted[ns]; !taken {
				wanted[ns] = stamp{by: by, gateway: t.Namespace}
			}
		}
	}
	var errs []error
	for _, ns := range res.Namespaces {
		stamped := ns.Annotations[AnnotationStampedBy]
		w, want := wanted[ns.Name]
		gw, host := ns.Labels[render.LabelGateway], ns.Labels[render.LabelHost]
		mine := stamped != ""
		switch {
		case want && stamped == w.by && gw == w.gateway && (w.host == "" || host == w.host):
			// Already stamped.
		case want && (mine || (gw == "" || gw == w.gateway) && (w.host == "" || host == "" || host == w.host)):
			labels := map[string]any{render.LabelGateway: w.gateway}
			if w.host != "" {
				labels[render.LabelHost] = w.host
			} else if mine {
				labels[render.LabelHost] = nil
			}
			errs = append(errs, a.patchNamespace(ctx, ns, map[string]any{
				"labels": labels, "annotations": map[string]any{AnnotationStampedBy: w.by},
			}))
		case want:
			a.log.Warn("namespace carries tree labels someone else set; not stamping it",
				"namespace", ns.Name, "tenantGateway", w.by, "gateway", gw, "host", host)
		case mine:
			errs = append(errs, a.patchNamespace(ctx, ns, map[string]any{
				"labels":      map[string]any{render.LabelGateway: nil, render.LabelHost: nil},
				"annotations": map[string]any{AnnotationStampedBy: nil},
			}))
		}
	}
	return slices.DeleteFunc(errs, func(e error) bool { return e == nil })
}

func (a *tenantApplier) patchNamespace(ctx context.Context, ns *corev1.Namespace, meta map[string]any) error {
	p := map[string]any{"metadata": meta}
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := a.cl.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}, client.RawPatch(types.MergePatchType, raw)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("labelling namespace %s: %w", ns.Name, err)
	}
	return nil
}
