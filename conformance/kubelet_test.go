//go:build linux

package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubelet stands in for the node components that a bare kube-apiserver lacks: the
// Deployment controller (it creates the Pods of every Deployment), the kubelet (it runs each
// Pod's echo-basic containers as local processes, each Pod in a network namespace of its own,
// and reports the Pod Running and Ready through the status subresource) and the
// EndpointSlice controller (one slice per Service with the ready Pods it selects).
//
// Networking: Pod number i gets the network namespace sgc<run>-<i> and a veth pair with the
// /30 at 10.213.0.0 + 4i: the host end has .1 of that /30, the Pod .2. Nothing is routed
// anywhere else, and the only traffic is the gateway's (on loopback) to these addresses.
// Containers that are not echo-basic (the base manifests' coredns) are not run: their Pod is
// only marked Ready, which is all the suite's readiness check needs.
type kubelet struct {
	cl       client.Client
	echo     string // echo-basic binary
	dir      string // per-Pod files (volumes, logs)
	run      string // netns name prefix, unique per run
	log      *slog.Logger
	poll     time.Duration
	netBase  netip.Addr
	mu       sync.Mutex
	pods     map[string]*localPod // namespace/name
	nextSlot int
	dp       *dataPlanes // the provisioned run's load balancer and data planes; nil otherwise
}

type localPod struct {
	ns, name  string
	slot      int
	netns     string // empty for a data plane, which runs in the host's (provisioned.go)
	ip        netip.Addr
	procs     []*exec.Cmd
	ready     bool
	dataPlane bool
}

const (
	ownerLabel = "conformance.snigate.dev/deployment"
	nodeName   = "snigate-conformance-node"
)

func newKubelet(cl client.Client, echo, dir string, log *slog.Logger) *kubelet {
	return &kubelet{
		cl: cl, echo: echo, dir: dir, log: log, poll: 250 * time.Millisecond,
		run:     fmt.Sprintf("sgc%d", os.Getpid()%100000),
		netBase: netip.MustParseAddr("10.213.0.0"),
		pods:    map[string]*localPod{}, nextSlot: 1,
	}
}

// cleanupStale removes network namespaces left by earlier runs that were killed (they carry
// our sgc prefix; nothing else uses it).
func cleanupStale(log *slog.Logger) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, "sgc") {
			log.Info("removing stale network namespace", "netns", name)
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	}
}

// Run reconciles until ctx is done, then stops every process and removes every namespace.
func (k *kubelet) Run(ctx context.Context) {
	defer k.stopAll()
	t := time.NewTicker(k.poll)
	defer t.Stop()
	for {
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("kubelet sync", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *kubelet) sync(ctx context.Context) error {
	if k.dp != nil {
		busy := map[netip.Addr]bool{}
		k.mu.Lock()
		for _, lp := range k.pods {
			if lp.dataPlane {
				busy[lp.ip] = true
			}
		}
		k.mu.Unlock()
		if err := k.dp.sync(ctx, k.cl, busy, k.log.Info); err != nil {
			return err
		}
	}
	var deps appsv1.DeploymentList
	var pods corev1.PodList
	if err := k.cl.List(ctx, &deps); err != nil {
		return err
	}
	if err := k.cl.List(ctx, &pods); err != nil {
		return err
	}
	// Deployment controller: the right number of Pods per Deployment; Pods of deleted
	// Deployments go (there is no garbage collector either).
	owned := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if d, ok := p.Labels[ownerLabel]; ok {
			owned[p.Namespace+"/"+d] = append(owned[p.Namespace+"/"+d], p)
		}
	}
	live := map[string]bool{}
	for i := range deps.Items {
		d := &deps.Items[i]
		key := d.Namespace + "/" + d.Name
		live[key] = true
		want := int(ptr.Deref(d.Spec.Replicas, 1))
		have := owned[key]
		for n := len(have); n < want; n++ {
			if err := k.createPod(ctx, d); err != nil {
				return err
			}
		}
		for _, p := range have[min(want, len(have)):] {
			k.deletePod(ctx, p)
		}
		k.deploymentStatus(ctx, d, have)
	}
	for key, ps := range owned {
		if !live[key] {
			for _, p := range ps {
				k.deletePod(ctx, p)
			}
		}
	}
	// Kubelet: run what is not running yet; forget Pods that are gone.
	present := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		key := p.Namespace + "/" + p.Name
		present[key] = true
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := k.runPod(ctx, p); err != nil {
			k.log.Info("pod not started yet", "pod", key, "why", err)
		}
	}
	k.mu.Lock()
	var gone []*localPod
	for key, lp := range k.pods {
		if !present[key] {
			gone = append(gone, lp)
			delete(k.pods, key)
		}
	}
	k.mu.Unlock()
	for _, lp := range gone {
		k.stop(lp)
	}
	return k.endpointSlices(ctx)
}

func (k *kubelet) createPod(ctx context.Context, d *appsv1.Deployment) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   d.Namespace,
			Name:        fmt.Sprintf("%s-%s-%s", d.Name, rand.String(10), rand.String(5)),
			Labels:      maps.Clone(d.Spec.Template.Labels),
			Annotations: maps.Clone(d.Spec.Template.Annotations),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true),
			}},
		},
		Spec: *d.Spec.Template.Spec.DeepCopy(),
	}
	// Scheduled to our one pretend node: tests copy spec.nodeName into EndpointSlices,
	// where an empty name is invalid. Pods are deleted with grace period 0, as no kubelet
	// would confirm a graceful deletion.
	p.Spec.NodeName = nodeName
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[ownerLabel] = d.Name
	if err := k.cl.Create(ctx, p); err != nil {
		return fmt.Errorf("creating a Pod for Deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	k.log.Info("pod created", "pod", p.Namespace+"/"+p.Name)
	return nil
}

func (k *kubelet) deletePod(ctx context.Context, p *corev1.Pod) {
	if err := k.cl.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		k.log.Warn("deleting pod", "pod", p.Namespace+"/"+p.Name, "error", err)
	}
}

func (k *kubelet) deploymentStatus(ctx context.Context, d *appsv1.Deployment, pods []*corev1.Pod) {
	ready := int32(0)
	for _, p := range pods {
		if podReady(p) {
			ready++
		}
	}
	st := appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: int32(len(pods)), UpdatedReplicas: int32(len(pods)),
		ReadyReplicas: ready, AvailableReplicas: ready,
	}
	if equality.Semantic.DeepEqual(d.Status, st) {
		return
	}
	d = d.DeepCopy()
	d.Status = st
	_ = k.cl.Status().Update(ctx, d) // informational only; a conflict is retried next pass
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runPod starts a Pod's containers once (in its own network namespace), then marks the Pod
// Ready when its processes listen.
func (k *kubelet) runPod(ctx context.Context, p *corev1.Pod) error {
	key := p.Namespace + "/" + p.Name
	k.mu.Lock()
	lp := k.pods[key]
	k.mu.Unlock()
	if lp != nil && lp.dataPlane {
		// A data plane listens on its load balancer address: when that changes (a static
		// address asked for later), it starts again on the new one. (Without an address,
		// its Service is gone and the Pod follows with its Deployment.)
		if a, err := k.dp.address(p); err == nil && a != lp.ip {
			k.log.Info("data plane address changed: restarting", "pod", key, "was", lp.ip, "now", a)
			k.stop(lp)
			k.mu.Lock()
			delete(k.pods, key)
			k.mu.Unlock()
			lp = nil
		}
	}
	if lp == nil {
		var err error
		if lp, err = k.start(ctx, p); err != nil {
			return err
		}
		k.mu.Lock()
		k.pods[key] = lp
		k.mu.Unlock()
	}
	if !lp.ready {
		switch {
		case lp.dataPlane && !dataPlaneReady(lp.ip):
			return fmt.Errorf("waiting for the data plane on %s to be ready", lp.ip)
		case !lp.dataPlane && len(lp.procs) > 0 && !listening(lp.ip):
			return fmt.Errorf("waiting for %s to listen", lp.ip)
		}
		lp.ready = true
	}
	if podReady(p) && p.Status.PodIP == lp.ip.String() {
		return nil
	}
	now := metav1.Now()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = k.hostIP(lp.slot).String()
	if lp.dataPlane {
		p.Status.HostIP = lp.ip.String() // host network
	}
	p.Status.PodIP = lp.ip.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: lp.ip.String()}}
	p.Status.StartTime = &now
	p.Status.Conditions = nil
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if err := k.cl.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("pod status: %w", err)
	}
	k.log.Info("pod ready", "pod", key, "ip", lp.ip)
	return nil
}

// listening reports whether something accepts connections on ip:3000, echo-basic's default
// port for all its servers.
func listening(ip netip.Addr) bool {
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, 3000).String(), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (k *kubelet) hostIP(slot int) netip.Addr { return k.nth(4*slot + 1) }
func (k *kubelet) podIP(slot int) netip.Addr  { return k.nth(4*slot + 2) }

func (k *kubelet) nth(n int) netip.Addr {
	b := k.netBase.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// start prepares volumes and environment, creates the network namespace and starts the
// echo-basic containers. A missing Secret or ConfigMap is an error: the next pass retries,
// like a kubelet waiting in ContainerCreating.
func (k *kubelet) start(ctx context.Context, p *corev1.Pod) (*localPod, error) {
	podDir := filepath.Join(k.dir, p.Namespace, p.Name)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return nil, err
	}
	mounts := map[string]string{} // volume name -> folder
	for _, v := range p.Spec.Volumes {
		dir := filepath.Join(podDir, "volumes", v.Name)
		files := map[string][]byte{}
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			var s corev1.Secret
			if err := k.cl.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.Secret.SecretName}, &s); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			files, items = s.Data, v.Secret.Items
		case v.ConfigMap != nil:
			var cm corev1.ConfigMap
			if err := k.cl.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.ConfigMap.Name}, &cm); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			for key, val := range cm.Data {
				files[key] = []byte(val)
			}
			maps.Copy(files, cm.BinaryData)
			items = v.ConfigMap.Items
		case v.EmptyDir != nil:
		default:
			return nil, fmt.Errorf("volume %s: unsupported volume source", v.Name)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		paths := map[string]string{}
		for key := range files {
			paths[key] = key
		}
		if items != nil {
			paths = map[string]string{}
			for _, it := range items {
				paths[it.Key] = it.Path
			}
		}
		for key, path := range paths {
			if err := os.WriteFile(filepath.Join(dir, path), files[key], 0o600); err != nil {
				return nil, err
			}
		}
		mounts[v.Name] = dir
	}

	for _, c := range p.Spec.Containers {
		if k.dp.isDataPlane(c) {
			return k.startDataPlane(ctx, p, c, podDir)
		}
	}
	// Slots are never reused: a namespace being torn down may still hold its veth names.
	k.mu.Lock()
	slot := k.nextSlot
	k.nextSlot++
	k.mu.Unlock()
	if slot >= 1<<14 {
		return nil, errors.New("out of Pod address slots in 10.213.0.0/16")
	}
	lp := &localPod{ns: p.Namespace, name: p.Name, slot: slot, netns: fmt.Sprintf("%s-%d", k.run, slot), ip: k.podIP(slot)}
	if err := k.netns(lp); err != nil {
		k.stop(lp)
		return nil, err
	}
	for _, c := range p.Spec.Containers {
		if !strings.Contains(c.Image, "gateway-api/echo-basic") {
			k.log.Info("container not run (not echo-basic); its Pod is only marked Ready", "pod", p.Namespace+"/"+p.Name, "image", c.Image)
			continue
		}
		env := []string{"PATH=/usr/bin:/bin"}
		for _, e := range c.Env {
			val := e.Value
			if e.ValueFrom != nil {
				switch {
				case e.ValueFrom.FieldRef != nil:
					switch e.ValueFrom.FieldRef.FieldPath {
					case "metadata.name":
						val = p.Name
					case "metadata.namespace":
						val = p.Namespace
					case "status.podIP":
						val = lp.ip.String()
					default:
						k.stop(lp)
						return nil, fmt.Errorf("env %s: unsupported fieldRef %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
					}
				default:
					k.stop(lp)
					return nil, fmt.Errorf("env %s: unsupported valueFrom", e.Name)
				}
			}
			// Paths inside a volume mount point into the Pod's folder instead.
			for _, m := range c.VolumeMounts {
				if rest, ok := strings.CutPrefix(val, m.MountPath); ok && (rest == "" || rest[0] == '/') {
					val = mounts[m.Name] + rest
				}
			}
			env = append(env, e.Name+"="+val)
		}
		logf, err := os.Create(filepath.Join(podDir, c.Name+".log"))
		if err != nil {
			k.stop(lp)
			return nil, err
		}
		cmd := exec.Command("ip", append([]string{"netns", "exec", lp.netns, k.echo}, c.Args...)...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			k.stop(lp)
			return nil, fmt.Errorf("starting echo-basic: %w", err)
		}
		go func() { _ = cmd.Wait(); logf.Close() }()
		lp.procs = append(lp.procs, cmd)
	}
	k.log.Info("pod started", "pod", p.Namespace+"/"+p.Name, "netns", lp.netns, "ip", lp.ip, "processes", len(lp.procs))
	return lp, nil
}

// startDataPlane starts a provisioned data-plane Pod (one container) on its Service's load
// balancer address, in the host's network namespace (see dataPlanes).
func (k *kubelet) startDataPlane(ctx context.Context, p *corev1.Pod, c corev1.Container, podDir string) (*localPod, error) {
	if len(p.Spec.Containers) != 1 {
		return nil, fmt.Errorf("a data-plane Pod has %d containers, want 1", len(p.Spec.Containers))
	}
	addr, err := k.dp.address(p)
	if err != nil {
		return nil, err
	}
	cmd, err := k.dp.startDataPlane(p, c, addr, podDir)
	if err != nil {
		return nil, err
	}
	k.log.Info("data plane started", "pod", p.Namespace+"/"+p.Name, "address", addr, "args", c.Args)
	return &localPod{ns: p.Namespace, name: p.Name, ip: addr, procs: []*exec.Cmd{cmd}, dataPlane: true}, nil
}

// netns creates the Pod's network namespace and its veth pair.
func (k *kubelet) netns(lp *localPod) error {
	host := k.hostLink(lp.slot)
	steps := [][]string{
		{"ip", "netns", "add", lp.netns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", lp.netns},
		{"ip", "addr", "add", k.hostIP(lp.slot).String() + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "-n", lp.netns, "addr", "add", lp.ip.String() + "/30", "dev", "eth0"},
		{"ip", "-n", lp.netns, "link", "set", "eth0", "up"},
		{"ip", "-n", lp.netns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// hostLink names the host end of a Pod's veth pair (at most 15 bytes).
func (k *kubelet) hostLink(slot int) string { return fmt.Sprintf("%s-%dh", k.run, slot) }

// stop kills a Pod's processes and removes its namespace (which removes the veth pair).
func (k *kubelet) stop(lp *localPod) {
	for _, c := range lp.procs {
		if c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
	if lp.netns == "" {
		return
	}
	_ = exec.Command("ip", "link", "del", k.hostLink(lp.slot)).Run()
	_ = exec.Command("ip", "netns", "del", lp.netns).Run()
}

func (k *kubelet) stopAll() {
	k.mu.Lock()
	pods := slices.Collect(maps.Values(k.pods))
	k.pods = map[string]*localPod{}
	k.mu.Unlock()
	for _, lp := range pods {
		k.stop(lp)
	}
}

// endpointSlices writes one EndpointSlice per Service with a selector: the ready Pods it
// selects, with each Service port's target port (a named target port is looked up in the
// Pod's container ports).
func (k *kubelet) endpointSlices(ctx context.Context) error {
	var svcs corev1.ServiceList
	var pods corev1.PodList
	var ours discoveryv1.EndpointSliceList
	if err := k.cl.List(ctx, &svcs); err != nil {
		return err
	}
	if err := k.cl.List(ctx, &pods); err != nil {
		return err
	}
	if err := k.cl.List(ctx, &ours, client.MatchingLabels{discoveryv1.LabelManagedBy: "conformance.snigate.dev"}); err != nil {
		return err
	}
	existing := map[string]*discoveryv1.EndpointSlice{}
	for i := range ours.Items {
		existing[ours.Items[i].Namespace+"/"+ours.Items[i].Name] = &ours.Items[i]
	}
	wanted := map[string]bool{}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var selected []*corev1.Pod
		for j := range pods.Items {
			p := &pods.Items[j]
			// A data plane's Pod IP is its load balancer address on loopback, which no
			// EndpointSlice may hold; clients reach it at that address, not through slices.
			if ip, err := netip.ParseAddr(p.Status.PodIP); err != nil || ip.IsLoopback() {
				continue
			}
			if p.Namespace == svc.Namespace && p.DeletionTimestamp == nil && podReady(p) && sel.Matches(labels.Set(p.Labels)) {
				selected = append(selected, p)
			}
		}
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: svc.Namespace, Name: svc.Name + "-local",
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "conformance.snigate.dev"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{},
			Ports:       []discoveryv1.EndpointPort{},
		}
		for _, sp := range svc.Spec.Ports {
			port := sp.TargetPort
			if port.Type == intstr.Int && port.IntVal == 0 {
				port = intstr.FromInt32(sp.Port)
			}
			num := port.IntVal
			if port.Type == intstr.String {
				num = 0
				for _, p := range selected {
					for _, c := range p.Spec.Containers {
						for _, cp := range c.Ports {
							if cp.Name == port.StrVal {
								num = cp.ContainerPort
							}
						}
					}
				}
				if num == 0 {
					continue
				}
			}
			es.Ports = append(es.Ports, discoveryv1.EndpointPort{
				Name: ptr.To(sp.Name), Protocol: ptr.To(sp.Protocol), Port: ptr.To(num), AppProtocol: sp.AppProtocol,
			})
		}
		for _, p := range selected {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{p.Status.PodIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				NodeName:   ptr.To(nodeName),
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			})
		}
		slicesSort(es)
		key := es.Namespace + "/" + es.Name
		wanted[key] = true
		cur := existing[key]
		switch {
		case cur == nil:
			if err := k.cl.Create(ctx, es); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating EndpointSlice %s: %w", key, err)
			}
		case !equality.Semantic.DeepEqual(cur.Endpoints, es.Endpoints) || !equality.Semantic.DeepEqual(cur.Ports, es.Ports):
			cur.Endpoints, cur.Ports = es.Endpoints, es.Ports
			if err := k.cl.Update(ctx, cur); err != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("updating EndpointSlice %s: %w", key, err)
			}
		}
	}
	for key, es := range existing {
		if !wanted[key] {
			_ = k.cl.Delete(ctx, es)
		}
	}
	return nil
}

func slicesSort(es *discoveryv1.EndpointSlice) {
	slices.SortFunc(es.Endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
}
