package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/dpnode"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// dataPlaneImage is the image `snigate controller --provision` writes into the data plane
// Deployments of the provisioned tests; the node (package dpnode) runs the test's binary for
// it.
const dataPlaneImage = "snigate.dev/snigate:e2e"

// A rollout of provisioned data planes refuses no one and keeps held sessions to the drain
// deadline: kube-controller-manager rolls the Deployment `snigate controller --provision`
// wrote (two replicas, maxSurge 1, maxUnavailable 0) as `kubectl rollout restart` asks, while
// a client makes a new connection every 20 ms through the load balancer, which learns of a
// Pod's deletion a second late. Each old data plane, told to stop, fails its readiness but
// accepts what still reaches it for its shutdown grace, then drains its held sessions to the
// deadline and exits 0.
func TestProvisionedRolloutRefusesNone(t *testing.T) {
	const grace, drain = 2 * time.Second, 4 * time.Second
	p := startProvisioned(t, 2, grace, drain)
	p.startController(t, "--leader-elect=false")
	addr := p.node.Addr(p.port)
	old := p.waitServing(t, 2)
	var pdb policyv1.PodDisruptionBudget
	if err := p.cl.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: p.name}, &pdb); err != nil {
		t.Errorf("the PodDisruptionBudget of a two-replica data plane: %v", err)
	}

	// Held sessions, two on each data plane (the balancer takes turns).
	var held []*heldSession
	for range 4 {
		c := dialEcho(t, addr, "a.example.test", p.ca)
		held = append(held, holdSession(c, p.node.Balancer().PodOf(c.LocalAddr().String())))
	}
	traffic := startLoad(addr, "a.example.test", p.ca)
	time.Sleep(500 * time.Millisecond)
	p.node.Balancer().TrackFewest()

	// kubectl rollout restart.
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: "apps", Name: p.name}
	if err := p.cl.Get(context.Background(), key, &d); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339)
	if err := p.cl.Patch(context.Background(), &d, patch); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubetest.Eventually(t, 2*clusterWait, "two new data planes ready and the old ones gone", func() error {
		pods, err := p.pods()
		if err != nil {
			return err
		}
		var ready int
		for _, pod := range pods {
			if slices.Contains(old, pod.Name) {
				return fmt.Errorf("old data plane %s still there", pod.Name)
			}
			if dpnode.PodIsReady(&pod) {
				ready++
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d new data planes ready", ready)
		}
		return nil
	})
	t.Logf("rollout done in %s", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(dpnode.EndpointDelay + time.Second) // the balancer sends to the new ones only
	ok, failed, first := traffic.stop()
	t.Logf("during the rollout: %d new connections succeeded, %d failed; balancer: %s", ok, failed, p.node.Balancer())
	if failed != 0 {
		t.Errorf("%d new connections failed (first: %v)", failed, first)
	}
	if f := p.node.Balancer().FewestTargets(); f < 2 {
		t.Errorf("the load balancer had %d ready data planes at one point, want 2 all along (maxUnavailable 0)", f)
	}
	// Each old data plane was sent new connections after it was told to stop, and accepted
	// them: its grace at work (the test tests nothing otherwise).
	for _, pod := range old {
		term, _ := p.node.Stopped(pod)
		if term.IsZero() {
			t.Errorf("data plane %s was never told to stop", pod)
			continue
		}
		if n := p.node.Balancer().SentAfter(pod, term); n == 0 {
			t.Errorf("no new connection reached data plane %s after its SIGTERM: the grace went untested", pod)
		} else {
			t.Logf("data plane %s: sent %d new connections after its SIGTERM", pod, n)
		}
	}
	// Held sessions were served through the grace and the drain and closed at its deadline.
	for i, h := range held {
		lastOK, end := h.wait(t, clusterWait)
		term, _ := p.node.Stopped(h.pod)
		if term.IsZero() {
			t.Errorf("held session %d: its data plane %q was never told to stop", i, h.pod)
			continue
		}
		deadline := grace + drain
		t.Logf("held session %d on %s: last echo %.1fs and closed %.1fs after SIGTERM (deadline %s)",
			i, h.pod, lastOK.Sub(term).Seconds(), end.Sub(term).Seconds(), deadline)
		if lastOK.Sub(term) < deadline-time.Second {
			t.Errorf("held session %d: last echo %s after SIGTERM, want until the drain deadline %s", i, lastOK.Sub(term), deadline)
		}
		if e := end.Sub(term); e < deadline-300*time.Millisecond || e > deadline+3*time.Second {
			t.Errorf("held session %d closed %s after SIGTERM, want at the drain deadline %s", i, e, deadline)
		}
	}
	p.node.ExitsOK(t)
}

// Provisioned data planes outlive the control plane's outages with no connection failed:
// the controller killed (a change made meanwhile is served by the data planes, which read
// the API server themselves, and its status written when a controller is back), the API
// server unreachable for a minute from the controller and every data plane, and a leader
// hand-over between two controller replicas. Status catches up with only the writes of
// what changed, and no controller restart rolls the data planes.
func TestProvisionedDataPlanesOutliveOutages(t *testing.T) {
	p := startProvisioned(t, 1, time.Second, 2*time.Second)
	lease := []string{"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms"}
	// With --provision the controller uses controller-runtime's election: one term per
	// process (a lost Lease ends it, and its Pod restarts).
	won := func(rec map[string]any, _ string) bool { return rec["msg"] == "status writer started (leader)" }
	g := p.startController(t, lease...)
	addr := p.node.Addr(p.port)
	pods := p.waitServing(t, 1)
	kubetest.Eventually(t, clusterWait, "route a Accepted", routeAccepted(p.cl, "a"))
	generation := p.deploymentGeneration(t)
	held := dialEcho(t, addr, "a.example.test", p.ca)
	defer held.Close()
	g.settledStatusWrites(t)

	// 1. The controller killed; a route added while none runs.
	traffic := startLoad(addr, "a.example.test", p.ca)
	_ = g.cmd.Process.Kill()
	<-g.exited
	apply(t, p.cl, outageRoute("b"))
	kubetest.Eventually(t, clusterWait, "route b served with no controller running", func() error { return echoOnce(addr, "b.example.test", p.ca) })
	if routeAccepted(p.cl, "b")() == nil {
		t.Errorf("route b Accepted with no controller running")
	}
	g = p.startController(t, lease...)
	g.waitLog(t, "the restarted controller's term", 1, won)
	kubetest.Eventually(t, clusterWait, "route b Accepted by the restarted controller", routeAccepted(p.cl, "b"))
	writes := g.settledStatusWrites(t)
	t.Logf("restarted controller: %v status writes (TLSRoute %v, Gateway %v)", writes,
		g.statusWritesOf(t, "TLSRoute"), g.statusWritesOf(t, "Gateway"))
	// Route b's status, and the Gateway's (its listener's attachedRoutes went 1 -> 2).
	if r, gw := g.statusWritesOf(t, "TLSRoute"), g.statusWritesOf(t, "Gateway"); r != 1 || gw != 1 || writes != 2 {
		t.Errorf("restarted controller wrote %v statuses (TLSRoute %v, Gateway %v), want route b's and the Gateway's", writes, r, gw)
	}
	p.checkLoad(t, "the controller killed", traffic, held)

	// 2. The API server unreachable for a minute, from the controller and the data planes.
	traffic = startLoad(addr, "a.example.test", p.ca)
	p.link.Down()
	down := time.Now()
	var exitedAfter time.Duration // when the controller was seen gone, to the second
	for i := 1; time.Since(down) < time.Minute; i++ {
		time.Sleep(time.Second)
		select {
		case <-g.exited:
			if exitedAfter == 0 {
				exitedAfter = time.Since(down)
			}
		default:
		}
		if i%5 != 0 {
			continue
		}
		if err := roundTrip(held, "during the outage"); err != nil {
			t.Errorf("held session %s into the outage: %v", time.Since(down).Round(time.Second), err)
		}
		for _, pod := range pods {
			if !p.node.Ready(pod) {
				t.Errorf("data plane %s not ready %s into the outage", pod, time.Since(down).Round(time.Second))
			}
		}
	}
	if exitedAfter == 0 {
		t.Errorf("the controller still runs a minute into the outage: it cannot have renewed its Lease")
	} else {
		t.Logf("the controller exited %s into the outage (its Lease lost): %v", exitedAfter.Round(time.Second), g.exitErr)
	}
	p.link.Up()
	g = p.startController(t, lease...) // as its Pod's kubelet does
	g.waitLog(t, "the term after the outage", 1, won)
	if n := g.settledStatusWrites(t); n != 0 {
		t.Errorf("%v status writes after the outage with nothing changed, want 0", n)
	}
	addRoute(t, p.cl, p.ca, addr, "c", "after the outage")
	p.checkLoad(t, "the API server unreachable for "+time.Since(down).Round(time.Second).String(), traffic, held)

	// 3. A leader hand-over: a second replica, then the first stopped as a rollout stops it.
	traffic = startLoad(addr, "a.example.test", p.ca)
	g2 := p.startController(t, lease...)
	time.Sleep(time.Second)
	if n := g2.statusWrites(t); n != 0 {
		t.Errorf("the follower wrote status %v times", n)
	}
	g.stop()
	g2.waitLog(t, "the second replica's term", 1, won)
	if n := g2.settledStatusWrites(t); n != 0 {
		t.Errorf("the new leader wrote status %v times with nothing changed, want 0", n)
	}
	addRoute(t, p.cl, p.ca, addr, "d", "after the hand-over (its status by the new leader)")
	p.checkLoad(t, "the leader hand-over", traffic, held)

	if now := p.deploymentGeneration(t); now != generation {
		t.Errorf("the data plane Deployment went from generation %d to %d: a controller restart rolled the data planes", generation, now)
	}
	now, err := p.pods()
	if err != nil {
		t.Fatal(err)
	}
	if len(now) != len(pods) || now[0].Name != pods[0] {
		t.Errorf("data plane Pods %v at the end, want %v all along", podNames(now), pods)
	}
}

// provisioned is a cluster whose Gateway apps/edge is served by provisioned data planes: the
// API server of echoCluster, kube-controller-manager's Deployment and ReplicaSet
// controllers, and the data plane node. The controllers and data planes reach the API server
// through link.
type provisioned struct {
	cl     client.Client
	ca     *testutil.CA
	node   *dpnode.Node
	port   int // the Gateway's listener port
	link   *testutil.Link
	linked string // an admin's kubeconfig through link
	name   string // of the data plane's Deployment
}

// startProvisioned starts the cluster with the Gateway's data plane asking for replicas and
// for a shutdown grace and drain deadline (annotations).
func startProvisioned(t *testing.T, replicas int, grace, drain time.Duration) *provisioned {
	t.Helper()
	env, cl, ca, port := echoCluster(t)
	kubetest.StartControllerManager(t, env, "deployment-controller", "replicaset-controller")
	link, linked, _ := linkedKubeconfig(t, env)
	// The install's data plane ClusterRole and the binding whose subjects the controller sets.
	kubetest.ApplyFile(t, cl, filepath.Join(kubetest.RepoRoot(t), "config", "rbac", "dataplane.yaml"))
	var gw gwv1.Gateway
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: "edge"}, &gw); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(gw.DeepCopy())
	gw.Annotations = map[string]string{
		provision.ReplicasAnnotation:      strconv.Itoa(replicas),
		provision.ShutdownGraceAnnotation: grace.String(),
		provision.DrainTimeoutAnnotation:  drain.String(),
	}
	if err := cl.Patch(context.Background(), &gw, patch); err != nil {
		t.Fatal(err)
	}
	return &provisioned{cl: cl, ca: ca, link: link, linked: linked, name: provision.Name(&gw),
		port: port,
		node: dpnode.Start(t, dpnode.Config{Client: cl, Namespace: "apps", Ports: []int{port}, Kubeconfig: linked,
			Binary: snigateBin, Image: dataPlaneImage})}
}

// startController runs `snigate controller --provision` with args.
func (p *provisioned) startController(t *testing.T, args ...string) *gateway {
	t.Helper()
	return startSnigate(t, "", append([]string{"controller", "--kubeconfig", p.linked,
		"--provision", "--dataplane-image", dataPlaneImage}, args...)...)
}

// waitServing waits until n data planes are Ready and route a is served through the load
// balancer, and returns the Pods' names.
func (p *provisioned) waitServing(t *testing.T, n int) []string {
	t.Helper()
	var names []string
	kubetest.Eventually(t, clusterWait, fmt.Sprintf("%d data planes ready", n), func() error {
		pods, err := p.pods()
		if err != nil {
			return err
		}
		names = names[:0]
		for _, pod := range pods {
			if dpnode.PodIsReady(&pod) {
				names = append(names, pod.Name)
			}
		}
		if len(names) != n || len(pods) != n {
			return fmt.Errorf("%d of %d data planes ready", len(names), len(pods))
		}
		return nil
	})
	kubetest.Eventually(t, clusterWait, "route a served through the load balancer", func() error {
		return echoOnce(p.node.Addr(p.port), "a.example.test", p.ca)
	})
	// The balancer sends to every one of them.
	time.Sleep(dpnode.EndpointDelay + 500*time.Millisecond)
	return names
}

// pods lists the data plane Pods, by name.
func (p *provisioned) pods() ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := p.cl.List(context.Background(), &pods, client.InNamespace("apps")); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool {
		return len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Image != dataPlaneImage
	})
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

func (p *provisioned) deploymentGeneration(t *testing.T) int64 {
	t.Helper()
	var d appsv1.Deployment
	if err := p.cl.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: p.name}, &d); err != nil {
		t.Fatal(err)
	}
	return d.Generation
}

// checkLoad stops the load of one outage and checks that no connection failed, that the
// loop ran all along (it makes at most loadMax), and that the held session goes on.
func (p *provisioned) checkLoad(t *testing.T, what string, l *load, held *echoConn) {
	t.Helper()
	ok, failed, first := l.stop()
	t.Logf("%s: %d new connections succeeded, %d failed", what, ok, failed)
	if failed != 0 {
		t.Errorf("%s: %d new connections failed (first: %v)", what, failed, first)
	}
	if ok < 50 || ok+failed >= loadMax {
		t.Errorf("%s: %d connections made: the load loop did not run through it", what, ok+failed)
	}
	if err := roundTrip(held, "after "+what); err != nil {
		t.Errorf("held session after %s: %v", what, err)
	}
}

// heldSession echoes a line every 200 ms on a session until it ends (at most 2 minutes).
type heldSession struct {
	pod         string // the data plane it went through
	done        chan struct{}
	lastOK, end time.Time
}

func holdSession(c *echoConn, pod string) *heldSession {
	h := &heldSession{pod: pod, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer c.Close()
		for i := 0; ; i++ {
			if err := roundTrip(c, "held "+strconv.Itoa(i)); err != nil || i >= 600 {
				h.end = time.Now()
				return
			}
			h.lastOK = time.Now()
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return h
}

// wait returns when the session was last echoed and when it ended.
func (h *heldSession) wait(t *testing.T, timeout time.Duration) (lastOK, end time.Time) {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(timeout):
		t.Fatalf("held session on %s still open after %s", h.pod, timeout)
	}
	return h.lastOK, h.end
}
