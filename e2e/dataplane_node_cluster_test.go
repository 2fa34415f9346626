package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// dataPlaneImage is the image `snigate controller --provision` writes into the data plane
// Deployments of the provisioned tests; the node runs the test's binary for it.
const dataPlaneImage = "snigate.dev/snigate:e2e"

// dataPlaneNode stands in, for the provisioned e2e tests, for the parts of a cluster that run
// a data plane Pod and send it traffic. Deployments and ReplicaSets are kube-controller-
// manager's own (its rollout, maxSurge and maxUnavailable included); this adds:
//   - the scheduler: it binds each data plane Pod to one pretend node (the API server deletes
//     a Pod bound to no node at once, without its grace period);
//   - the kubelet: it runs the Pod's container as the test's snigate binary with the
//     Deployment's arguments, bound to an address of its own (127.0.88.N, the Pod's IP), probes
//     /readyz on the metrics port every 200 ms as the readiness probe says and reports Running
//     and Ready in the Pod's status; on a graceful deletion it sends SIGTERM, keeps probing,
//     and once the process has exited (SIGKILL at the Pod's grace deadline) removes the Pod;
//   - the load balancer with the endpoints behind it: it listens on 127.0.88.1 at the
//     Gateway's port and sends each new connection, round robin, to a Pod that was Ready and
//     not terminating when it looked at the API server a second earlier (it looks every
//     250 ms; the second is the time endpoints take to reach a load balancer, which the data
//     plane's shutdown grace exists for). It records where each connection went.
//
// Processes live in the host's network namespace: every Pod has its own loopback address, so
// all bind the Gateway's port. Nothing but the test's clients talks to them.
type dataPlaneNode struct {
	t          *testing.T
	cl         client.Client
	ns         string
	port       int    // the Gateway's listener port
	kubeconfig string // what each data plane reaches the API server with

	mu     sync.Mutex
	pods   map[types.UID]*nodePod
	nextIP int

	lb *balancer
}

// nodePod is one data plane process.
type nodePod struct {
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

const nodeName = "e2e-node"

// startDataPlaneNode runs the node until the test ends (then kills what still runs and
// prints the logs of the data planes if the test failed).
func startDataPlaneNode(t *testing.T, cl client.Client, ns string, port int, kubeconfig string) *dataPlaneNode {
	t.Helper()
	n := &dataPlaneNode{t: t, cl: cl, ns: ns, port: port, kubeconfig: kubeconfig,
		pods: map[types.UID]*nodePod{}, nextIP: 10}
	n.lb = startBalancer(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.88.1"), uint16(port)))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.run(ctx) })
	wg.Go(func() { n.lb.watch(ctx, cl, ns) })
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

// Addr is the load balancer's address: what clients of the Gateway dial.
func (n *dataPlaneNode) Addr() string { return n.lb.addr.String() }

func (n *dataPlaneNode) run(ctx context.Context) {
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

func (n *dataPlaneNode) sync(ctx context.Context) error {
	var pods corev1.PodList
	if err := n.cl.List(ctx, &pods, client.InNamespace(n.ns)); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Image != dataPlaneImage {
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

// syncPod runs, stops and reports one Pod; n.mu is held.
func (n *dataPlaneNode) syncPod(ctx context.Context, p *corev1.Pod) error {
	if p.Spec.NodeName == "" {
		return n.cl.SubResource("binding").Create(ctx, p, &corev1.Binding{
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
	if p.Status.Phase == corev1.PodRunning && podIsReady(p) == ready {
		return nil
	}
	return n.writeStatus(ctx, p, lp, ready)
}

// start runs the Pod's container: the Deployment's arguments, and what the Pod's node would
// have given it (its own addresses for every listener, a kubeconfig in place of its
// ServiceAccount's token). Later flags win.
func (n *dataPlaneNode) start(p *corev1.Pod) *nodePod {
	ip := netip.AddrFrom4([4]byte{127, 0, 88, byte(n.nextIP)})
	n.nextIP++
	lp := &nodePod{name: p.Name, ip: ip, exited: make(chan struct{}),
		log: filepath.Join(n.t.TempDir(), p.Name+".log")}
	args := slices.Clone(p.Spec.Containers[0].Args)
	args = append(args, "--kubeconfig", n.kubeconfig, "--bind", ip.String(),
		"--admin", netip.AddrPortFrom(ip, provision.AdminPort).String(),
		"--metrics", netip.AddrPortFrom(ip, provision.MetricsPort).String())
	logf, err := os.Create(lp.log)
	if err != nil {
		lp.startErr = err
		close(lp.exited)
		return lp
	}
	lp.cmd = exec.Command(snigateBin, args...)
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
func (n *dataPlaneNode) writeStatus(ctx context.Context, p *corev1.Pod, lp *nodePod, ready bool) error {
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
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *p.Status.StartTime}},
	}}
	return n.cl.Status().Update(ctx, p)
}

// remove deletes the Pod for good, as a kubelet does once its containers have stopped.
func (n *dataPlaneNode) remove(ctx context.Context, p *corev1.Pod) error {
	err := n.cl.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// stopped is when the data plane of the Pod named name was told to stop (zero: not yet, or
// no such Pod), and whether it needed SIGKILL.
func (n *dataPlaneNode) stopped(name string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.name == name {
			return p.termAt, p.killed
		}
	}
	return time.Time{}, false
}

// ready reports whether the data plane of the Pod named name answers its readiness probe
// now (asked directly, not through the Pod's status).
func (n *dataPlaneNode) ready(name string) bool {
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

// exitsOK checks that every data plane told to stop exited 0 by itself.
func (n *dataPlaneNode) exitsOK(t *testing.T) {
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

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// balancer is the node's load balancer (see dataPlaneNode).
type balancer struct {
	t    *testing.T
	addr netip.AddrPort
	ln   net.Listener

	mu      sync.Mutex
	targets []lbTarget // what it sends to now
	fewest  int        // the fewest targets since trackFewest; -1: not tracking
	next    int
	sent    []lbSent
	conns   []net.Conn
}

type lbTarget struct {
	pod string
	ip  netip.Addr
}

// lbSent is one connection the balancer forwarded: when, from which client address, to
// which Pod (empty: none was ready, the client was closed).
type lbSent struct {
	at     time.Time
	client string
	pod    string
}

// endpointDelay is how long a change of a Pod's readiness takes to reach the balancer.
const endpointDelay = time.Second

func startBalancer(t *testing.T, addr netip.AddrPort) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatalf("load balancer: %v", err)
	}
	b := &balancer{t: t, addr: addr, ln: ln, fewest: -1}
	go b.serve()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			c.Close()
		}
	})
	return b
}

// watch looks at the Pods every 250 ms and applies what it saw endpointDelay later.
func (b *balancer) watch(ctx context.Context, cl client.Client, ns string) {
	type view struct {
		at      time.Time
		targets []lbTarget
	}
	var pending []view
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns)); err == nil {
			var ts []lbTarget
			for _, p := range pods.Items {
				ip, err := netip.ParseAddr(p.Status.PodIP)
				if err == nil && p.DeletionTimestamp == nil && podIsReady(&p) &&
					len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Image == dataPlaneImage {
					ts = append(ts, lbTarget{pod: p.Name, ip: ip})
				}
			}
			slices.SortFunc(ts, func(a, b lbTarget) int { return strings.Compare(a.pod, b.pod) })
			pending = append(pending, view{time.Now(), ts})
		}
		for len(pending) > 0 && time.Since(pending[0].at) >= endpointDelay {
			b.mu.Lock()
			b.targets = pending[0].targets
			if b.fewest >= 0 {
				b.fewest = min(b.fewest, len(b.targets))
			}
			b.mu.Unlock()
			pending = pending[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		rec := lbSent{at: time.Now(), client: c.RemoteAddr().String()}
		var to lbTarget
		if len(b.targets) > 0 {
			to = b.targets[b.next%len(b.targets)]
			b.next++
			rec.pod = to.pod
		}
		b.sent = append(b.sent, rec)
		b.conns = append(b.conns, c)
		b.mu.Unlock()
		if rec.pod == "" {
			c.Close()
			continue
		}
		go b.forward(c, netip.AddrPortFrom(to.ip, b.addr.Port()))
	}
}

// forward relays c to the Pod; a refused connection closes c, as a load balancer without
// retries does.
func (b *balancer) forward(c net.Conn, to netip.AddrPort) {
	up, err := net.DialTimeout("tcp", to.String(), 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	b.mu.Lock()
	b.conns = append(b.conns, up)
	b.mu.Unlock()
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, up)
	c.Close()
	up.Close()
}

// trackFewest starts counting the fewest Pods the balancer could send to; fewestTargets
// returns that count.
func (b *balancer) trackFewest() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fewest = len(b.targets)
}

func (b *balancer) fewestTargets() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fewest
}

// podOf is the Pod the connection from client (its local address) was sent to.
func (b *balancer) podOf(client string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sent {
		if s.client == client {
			return s.pod
		}
	}
	return ""
}

// sentAfter counts the connections sent to pod after t.
func (b *balancer) sentAfter(pod string, t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.sent {
		if s.pod == pod && s.at.After(t) {
			n++
		}
	}
	return n
}

// String summarizes where connections went, for the log.
func (b *balancer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	per := map[string]int{}
	for _, s := range b.sent {
		per[cmp.Or(s.pod, "(none ready)")]++
	}
	var parts []string
	for p, c := range per {
		parts = append(parts, p+": "+strconv.Itoa(c))
	}
	slices.Sort(parts)
	return fmt.Sprintf("%d connections (%s)", len(b.sent), strings.Join(parts, ", "))
}
