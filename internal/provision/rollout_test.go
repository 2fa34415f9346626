package provision

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The annotations set the grace and the drain; an invalid one keeps its default and says so.
func TestStopping(t *testing.T) {
	for _, c := range []struct {
		grace, drain string
		want         Stop
		err          bool
	}{
		{"", "", Stop{DefaultShutdownGrace, DefaultDrainTimeout}, false},
		{"10s", "2m", Stop{10 * time.Second, 2 * time.Minute}, false},
		{"0s", " 1s ", Stop{0, time.Second}, false},
		{"-1s", "5s", Stop{DefaultShutdownGrace, 5 * time.Second}, true},
		{"3s", "2h", Stop{3 * time.Second, DefaultDrainTimeout}, true},
		{"soon", "", Stop{DefaultShutdownGrace, DefaultDrainTimeout}, true},
	} {
		gw := gateway("edge")
		gw.Annotations = map[string]string{}
		if c.grace != "" {
			gw.Annotations[ShutdownGraceAnnotation] = c.grace
		}
		if c.drain != "" {
			gw.Annotations[DrainTimeoutAnnotation] = c.drain
		}
		got, err := Stopping(gw)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("grace %q drain %q: %+v, %v; want %+v, error %v", c.grace, c.drain, got, err, c.want, c.err)
		}
	}
}

// The Deployment rolls one Pod at a time with none unavailable, passes the grace and the
// drain to the data plane, and gives the kubelet a deadline past both.
func TestDeploymentStops(t *testing.T) {
	d := Deployment(gateway("edge", 5432), "snigate:test", corev1.PullIfNotPresent, 2, Stop{Grace: 7 * time.Second, Drain: 40500 * time.Millisecond})
	s := d.Spec.Strategy
	if s == nil || *s.Type != "RollingUpdate" || s.RollingUpdate.MaxUnavailable.IntValue() != 0 || s.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v, want RollingUpdate maxUnavailable 0 maxSurge 1", s)
	}
	pod := d.Spec.Template.Spec
	if g := *pod.TerminationGracePeriodSeconds; g != 53 { // 7 + 40.5 + 5, rounded up
		t.Errorf("terminationGracePeriodSeconds %d, want 53", g)
	}
	args := pod.Containers[0].Args
	for _, want := range []string{"--shutdown-grace=7s", "--drain-timeout=40.5s"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
}

// A budget only for several replicas: with one it would block every node drain.
func TestPodDisruptionBudget(t *testing.T) {
	gw := gateway("edge", 5432)
	for _, n := range []int32{0, 1} {
		if PodDisruptionBudget(gw, n) != nil {
			t.Errorf("a budget for %d replicas", n)
		}
	}
	pdb := PodDisruptionBudget(gw, 3)
	if pdb == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || *pdb.Name != Name(gw) {
		t.Fatalf("budget for 3 replicas: %+v", pdb)
	}
	if sel := pdb.Spec.Selector.MatchLabels; len(sel) == 0 || !maps.Equal(sel, selectorLabels(gw)) {
		t.Errorf("selector %v, want the Pods' %v", sel, selectorLabels(gw))
	}
	if len(pdb.OwnerReferences) != 1 || *pdb.OwnerReferences[0].Name != "edge" {
		t.Errorf("owner %+v, want the Gateway", pdb.OwnerReferences)
	}
}
