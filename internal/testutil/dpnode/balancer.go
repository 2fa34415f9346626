package dpnode

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EndpointDelay is how long a change of a Pod's readiness takes to reach the load balancer:
// the time endpoints take to reach a cloud's load balancer, which the data plane's shutdown
// grace exists for.
const EndpointDelay = time.Second

// Balancer is the node's load balancer: it listens at the Gateway's ports and sends each new
// connection, round robin, to a Pod that was Ready and not terminating when it looked at the
// API server EndpointDelay earlier (it looks every 250 ms), at the same port. Every data
// plane Pod is a target, whatever its Gateway: the node serves one Gateway's data planes. It records
// where each connection went; a refused forward closes the client's connection, as a load
// balancer without retries does.
type Balancer struct {
	t     testing.TB
	ip    netip.Addr
	image string
	lns   []net.Listener

	mu      sync.Mutex
	targets []target // what it sends to now
	fewest  int      // the fewest targets since TrackFewest; -1: not tracking
	next    int
	sent    []sent
	conns   []net.Conn
}

type target struct {
	pod string
	ip  netip.Addr
}

// sent is one connection the balancer forwarded: when, from which client address, to
// which Pod (empty: none was ready, the client was closed).
type sent struct {
	at     time.Time
	client string
	pod    string
}

func startBalancer(t testing.TB, ip netip.Addr, ports []int, image string) *Balancer {
	t.Helper()
	b := &Balancer{t: t, ip: ip, image: image, fewest: -1}
	for _, port := range ports {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
		if err != nil {
			t.Fatalf("load balancer: %v", err)
		}
		b.lns = append(b.lns, ln)
		go b.serve(ln, port)
	}
	t.Cleanup(func() {
		for _, ln := range b.lns {
			ln.Close()
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			c.Close()
		}
	})
	return b
}

// watch looks at the Pods every 250 ms and applies what it saw EndpointDelay later; with
// ingress, it gives every LoadBalancer Service without an address its own.
func (b *Balancer) watch(ctx context.Context, cl client.Client, ns string, ingress bool) {
	type view struct {
		at      time.Time
		targets []target
	}
	var pending []view
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns)); err == nil {
			var ts []target
			for _, p := range pods.Items {
				ip, err := netip.ParseAddr(p.Status.PodIP)
				if err == nil && p.DeletionTimestamp == nil && PodIsReady(&p) &&
					len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Image == b.image {
					ts = append(ts, target{pod: p.Name, ip: ip})
				}
			}
			slices.SortFunc(ts, func(a, b target) int { return strings.Compare(a.pod, b.pod) })
			pending = append(pending, view{time.Now(), ts})
		}
		for len(pending) > 0 && time.Since(pending[0].at) >= EndpointDelay {
			b.mu.Lock()
			b.targets = pending[0].targets
			if b.fewest >= 0 {
				b.fewest = min(b.fewest, len(b.targets))
			}
			b.mu.Unlock()
			pending = pending[1:]
		}
		if ingress {
			if err := b.assign(ctx, cl, ns); err != nil && ctx.Err() == nil {
				b.t.Logf("load balancer: %v", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// assign writes the balancer's address into the status of every LoadBalancer Service that
// has none yet.
func (b *Balancer) assign(ctx context.Context, cl client.Client, ns string) error {
	var svcs corev1.ServiceList
	if err := cl.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		return err
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer || len(s.Status.LoadBalancer.Ingress) > 0 {
			continue
		}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: b.ip.String()}}
		if err := cl.Status().Update(ctx, s); err != nil {
			return fmt.Errorf("Service %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

func (b *Balancer) serve(ln net.Listener, port int) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		rec := sent{at: time.Now(), client: c.RemoteAddr().String()}
		var to target
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
		go b.forward(c, netip.AddrPortFrom(to.ip, uint16(port)))
	}
}

// forward relays c to the Pod; a refused connection closes c.
func (b *Balancer) forward(c net.Conn, to netip.AddrPort) {
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

// TrackFewest starts counting the fewest Pods the balancer could send to; FewestTargets
// returns that count.
func (b *Balancer) TrackFewest() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fewest = len(b.targets)
}

// FewestTargets is the fewest Pods the balancer could send to since TrackFewest.
func (b *Balancer) FewestTargets() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fewest
}

// PodOf is the Pod the connection from client (its local address) was sent to.
func (b *Balancer) PodOf(client string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sent {
		if s.client == client {
			return s.pod
		}
	}
	return ""
}

// SentAfter counts the connections sent to pod after t.
func (b *Balancer) SentAfter(pod string, t time.Time) int {
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
func (b *Balancer) String() string {
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
