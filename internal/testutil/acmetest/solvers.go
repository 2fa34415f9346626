package acmetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/internal/testutil"
)

// solverLabel marks the Pods (and Services) cert-manager creates for an HTTP-01 challenge.
const solverLabel = "acme.cert-manager.io/http01-solver"

// sliceManager marks the EndpointSlices the stand-in writes.
const sliceManager = "acmetest.snigate.dev"

// Solvers is the stand-in kubelet for cert-manager's HTTP-01 solver Pods: a bare API server
// has no node, so nothing would run them. It runs each Pod's acmesolver with the Pod's own
// arguments in a network namespace of its own (the API server refuses loopback endpoints),
// reports the Pod Running and Ready with that address, and writes one EndpointSlice per
// solver Service with the ready Pods it selects, which is what routes the Gateway's
// challenge HTTPRoute to the solver. A deleted Pod's process and namespace go with it.
type Solvers struct {
	cl  client.Client
	dir string
	t   testing.TB

	mu   sync.Mutex
	pods map[string]*solverPod // namespace/name
}

type solverPod struct {
	host *testutil.Host
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// RunSolverPods starts the stand-in against cfg's API server; it stops, with every solver,
// in t.Cleanup.
func RunSolverPods(t testing.TB, cfg *rest.Config) {
	t.Helper()
	RequireTools(t)
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Solvers{cl: cl, dir: t.TempDir(), t: t, pods: map[string]*solverPod{}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := s.sync(ctx); err != nil && ctx.Err() == nil {
				t.Logf("solver pods: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		s.mu.Lock()
		defer s.mu.Unlock()
		for key, p := range s.pods {
			s.stop(key, p)
		}
	})
}

func (s *Solvers) sync(parent context.Context) error {
	ctx, cancel := pollContext(parent)
	defer cancel()
	var pods corev1.PodList
	if err := s.cl.List(ctx, &pods, client.HasLabels{solverLabel}); err != nil {
		return err
	}
	present := map[string]bool{}
	ready := map[string][]corev1.Pod{} // namespace → running solver Pods
	for _, pod := range pods.Items {
		key := pod.Namespace + "/" + pod.Name
		if pod.DeletionTimestamp != nil {
			continue
		}
		present[key] = true
		ip, err := s.run(ctx, &pod, key)
		if errors.Is(err, errNotYet) {
			continue // its process is starting: the next pass looks again
		}
		if err != nil {
			s.t.Logf("solver pod %s: %v", key, err)
			continue
		}
		pod.Status.PodIP = ip.String()
		ready[pod.Namespace] = append(ready[pod.Namespace], pod)
	}
	s.mu.Lock()
	for key, p := range s.pods {
		if !present[key] {
			s.stop(key, p)
		}
	}
	s.mu.Unlock()
	return s.endpointSlices(ctx, ready)
}

// run starts the Pod's solver once and reports it Running and Ready.
func (s *Solvers) run(ctx context.Context, pod *corev1.Pod, key string) (netip.Addr, error) {
	s.mu.Lock()
	p, ok := s.pods[key]
	s.mu.Unlock()
	if !ok {
		if len(pod.Spec.Containers) != 1 {
			return netip.Addr{}, fmt.Errorf("%d containers, want cert-manager's one", len(pod.Spec.Containers))
		}
		args := pod.Spec.Containers[0].Args
		host, err := testutil.NewHost("solver")
		if err != nil {
			return netip.Addr{}, err
		}
		p = &solverPod{host: host, done: make(chan struct{}), log: filepath.Join(s.dir, pod.Namespace+"_"+pod.Name+".log")}
		f, err := os.Create(p.log)
		if err != nil {
			host.Remove()
			return netip.Addr{}, err
		}
		// The solver binary with the Pod's own arguments (--listen-port, --domain, --token,
		// --key), as the image's entrypoint would take them.
		p.cmd = host.Command(tool("acmesolver"), args...)
		p.cmd.Stdout, p.cmd.Stderr = f, f
		if err := p.cmd.Start(); err != nil {
			f.Close()
			host.Remove()
			return netip.Addr{}, err
		}
		f.Close()
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		s.mu.Lock()
		s.pods[key] = p
		s.mu.Unlock()
		s.t.Logf("solver pod %s running at %s (domain %s)", key, host.IP, flagValue(args, "domain"))
	}
	if pod.Status.PodIP == p.host.IP.String() && pod.Status.Phase == corev1.PodRunning {
		return p.host.IP, nil
	}
	if err := dialTCP(fmt.Sprintf("%s:%s", p.host.IP, portOf(pod))); err != nil {
		return netip.Addr{}, fmt.Errorf("%w: solver not listening yet: %v", errNotYet, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: p.host.IP.String(), PodIPs: []corev1.PodIP{{IP: p.host.IP.String()}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	if err := s.cl.Status().Update(ctx, pod); err != nil {
		return netip.Addr{}, err
	}
	return p.host.IP, nil
}

func portOf(pod *corev1.Pod) string {
	if v := flagValue(pod.Spec.Containers[0].Args, "listen-port"); v != "" {
		return v
	}
	return "8089"
}

// stop ends a solver and removes its namespace; s.mu is held.
func (s *Solvers) stop(key string, p *solverPod) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.host.Remove()
	delete(s.pods, key)
	if s.t.Failed() {
		b, _ := os.ReadFile(p.log)
		s.t.Logf("solver pod %s log:\n%s", key, b)
	}
}

// endpointSlices writes, for every solver Service, the slice of the running Pods it
// selects, and deletes the slices of Services that are gone.
func (s *Solvers) endpointSlices(ctx context.Context, ready map[string][]corev1.Pod) error {
	var svcs corev1.ServiceList
	if err := s.cl.List(ctx, &svcs, client.HasLabels{solverLabel}); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, svc := range svcs.Items {
		name := svc.Name + "-acmetest"
		want[svc.Namespace+"/"+name] = true
		slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: sliceManager},
		}, AddressType: discoveryv1.AddressTypeIPv4}
		for _, sp := range svc.Spec.Ports {
			slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
				Name: ptr.To(sp.Name), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(sp.TargetPort.IntVal),
			})
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		for _, pod := range ready[svc.Namespace] {
			if len(svc.Spec.Selector) > 0 && sel.Matches(labels.Set(pod.Labels)) {
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{pod.Status.PodIP},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name},
				})
			}
		}
		var cur discoveryv1.EndpointSlice
		err := s.cl.Get(ctx, client.ObjectKeyFromObject(slice), &cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := s.cl.Create(ctx, slice); err != nil {
				return err
			}
		case err != nil:
			return err
		case equality.Semantic.DeepEqual(cur.Endpoints, slice.Endpoints) && equality.Semantic.DeepEqual(cur.Ports, slice.Ports):
			// Unchanged: no write, so the controllers watching slices see no churn.
		default:
			cur.Endpoints, cur.Ports = slice.Endpoints, slice.Ports
			if err := s.cl.Update(ctx, &cur); err != nil {
				return err
			}
		}
	}
	var slices discoveryv1.EndpointSliceList
	if err := s.cl.List(ctx, &slices, client.MatchingLabels{discoveryv1.LabelManagedBy: sliceManager}); err != nil {
		return err
	}
	for i := range slices.Items {
		sl := &slices.Items[i]
		if !want[sl.Namespace+"/"+sl.Name] {
			if err := s.cl.Delete(ctx, sl); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}
