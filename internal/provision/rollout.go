package provision

import (
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// How a data plane Pod stops, set per Gateway by annotation. A Pod told to stop (a rollout,
// a node drain, a scale-down) first fails its readiness while it still accepts connections,
// for ShutdownGraceAnnotation (the load balancer and the endpoints take that long to stop
// sending to it), then stops accepting and gives open connections DrainTimeoutAnnotation
// to finish. Its terminationGracePeriodSeconds covers both, so the kubelet never kills it
// mid-drain.
const (
	ShutdownGraceAnnotation = "snigate.dev/shutdown-grace"
	DrainTimeoutAnnotation  = "snigate.dev/drain-timeout"

	DefaultShutdownGrace = 5 * time.Second
	DefaultDrainTimeout  = 30 * time.Second
	// maxStop bounds either annotation: a Pod that may take longer than an hour to stop
	// holds a rollout for that long.
	maxStop = time.Hour
	// killMargin is added to grace and drain in terminationGracePeriodSeconds: the process
	// needs a moment after its drain deadline to close what is left and exit.
	killMargin = 5 * time.Second
)

// Stop is how gw's data plane Pods stop: the readiness grace and the drain deadline.
type Stop struct{ Grace, Drain time.Duration }

// Stopping reads gw's annotations; an invalid one gives its default and an error saying so.
func Stopping(gw *gwv1.Gateway) (Stop, error) {
	s := Stop{Grace: DefaultShutdownGrace, Drain: DefaultDrainTimeout}
	var errs []string
	for _, a := range []struct {
		name string
		to   *time.Duration
	}{{ShutdownGraceAnnotation, &s.Grace}, {DrainTimeoutAnnotation, &s.Drain}} {
		v, ok := gw.Annotations[a.name]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 || d > maxStop {
			errs = append(errs, fmt.Sprintf("annotation %s: %q is not a duration between 0s and %s (using %s)", a.name, v, maxStop, *a.to))
			continue
		}
		*a.to = d
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return s, nil
}

// terminationGracePeriodSeconds is the kubelet's deadline for a Pod stopping as s says.
func (s Stop) terminationGracePeriodSeconds() int64 {
	return int64(math.Ceil((s.Grace + s.Drain + killMargin).Seconds()))
}

// args are the data plane's flags for s.
func (s Stop) args() []string {
	return []string{"--shutdown-grace=" + s.Grace.String(), "--drain-timeout=" + s.Drain.String()}
}

// rollingUpdate never takes a data plane away before its replacement is ready: one more Pod
// at a time, none unavailable.
func rollingUpdate() *appsv1ac.DeploymentStrategyApplyConfiguration {
	return appsv1ac.DeploymentStrategy().WithType("RollingUpdate").
		WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
			WithMaxUnavailable(intstr.FromInt32(0)).WithMaxSurge(intstr.FromInt32(1)))
}

// PodDisruptionBudget keeps all but one of gw's data plane Pods through voluntary
// disruptions (node drains), for a Gateway with several replicas; nil for one replica or
// none, where a budget would block every node drain.
func PodDisruptionBudget(gw *gwv1.Gateway, replicas int32) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	if replicas < 2 {
		return nil
	}
	return policyv1ac.PodDisruptionBudget(Name(gw), gw.Namespace).
		WithLabels(objectLabels(gw)).WithAnnotations(objectAnnotations(gw)).
		WithOwnerReferences(ownerRef(gw)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(gw))))
}
