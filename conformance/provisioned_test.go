//go:build linux

package conformance

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// dataPlanes is what the kubelet stand-in adds in the provisioned run, where `snigate
// controller --provision` creates a Deployment, a LoadBalancer Service, a ServiceAccount and
// a NetworkPolicy per Gateway, and the Gateway's traffic goes through the data plane the
// Deployment runs:
//
//   - Load balancer: every Service of type LoadBalancer gets an address of the pool in
//     status.loadBalancer.ingress: its spec.loadBalancerIP when that is in the pool and
//     free (a static address the Gateway asked for), none when it is outside (the Service
//     stays pending, as with a real load balancer), otherwise the lowest free address from
//     .2 up to .200 (so the suite's usable static address, .250, is never handed out).
//   - Kubelet, for the data-plane image: the container runs as the snigate binary, with
//     the Deployment's arguments plus what a Pod would have had from its node (a kubeconfig
//     in place of the ServiceAccount token; its listen addresses). The process runs in the
//     host's network namespace bound to its Service's load balancer address, like a
//     hostNetwork Pod behind a load balancer that announces node addresses (k3s's
//     ServiceLB): the address the suite dials is the one the process listens on, so no
//     NAT is needed. The Pod is Ready when /readyz on the metrics port answers 200.
//   - Garbage collector: Deployments, Services, ServiceAccounts and NetworkPolicies whose
//     controlling owner is a Gateway that no longer exists are deleted (the API server
//     alone has no garbage collector).
type dataPlanes struct {
	image      string // the --dataplane-image the controller provisions
	snigate    string // the binary run for it
	kubeconfig []byte // an admin's; each data plane impersonates its Pod's ServiceAccount
	pool       netip.Prefix
	assigned   map[types.NamespacedName]netip.Addr // Service -> load balancer address
	services   []corev1.Service                    // the LoadBalancer Services of the last pass
}

const (
	// dynamicFirst and dynamicLast bound the addresses the load balancer hands out by
	// itself (host parts of the pool); the rest of the pool is for static addresses only.
	dynamicFirst = 2
	dynamicLast  = 200
)

// sync runs the garbage collector and the load balancer; the kubelet then starts the
// data-plane Pods (startDataPlane). busy are the addresses data-plane processes still
// listen on: one whose Service is gone is handed out again only once its process has ended.
func (d *dataPlanes) sync(ctx context.Context, cl client.Client, busy map[netip.Addr]bool, log func(msg string, args ...any)) error {
	var gws gwv1.GatewayList
	if err := cl.List(ctx, &gws); err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for _, gw := range gws.Items {
		live[gw.UID] = true
	}
	var owned []client.Object
	for _, l := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{}, &networkingv1.NetworkPolicyList{}} {
		if err := cl.List(ctx, l, client.HasLabels{provision.LabelGatewayName}); err != nil {
			return err
		}
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			owned = append(owned, o.(client.Object))
			return nil
		})
	}
	for _, o := range owned {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != "Gateway" || live[ref.UID] {
			continue
		}
		log("garbage collecting", "object", fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName()), "owner", ref.Name)
		if err := cl.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return d.loadBalancer(ctx, cl, busy, log)
}

// loadBalancer assigns addresses to LoadBalancer Services and writes them to their status.
func (d *dataPlanes) loadBalancer(ctx context.Context, cl client.Client, busy map[netip.Addr]bool, log func(msg string, args ...any)) error {
	var svcs corev1.ServiceList
	if err := cl.List(ctx, &svcs); err != nil {
		return err
	}
	present := map[types.NamespacedName]bool{}
	d.services = d.services[:0]
	for i := range svcs.Items {
		if svcs.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
			present[client.ObjectKeyFromObject(&svcs.Items[i])] = true
			d.services = append(d.services, svcs.Items[i])
		}
	}
	for key := range d.assigned {
		if !present[key] {
			delete(d.assigned, key)
		}
	}
	taken := func(a netip.Addr, self types.NamespacedName) bool {
		if cur, ok := d.assigned[self]; busy[a] && (!ok || cur != a) {
			return true
		}
		for k, v := range d.assigned {
			if v == a && k != self {
				return true
			}
		}
		return false
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		key := client.ObjectKeyFromObject(svc)
		var want netip.Addr
		if ip := svc.Spec.LoadBalancerIP; ip != "" {
			if a, err := netip.ParseAddr(ip); err == nil && d.pool.Contains(a) && !taken(a, key) {
				want = a
			}
		} else if cur, ok := d.assigned[key]; ok && cur.As4()[3] >= dynamicFirst && cur.As4()[3] <= dynamicLast {
			want = cur
		} else {
			for n := dynamicFirst; n <= dynamicLast; n++ {
				b := d.pool.Addr().As4()
				b[3] = byte(n)
				if a := netip.AddrFrom4(b); !taken(a, key) {
					want = a
					break
				}
			}
		}
		if want.IsValid() {
			d.assigned[key] = want
		} else {
			delete(d.assigned, key)
		}
		var ingress []corev1.LoadBalancerIngress
		if want.IsValid() {
			ingress = []corev1.LoadBalancerIngress{{IP: want.String(), IPMode: new(corev1.LoadBalancerIPModeVIP)}}
		}
		if slices.EqualFunc(svc.Status.LoadBalancer.Ingress, ingress, func(a, b corev1.LoadBalancerIngress) bool { return a.IP == b.IP }) {
			continue
		}
		svc = svc.DeepCopy()
		svc.Status.LoadBalancer.Ingress = ingress
		if err := cl.Status().Update(ctx, svc); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("service %s status: %w", key, err)
		}
		log("load balancer address", "service", key.String(), "address", want)
	}
	return nil
}

// address is the load balancer address of the LoadBalancer Service that selects p, as of the
// last load balancer pass.
func (d *dataPlanes) address(p *corev1.Pod) (netip.Addr, error) {
	for i := range d.services {
		svc := &d.services[i]
		if svc.Namespace != p.Namespace || len(svc.Spec.Selector) == 0 ||
			!labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
			continue
		}
		if a, ok := d.assigned[client.ObjectKeyFromObject(svc)]; ok {
			return a, nil
		}
		return netip.Addr{}, fmt.Errorf("waiting for the load balancer to assign Service %s/%s an address", svc.Namespace, svc.Name)
	}
	return netip.Addr{}, fmt.Errorf("no LoadBalancer Service selects the Pod")
}

// isDataPlane reports whether c is a provisioned data-plane container.
func (d *dataPlanes) isDataPlane(c corev1.Container) bool { return d != nil && c.Image == d.image }

// startDataPlane runs container c of Pod p as `snigate` bound to addr, logging to podDir.
func (d *dataPlanes) startDataPlane(p *corev1.Pod, c corev1.Container, addr netip.Addr, podDir string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(podDir, c.Name+".log"))
	if err != nil {
		return nil, err
	}
	// The identity a ServiceAccount token would have given the Pod.
	kc := filepath.Join(podDir, "kubeconfig")
	sa := "system:serviceaccount:" + p.Namespace + ":" + cmp.Or(p.Spec.ServiceAccountName, "default")
	if err := kubetest.WriteKubeconfig(d.kubeconfig, sa, kc); err != nil {
		logf.Close()
		return nil, err
	}
	// The listen addresses a Pod would have had in a network namespace of its own (its own
	// loopback and its Pod address), and the API server its ServiceAccount token would have
	// reached. Later flags win.
	args := append(slices.Clone(c.Args), "--kubeconfig", kc, "--bind", addr.String())
	for _, a := range c.Args {
		for _, f := range []string{"--admin=", "--metrics="} {
			if v, ok := strings.CutPrefix(a, f); ok {
				ap, err := netip.ParseAddrPort(v)
				if err != nil { // ":port"
					_, port, _ := strings.Cut(v, ":")
					ap, err = netip.ParseAddrPort("0.0.0.0:" + port)
				}
				if err != nil {
					logf.Close()
					return nil, fmt.Errorf("container argument %s: %w", a, err)
				}
				args = append(args, f+netip.AddrPortFrom(addr, ap.Port()).String())
			}
		}
	}
	cmd := exec.Command(d.snigate, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "POD_NAMESPACE=" + p.Namespace, "POD_NAME=" + p.Name}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the data plane: %w", err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	return cmd, nil
}

// dataPlaneReady reports whether the data plane at addr serves a configuration: its
// readiness probe, on the metrics port.
func dataPlaneReady(addr netip.Addr) bool {
	return testutil.Ready(netip.AddrPortFrom(addr, provision.MetricsPort))
}

// dataPlaneImage is the image the provisioned run's controller writes into Deployments.
const dataPlaneImage = "snigate.dev/snigate:conformance"
