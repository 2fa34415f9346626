// Package dpnode stands in, for tests and benchmarks on a real API server without a kubelet,
// for the parts of a cluster that run `snigate controller --provision`'s data plane Pods and
// send them traffic. Deployments and ReplicaSets stay kube-controller-manager's own (its
// rollout, maxSurge and maxUnavailable included); a Node adds:
//
//   - the scheduler: it binds each data plane Pod to one pretend node (the API server deletes
//     a Pod bound to no node at once, without its grace period);
//   - the kubelet: it runs the Pod's container as the given snigate binary with the
//     Deployment's arguments, bound to an address of its own (127.0.88.N, the Pod's IP),
//     probes /readyz on the metrics port every 200 ms as the readiness probe says and reports
//     Running and Ready in the Pod's status; on a graceful deletion it sends SIGTERM, keeps
//     probing, and once the process has exited (SIGKILL at the Pod's grace deadline) removes
//     the Pod;
//   - the load balancer with the endpoints behind it (balancer.go): it listens on 127.0.88.1
//     at the Gateway's ports and sends each new connection, round robin, to a Pod that was
//     Ready and not terminating when it looked at the API server a second earlier; with
//     Config.AssignIngress it also fills each LoadBalancer Service's status.loadBalancer with
//     its address, as a cloud's load balancer controller does.
//
// Why by hand: no library runs Pods without a container runtime, and kind or k3s would need
// images and privileges CI does not have. Processes live in the host's network namespace:
// every Pod has its own loopback address, so all bind the Gateway's ports. Nothing but the
// test's clients talks to them.
//
//	n := dpnode.Start(t, dpnode.Config{Client: cl, Ports: []int{port}, Kubeconfig: kc,
//		Binary: bin, Image: "snigate.dev/snigate:e2e"})
//	addr := n.Addr(port) // what clients of the Gateway dial
package dpnode

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/testutil"
)

// Config configures a Node.
type Config struct {
	// Client is an admin's: the node lists and writes Pods and Services with it.
	Client client.Client
	// Namespace holds the data plane Pods ("": every namespace).
	Namespace string
	// Ports are the Gateway listeners' ports the load balancer forwards.
	Ports []int
	// Kubeconfig is what each data plane reaches the API server with.
	Kubeconfig string
	// Binary is the snigate binary a Pod of Image runs.
	Binary string
	// Image marks the data plane Pods (`snigate controller --dataplane-image`).
	Image string
	// LogDir keeps the data planes' logs ("": a temporary folder of the test).
	LogDir string
	// AssignIngress fills every LoadBalancer Service's status.loadBalancer.ingress with
	// the load balancer's address, so that the Gateway reports it.
	AssignIngress bool
}

// Node runs data plane Pods until the test ends (see the package doc).
type Node struct {
	t   testing.TB
	cfg Config

	mu     sync.Mutex
	pods   map[types.UID]*pod
	nextIP int

	lb *Balancer
}

// pod is one data plane process.
type pod struct {
	name     string
	ip       netip.Addr
	cmd      *exec.Cmd
	log      string
	exited   chan struct{}
	exitErr  error
	termAt   time.Time // when SIGTERM was sent; zero before
	killed   bool      // SIGKILL at the grace deadline
	crashed  bool      // failed to start, or exited before it was told to stop (reported once)
	removed  bool      // its Pod deleted after the exit
	startErr error
}

const nodeName = "snigate-test-node"

// balancerIP is the load balancer's address; the Pods get 127.0.88.10 and up.
var balancerIP = netip.MustParseAddr("127.0.88.1")

// Start runs the node until the test ends (then kills what still runs and prints the logs
// of the data planes if the test failed).
func Start(t testing.TB, cfg Config) *Node {
	t.Helper()
	if cfg.LogDir == "" {
		cfg.LogDir = t.TempDir()
	}
	n := &Node{t: t, cfg: cfg, pods: map[types.UID]*pod{}, nextIP: 10}
	n.lb = startBalancer(t, balancerIP, cfg.Ports, cfg.Image)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.run(ctx) })
	wg.Go(func() { n.lb.watch(ctx, cfg.Client, cfg.Namespace, cfg.AssignIngress) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, p := range n.pods {
			if p.cmd != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
			if t.Failed() {
				b, _ := os.ReadFile(p.log)
				t.Logf("--- data plane %s (%s) ---\n%s", p.name, p.ip, b)
			}
		}
	})
	return n
}

// Addr is the load balancer's address at port: what clients of the Gateway dial.
func (n *Node) Addr(port int) string {
	return netip.AddrPortFrom(balancerIP, uint16(port)).String()
}

// Balancer is the node's load balancer, for tests that ask where connections went.
func (n *Node) Balancer() *Balancer { return n.lb }

func (n *Node) run(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := n.sync(ctx); err != nil && ctx.Err() == nil {
			n.t.Logf("node: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) sync(ctx context.Context) error {
	var pods corev1.PodList
	if err := n.cfg.Client.List(ctx, &pods, client.InNamespace(n.cfg.Namespace)); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !n.ours(p) {
			continue
		}
		n.mu.Lock()
		err := n.syncPod(ctx, p)
		n.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			n.t.Logf("node: pod %s: %v", p.Name, err)
		}
	}
	return nil
}

// ours says whether p is a data plane Pod: one container, of Config.Image.
func (n *Node) ours(p *corev1.Pod) bool {
	return len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Image == n.cfg.Image
}

// syncPod runs, stops and reports one Pod; n.mu is held.
func (n *Node) syncPod(ctx context.Context, p *corev1.Pod) error {
	if p.Spec.NodeName == "" {
		return n.cfg.Client.SubResource("binding").Create(ctx, p, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
		})
	}
	lp := n.pods[p.UID]
	if lp == nil && p.DeletionTimestamp == nil {
		lp = n.start(p)
		n.pods[p.UID] = lp
	}
	if lp == nil || lp.startErr != nil { // deleted before it ran, or never ran: nothing to wait for
		if lp != nil && lp.startErr != nil && !lp.crashed {
			lp.crashed = true // reported once
			n.t.Errorf("data plane pod %s: %v", p.Name, lp.startErr)
		}
		if p.DeletionTimestamp != nil {
			return n.remove(ctx, p)
		}
		return nil
	}
	exited := false
	select {
	case <-lp.exited:
		exited = true
	default:
	}
	if p.DeletionTimestamp != nil {
		switch {
		case exited:
			if !lp.removed {
				lp.removed = true
				n.t.Logf("node: data plane %s exited %.1fs after SIGTERM (%v); removing its Pod", p.Name, time.Since(lp.termAt).Seconds(), lp.exitErr)
				return n.remove(ctx, p)
			}
			return nil
		case lp.termAt.IsZero():
			lp.termAt = time.Now()
			n.t.Logf("node: data plane %s (%s) deleted: SIGTERM", p.Name, lp.ip)
			_ = lp.cmd.Process.Signal(syscall.SIGTERM)
		case !lp.killed && time.Now().After(p.DeletionTimestamp.Time):
			lp.killed = true
			n.t.Errorf("data plane %s still running at its grace deadline: SIGKILL", p.Name)
			_ = lp.cmd.Process.Kill()
		}
	} else if exited && !lp.crashed {
		lp.crashed = true
		n.t.Errorf("data plane %s exited without being told to stop: %v", p.Name, lp.exitErr)
	}
	ready := !exited && probeReady(lp.ip)
	if p.Status.Phase == corev1.PodRunning && PodIsReady(p) == ready {
		return nil
	}
	return n.writeStatus(ctx, p, lp, ready)
}

// start runs the Pod's container: the Deployment's arguments, and what the Pod's node would
// have given it (its own addresses for every listener, a kubeconfig in place of its
// ServiceAccount's token). Later flags win.
func (n *Node) start(p *corev1.Pod) *pod {
	ip := netip.AddrFrom4([4]byte{127, 0, 88, byte(n.nextIP)})
	n.nextIP++
	lp := &pod{name: p.Name, ip: ip, exited: make(chan struct{}),
		log: filepath.Join(n.cfg.LogDir, p.Name+".log")}
	args := slices.Clone(p.Spec.Containers[0].Args)
	args = append(args, "--kubeconfig", n.cfg.Kubeconfig, "--bind", ip.String(),
		"--admin", netip.AddrPortFrom(ip, provision.AdminPort).String(),
		"--metrics", netip.AddrPortFrom(ip, provision.MetricsPort).String())
	logf, err := os.Create(lp.log)
	if err != nil {
		lp.startErr = err
		close(lp.exited)
		return lp
	}
	lp.cmd = exec.Command(n.cfg.Binary, args...)
	lp.cmd.Env = append(testutil.CleanEnv(), "POD_NAMESPACE="+p.Namespace, "POD_NAME="+p.Name)
	lp.cmd.Stdout, lp.cmd.Stderr = logf, logf
	lp.cmd.SysProcAttr = &syscall.SysProcAttr{}
	testutil.DieWithParent(lp.cmd.SysProcAttr)
	if err := lp.cmd.Start(); err != nil {
		logf.Close()
		lp.startErr = err
		close(lp.exited)
		return lp
	}
	go func() {
		lp.exitErr = lp.cmd.Wait()
		logf.Close()
		close(lp.exited)
	}()
	n.t.Logf("node: data plane %s started on %s (pid %d)", p.Name, ip, lp.cmd.Process.Pid)
	return lp
}

// writeStatus reports the Pod Running on its address, Ready or not.
func (n *Node) writeStatus(ctx context.Context, p *corev1.Pod, lp *pod, ready bool) error {
	p = p.DeepCopy()
	now := metav1.Now()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP, p.Status.PodIP = lp.ip.String(), lp.ip.String()
	p.Status.HostIPs, p.Status.PodIPs = []corev1.HostIP{{IP: lp.ip.String()}}, []corev1.PodIP{{IP: lp.ip.String()}}
	if p.Status.StartTime == nil {
		p.Status.StartTime = &now
	}
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
	}
	c := p.Spec.Containers[0]
	started := true
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: &started,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *p.Status.StartTime}},
	}}
	return n.cfg.Client.Status().Update(ctx, p)
}

// remove deletes the Pod for good, as a kubelet does once its containers have stopped.
func (n *Node) remove(ctx context.Context, p *corev1.Pod) error {
	err := n.cfg.Client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Stopped is when the data plane of the Pod named name was told to stop (zero: not yet, or
// no such Pod), and whether it needed SIGKILL.
func (n *Node) Stopped(name string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.name == name {
			return p.termAt, p.killed
		}
	}
	return time.Time{}, false
}

// Ready reports whether the data plane of the Pod named name answers its readiness probe
// now (asked directly, not through the Pod's status).
func (n *Node) Ready(name string) bool {
	var ip netip.Addr
	n.mu.Lock()
	for _, p := range n.pods {
		if p.name == name {
			ip = p.ip
		}
	}
	n.mu.Unlock()
	return ip.IsValid() && probeReady(ip)
}

// PIDs are the process IDs of the data planes running now, for measuring them.
func (n *Node) PIDs() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var pids []int
	for _, p := range n.pods {
		select {
		case <-p.exited:
		default:
			if p.cmd != nil && p.cmd.Process != nil {
				pids = append(pids, p.cmd.Process.Pid)
			}
		}
	}
	slices.Sort(pids)
	return pids
}

// ExitsOK checks that every data plane told to stop exited 0 by itself.
func (n *Node) ExitsOK(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.termAt.IsZero() {
			continue
		}
		select {
		case <-p.exited:
			if p.exitErr != nil || p.killed {
				t.Errorf("data plane %s: exit %v (killed: %v), want exit 0 by itself", p.name, p.exitErr, p.killed)
			}
		default:
			t.Errorf("data plane %s still running", p.name)
		}
		if b, _ := os.ReadFile(p.log); bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			t.Errorf("the race detector reported a data race in data plane %s", p.name)
		}
	}
}

// probeReady is the Pod's readiness probe: /readyz on its metrics port.
func probeReady(ip netip.Addr) bool {
	return testutil.Ready(netip.AddrPortFrom(ip, provision.MetricsPort))
}

// PodIsReady says whether p's status says Ready.
func PodIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
