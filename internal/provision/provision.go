// Package provision gives every Gateway of snigate's classes its own data plane in the
// cluster, the way GEP-1762 ("in-cluster Gateway deployments") describes it:
//
//	err := provision.Setup(mgr, provision.Options{Image: "registry/snigate:v1"})
//
// For a Gateway apps/edge of class snigate, the elected controller replica applies, in the
// Gateway's namespace and owned by the Gateway (so deleting the Gateway garbage-collects
// them):
//
//   - ServiceAccount edge-snigate: the data plane's identity. Its only permissions come from
//     the ClusterRoleBinding snigate-dataplane (config/rbac), whose subjects the controller
//     keeps equal to the ServiceAccounts of all provisioned Gateways.
//   - Deployment edge-snigate: `snigate dataplane --gateway apps/edge`, replicas from the
//     Gateway annotation snigate.dev/replicas (default 1). Each replica watches the API
//     server read-only and serves that Gateway's snapshot; it keeps serving the last one while
//     the API server or the controller is away.
//   - Service edge-snigate, type LoadBalancer, exactly one TCP port per distinct listener port.
//   - NetworkPolicy edge-snigate: ingress to the data plane Pods on those ports and the
//     metrics port (9902: /metrics, /healthz, /readyz) only. /status and /debug/pprof are on
//     the Pod's loopback (9901).
//
// Every object carries the labels gateway.networking.k8s.io/gateway-name and
// gateway-class-name, plus spec.infrastructure.labels and .annotations of the Gateway.
// Objects are written with server-side apply (field owner "snigate"): a listener removed from
// the Gateway removes its port from the Service, and fields that others own (the Service's
// nodePorts and clusterIP, a Deployment's replicas scaled by nobody else) are left alone.
//
// Gateway status.addresses then comes from the Service's status.loadBalancer.ingress: the
// Kubernetes source translates with translate.Options.ProvisionedAddresses, and until a load
// balancer has assigned an address, the Gateway is Programmed=False with reason
// AddressNotAssigned.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/translate"
)

const (
	// ReplicasAnnotation on a Gateway sets its data plane's replica count (default 1).
	ReplicasAnnotation = "snigate.dev/replicas"
	// DefaultClusterRoleBinding grants the data plane ClusterRole to the provisioned
	// ServiceAccounts (config/rbac/dataplane.yaml).
	DefaultClusterRoleBinding = "snigate-dataplane"
	// FieldOwner is the server-side apply field manager of everything provisioned.
	FieldOwner = "snigate"
	// AdminPort is the data plane's full admin listener (/status, /debug/pprof and the
	// rest), on the Pod's loopback only: `kubectl port-forward` reaches it.
	AdminPort = 9901
	// MetricsPort is the data plane's listener on the Pod network: /metrics, /healthz,
	// /readyz (the probes), nothing else.
	MetricsPort = 9902

	LabelGatewayName      = "gateway.networking.k8s.io/gateway-name"
	LabelGatewayClassName = "gateway.networking.k8s.io/gateway-class-name"
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	LabelComponent        = "app.kubernetes.io/component"
	managedBy             = "snigate"
	component             = "dataplane"
)

// Options configures provisioning.
type Options struct {
	// Image runs the data plane (`snigate dataplane`); required.
	Image string
	// ImagePullPolicy of the data plane container; empty: the cluster's default.
	ImagePullPolicy corev1.PullPolicy
	// ControllerName selects our GatewayClasses; default translate.DefaultControllerName.
	ControllerName string
	// ClusterRoleBinding is the binding whose subjects are the provisioned ServiceAccounts;
	// default DefaultClusterRoleBinding.
	ClusterRoleBinding string
	Logger             *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ControllerName == "" {
		o.ControllerName = translate.DefaultControllerName
	}
	if o.ClusterRoleBinding == "" {
		o.ClusterRoleBinding = DefaultClusterRoleBinding
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// managedSelector selects what provisioning created.
var managedSelector = labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy, LabelComponent: component})

// CacheByObject limits the informer cache to the Deployments, ServiceAccounts and
// NetworkPolicies that provisioning created (a cluster has many of both). Services are not limited: the
// Kubernetes source watches all of them as backends.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:            {Label: managedSelector},
		&corev1.ServiceAccount{}:        {Label: managedSelector},
		&networkingv1.NetworkPolicy{}:   {Label: managedSelector},
		&policyv1.PodDisruptionBudget{}: {Label: managedSelector},
	}
}

// Name is the name of every object provisioned for gw: translate.ProvisionedName, under
// which translate finds the Service whose load balancer addresses are the Gateway's.
func Name(gw *gwv1.Gateway) string { return translate.ProvisionedName(gw) }

// Replicas is the data plane replica count that gw asks for.
func Replicas(gw *gwv1.Gateway) (int32, error) {
	v, ok := gw.Annotations[ReplicasAnnotation]
	if !ok {
		return 1, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n < 0 {
		return 1, fmt.Errorf("annotation %s: %q is not a non-negative integer", ReplicasAnnotation, v)
	}
	return int32(n), nil
}

// Ports lists the distinct ports of gw's listeners that snigate serves (every protocol over
// TCP: TLS, HTTPS, HTTP, TCP; not UDP), and of the listeners of sets (the ListenerSets gw
// takes: AttachedSets), ascending.
func Ports(gw *gwv1.Gateway, sets ...*gwv1.ListenerSet) []int32 {
	var out []int32
	add := func(proto gwv1.ProtocolType, port gwv1.PortNumber) {
		if proto == gwv1.UDPProtocolType {
			return
		}
		if p := int32(port); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, l := range gw.Spec.Listeners {
		add(l.Protocol, l.Port)
	}
	for _, s := range sets {
		for _, l := range s.Spec.Listeners {
			add(l.Protocol, l.Port)
		}
	}
	slices.Sort(out)
	return out
}

// AttachedSets are the ListenerSets of sets that name gw as parent and that gw allows
// (translate.AllowsListenerSet); nsLabels gives a namespace's labels.
func AttachedSets(gw *gwv1.Gateway, sets []gwv1.ListenerSet, nsLabels func(ns string) labels.Set) []*gwv1.ListenerSet {
	var out []*gwv1.ListenerSet
	for i := range sets {
		s := &sets[i]
		if !translate.IsParent(s, gw) {
			continue
		}
		if ok, _ := translate.AllowsListenerSet(gw, s.Namespace, nsLabels(s.Namespace)); ok {
			out = append(out, s)
		}
	}
	return out
}

// objectLabels are the labels of every provisioned object and of the data plane Pods.
func objectLabels(gw *gwv1.Gateway) map[string]string {
	m := map[string]string{}
	if inf := gw.Spec.Infrastructure; inf != nil {
		for k, v := range inf.Labels {
			m[string(k)] = string(v)
		}
	}
	for k, v := range selectorLabels(gw) {
		m[k] = v
	}
	m[LabelGatewayClassName] = string(gw.Spec.GatewayClassName)
	return m
}

// selectorLabels select a Gateway's data plane Pods (immutable in a Deployment: no class).
func selectorLabels(gw *gwv1.Gateway) map[string]string {
	return map[string]string{LabelGatewayName: gw.Name, LabelManagedBy: managedBy, LabelComponent: component}
}

func objectAnnotations(gw *gwv1.Gateway) map[string]string {
	m := map[string]string{}
	if inf := gw.Spec.Infrastructure; inf != nil {
		for k, v := range inf.Annotations {
			m[string(k)] = string(v)
		}
	}
	return m
}

func ownerRef(gw *gwv1.Gateway) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(gwv1.GroupVersion.String()).WithKind("Gateway").
		WithName(gw.Name).WithUID(gw.UID).
		WithController(true).WithBlockOwnerDeletion(true)
}

// ServiceAccount is the data plane's identity for gw.
func ServiceAccount(gw *gwv1.Gateway) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(Name(gw), gw.Namespace).
		WithLabels(objectLabels(gw)).WithAnnotations(objectAnnotations(gw)).
		WithOwnerReferences(ownerRef(gw))
}

// Service exposes gw's listener ports, and those of the ListenerSets it takes, through a load
// balancer; nil when there are none.
func Service(gw *gwv1.Gateway, sets ...*gwv1.ListenerSet) *corev1ac.ServiceApplyConfiguration {
	ports := Ports(gw, sets...)
	if len(ports) == 0 {
		return nil
	}
	spec := corev1ac.ServiceSpec().WithType(corev1.ServiceTypeLoadBalancer).WithSelector(selectorLabels(gw))
	// A static address (spec.addresses, IPAddress) is asked of the load balancer: a
	// LoadBalancer Service takes one, in loadBalancerIP, which the cloud controllers and
	// MetalLB honour (deprecated in core for per-provider annotations, still the one field
	// every provider reads). Further addresses are not passed on.
	for _, a := range gw.Spec.Addresses {
		if (a.Type == nil || *a.Type == gwv1.IPAddressType) && a.Value != "" {
			spec.WithLoadBalancerIP(a.Value)
			break
		}
	}
	for _, p := range ports {
		spec.WithPorts(corev1ac.ServicePort().WithName("port-" + strconv.Itoa(int(p))).
			WithProtocol(corev1.ProtocolTCP).WithPort(p).WithTargetPort(intstr.FromInt32(p)))
	}
	return corev1ac.Service(Name(gw), gw.Namespace).
		WithLabels(objectLabels(gw)).WithAnnotations(objectAnnotations(gw)).
		WithOwnerReferences(ownerRef(gw)).WithSpec(spec)
}

// NetworkPolicy admits to gw's data plane Pods only its listener ports (and those of the
// ListenerSets it takes) and the metrics port (Prometheus, the probes): nothing else on the
// Pod network reaches them, not even where a process listens on another port by mistake.
// The full admin listener (/status, /debug/pprof) is on the Pod's loopback anyway.
func NetworkPolicy(gw *gwv1.Gateway, sets ...*gwv1.ListenerSet) *networkingv1ac.NetworkPolicyApplyConfiguration {
	rule := networkingv1ac.NetworkPolicyIngressRule()
	for _, p := range append(Ports(gw, sets...), MetricsPort) {
		rule.WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(p)))
	}
	return networkingv1ac.NetworkPolicy(Name(gw), gw.Namespace).
		WithLabels(objectLabels(gw)).WithAnnotations(objectAnnotations(gw)).
		WithOwnerReferences(ownerRef(gw)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(gw))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(rule))
}

// Deployment runs `snigate dataplane` for gw with image; its Pods stop as stop says, and a
// rollout replaces them one at a time, none unavailable (rollout.go).
func Deployment(gw *gwv1.Gateway, image string, pull corev1.PullPolicy, replicas int32, stop Stop) *appsv1ac.DeploymentApplyConfiguration {
	args := append([]string{"dataplane", "--gateway", gw.Namespace + "/" + gw.Name, "--log-format=json",
		"--admin=127.0.0.1:" + strconv.Itoa(AdminPort), "--metrics=:" + strconv.Itoa(MetricsPort)}, stop.args()...)
	c := corev1ac.Container().WithName("snigate").WithImage(image).
		WithArgs(args...).
		WithPorts(corev1ac.ContainerPort().WithName("metrics").WithContainerPort(MetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/readyz").WithPort(intstr.FromString("metrics")))).
		WithLivenessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/healthz").WithPort(intstr.FromString("metrics")))).
		WithSecurityContext(corev1ac.SecurityContext().WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	if pull != "" {
		c.WithImagePullPolicy(pull)
	}
	for _, p := range Ports(gw) {
		c.WithPorts(corev1ac.ContainerPort().WithContainerPort(p).WithProtocol(corev1.ProtocolTCP))
	}
	pod := corev1ac.PodSpec().WithServiceAccountName(Name(gw)).
		WithTerminationGracePeriodSeconds(stop.terminationGracePeriodSeconds()).
		WithSecurityContext(corev1ac.PodSecurityContext().WithRunAsNonRoot(true).WithRunAsUser(65532).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)).
			// Listener ports below 1024 without root or capabilities (a "safe" sysctl).
			WithSysctls(corev1ac.Sysctl().WithName("net.ipv4.ip_unprivileged_port_start").WithValue("0"))).
		WithContainers(c)
	return appsv1ac.Deployment(Name(gw), gw.Namespace).
		WithLabels(objectLabels(gw)).WithAnnotations(objectAnnotations(gw)).
		WithOwnerReferences(ownerRef(gw)).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(replicas).WithStrategy(rollingUpdate()).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(gw))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(objectLabels(gw)).WithAnnotations(objectAnnotations(gw)).
				WithSpec(pod)))
}

func ptr[T any](v T) *T { return &v }

// Setup adds the provisioning controller to mgr. It runs on the elected leader only.
func Setup(mgr manager.Manager, o Options) error {
	if o.Image == "" {
		return errors.New("provision: Options.Image is required")
	}
	o = o.withDefaults()
	r := &reconciler{cl: mgr.GetClient(), o: o, log: o.Logger.With("component", "provision")}
	// A GatewayClass that changes its controllerName, or appears after its Gateways, changes
	// which Gateways are ours.
	byClass := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		var gws gwv1.GatewayList
		if err := r.cl.List(ctx, &gws); err != nil {
			r.log.Error("listing Gateways", "error", err)
			return nil
		}
		var out []reconcile.Request
		for _, g := range gws.Items {
			if string(g.Spec.GatewayClassName) == obj.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&g)})
			}
		}
		return out
	})
	// A ListenerSet that appears, changes or goes changes its parent's ports.
	byParent := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		s, ok := obj.(*gwv1.ListenerSet)
		if !ok {
			return nil
		}
		ns := s.Namespace
		if ref := s.Spec.ParentRef; ref.Namespace != nil && *ref.Namespace != "" {
			ns = string(*ref.Namespace)
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: string(s.Spec.ParentRef.Name)}}}
	})
	_, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: gwv1.GroupName, Kind: "ListenerSet"}, "v1")
	r.listenerSets = err == nil
	b := ctrl.NewControllerManagedBy(mgr)
	if r.listenerSets {
		b = b.Watches(&gwv1.ListenerSet{}, byParent, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	} else {
		r.log.Info("the API server serves no ListenerSets: provisioned Services count the Gateways' own listeners only")
	}
	return b.
		Named("snigate-provision").
		WithOptions(controller.Options{SkipNameValidation: ptr(true)}). // see internal/source/cluster
		For(&gwv1.Gateway{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&gwv1.GatewayClass{}, byClass, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

type reconciler struct {
	cl  client.Client
	o   Options
	log *slog.Logger
	// listenerSets: the API server serves ListenerSets, whose ports count too.
	listenerSets bool
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var gw gwv1.Gateway
	err := r.cl.Get(ctx, req.NamespacedName, &gw)
	switch {
	case apierrors.IsNotFound(err):
		// Garbage collection removes what the Gateway owned; its ServiceAccount leaves the
		// binding.
		return reconcile.Result{}, r.syncBinding(ctx)
	case err != nil:
		return reconcile.Result{}, err
	}
	ours, err := r.ours(ctx, &gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ours || gw.DeletionTimestamp != nil {
		// Another controller's class now (or on its way out): what we provisioned goes.
		return reconcile.Result{}, errors.Join(r.prune(ctx, &gw, ""), r.syncBinding(ctx))
	}
	replicas, err := Replicas(&gw)
	if err != nil {
		r.log.Warn("Gateway "+req.String()+": using 1 replica", "error", err)
	}
	stop, err := Stopping(&gw)
	if err != nil {
		r.log.Warn("Gateway "+req.String(), "error", err)
	}
	sets, err := r.attachedSets(ctx, &gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	apply := []func() error{
		func() error {
			return r.cl.Apply(ctx, ServiceAccount(&gw), client.FieldOwner(FieldOwner), client.ForceOwnership)
		},
		func() error {
			d := Deployment(&gw, r.o.Image, r.o.ImagePullPolicy, replicas, stop)
			return r.cl.Apply(ctx, d, client.FieldOwner(FieldOwner), client.ForceOwnership)
		},
		func() error {
			return r.cl.Apply(ctx, NetworkPolicy(&gw, sets...), client.FieldOwner(FieldOwner), client.ForceOwnership)
		},
		func() error {
			if pdb := PodDisruptionBudget(&gw, replicas); pdb != nil {
				return r.cl.Apply(ctx, pdb, client.FieldOwner(FieldOwner), client.ForceOwnership)
			}
			return r.deleteIfOwned(ctx, &policyv1.PodDisruptionBudget{}, &gw, Name(&gw))
		},
		func() error {
			if svc := Service(&gw, sets...); svc != nil {
				return r.cl.Apply(ctx, svc, client.FieldOwner(FieldOwner), client.ForceOwnership)
			}
			return nil
		},
	}
	for _, a := range apply {
		if err := a(); err != nil {
			return reconcile.Result{}, fmt.Errorf("provisioning Gateway %s: %w", req, err)
		}
	}
	keep := Name(&gw)
	if err := r.prune(ctx, &gw, keep); err != nil {
		return reconcile.Result{}, err
	}
	if Service(&gw, sets...) == nil {
		if err := r.deleteIfOwned(ctx, &corev1.Service{}, &gw, keep); err != nil {
			return reconcile.Result{}, err
		}
	}
	r.log.Debug("provisioned", "gateway", req.String(), "name", keep, "replicas", replicas, "ports", Ports(&gw, sets...))
	return reconcile.Result{}, r.syncBinding(ctx)
}

// attachedSets lists the ListenerSets gw takes; none where the API server serves no
// ListenerSets (Gateway API CRDs older than v1.5).
func (r *reconciler) attachedSets(ctx context.Context, gw *gwv1.Gateway) ([]*gwv1.ListenerSet, error) {
	if !r.listenerSets {
		return nil, nil
	}
	var sets gwv1.ListenerSetList
	if err := r.cl.List(ctx, &sets); err != nil {
		return nil, fmt.Errorf("listing ListenerSets: %w", err)
	}
	var lookupErr error
	labelsOf := func(ns string) labels.Set {
		var n corev1.Namespace
		if err := r.cl.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			if !apierrors.IsNotFound(err) {
				lookupErr = err
			}
			return nil
		}
		return n.Labels
	}
	out := AttachedSets(gw, sets.Items, labelsOf)
	return out, lookupErr
}

// ours: gw's GatewayClass exists and names our controller.
func (r *reconciler) ours(ctx context.Context, gw *gwv1.Gateway) (bool, error) {
	var gc gwv1.GatewayClass
	err := r.cl.Get(ctx, client.ObjectKey{Name: string(gw.Spec.GatewayClassName)}, &gc)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return string(gc.Spec.ControllerName) == r.o.ControllerName, nil
}

// prune deletes the objects provisioned for gw under another name than keep (its class
// changed, or keep is "": it is no longer ours).
func (r *reconciler) prune(ctx context.Context, gw *gwv1.Gateway, keep string) error {
	sel := client.MatchingLabels{LabelGatewayName: gw.Name, LabelManagedBy: managedBy, LabelComponent: component}
	var errs []error
	for _, l := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{}, &networkingv1.NetworkPolicyList{}, &policyv1.PodDisruptionBudgetList{}} {
		if err := r.cl.List(ctx, l, client.InNamespace(gw.Namespace), sel); err != nil {
			errs = append(errs, err)
			continue
		}
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			obj := o.(client.Object)
			if obj.GetName() != keep && metav1.IsControlledBy(obj, gw) {
				errs = append(errs, client.IgnoreNotFound(r.cl.Delete(ctx, obj)))
			}
			return nil
		})
	}
	return errors.Join(errs...)
}

func (r *reconciler) deleteIfOwned(ctx context.Context, obj client.Object, gw *gwv1.Gateway, name string) error {
	if err := r.cl.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: name}, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, gw) {
		return nil
	}
	return client.IgnoreNotFound(r.cl.Delete(ctx, obj))
}

// syncBinding makes the subjects of the data plane ClusterRoleBinding exactly the
// ServiceAccounts of the Gateways that are ours. The binding itself comes with the install
// manifests, without subjects, so `kubectl apply` never resets what the controller set; the
// controller may only patch that one binding.
func (r *reconciler) syncBinding(ctx context.Context) error {
	var gws gwv1.GatewayList
	if err := r.cl.List(ctx, &gws); err != nil {
		return err
	}
	var gcs gwv1.GatewayClassList
	if err := r.cl.List(ctx, &gcs); err != nil {
		return err
	}
	ourClasses := map[string]bool{}
	for _, gc := range gcs.Items {
		if string(gc.Spec.ControllerName) == r.o.ControllerName {
			ourClasses[gc.Name] = true
		}
	}
	type sa struct{ ns, name string }
	var subjects []sa
	for i := range gws.Items {
		g := &gws.Items[i]
		if ourClasses[string(g.Spec.GatewayClassName)] && g.DeletionTimestamp == nil {
			subjects = append(subjects, sa{g.Namespace, Name(g)})
		}
	}
	slices.SortFunc(subjects, func(a, b sa) int { return strings.Compare(a.ns+"/"+a.name, b.ns+"/"+b.name) })
	crb := rbacv1ac.ClusterRoleBinding(r.o.ClusterRoleBinding)
	for _, s := range subjects {
		crb.WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithNamespace(s.ns).WithName(s.name))
	}
	if err := r.cl.Apply(ctx, crb, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s (from the install manifests): %w", r.o.ClusterRoleBinding, err)
	}
	return nil
}
