package cluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestMergeConditionsKeepsTransitionTime(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	cur := []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1, LastTransitionTime: t0},
		{Type: "Programmed", Status: metav1.ConditionFalse, Reason: "Invalid", ObservedGeneration: 1, LastTransitionTime: t0},
	}
	want := []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 2, LastTransitionTime: t1},
		{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed", ObservedGeneration: 2, LastTransitionTime: t1},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", ObservedGeneration: 2, LastTransitionTime: t1},
	}
	got := mergeConditions(cur, want)
	for i, wantTime := range []metav1.Time{t0, t1, t1} {
		if !got[i].LastTransitionTime.Equal(&wantTime) {
			t.Errorf("%s: lastTransitionTime %v, want %v", got[i].Type, got[i].LastTransitionTime, wantTime)
		}
		if got[i].ObservedGeneration != 2 {
			t.Errorf("%s: observedGeneration %d, want 2", got[i].Type, got[i].ObservedGeneration)
		}
	}
	if !want[0].LastTransitionTime.Equal(&t1) {
		t.Error("mergeConditions modified its input")
	}
}

func TestMergeRouteStatusKeepsOtherControllers(t *testing.T) {
	const ours, theirs = gwv1.GatewayController("snigate.dev/gateway-controller"), gwv1.GatewayController("example.com/other")
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	ref := func(name string) gwv1.ParentReference {
		g, k := gwv1.Group(gwv1.GroupName), gwv1.Kind("Gateway")
		return gwv1.ParentReference{Group: &g, Kind: &k, Name: gwv1.ObjectName(name)}
	}
	accepted := func(t metav1.Time) []metav1.Condition {
		return []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: t}}
	}
	cur := &gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{
		{ParentRef: ref("a"), ControllerName: ours, Conditions: accepted(t0)},
		{ParentRef: ref("x"), ControllerName: theirs, Conditions: accepted(t0)},
		{ParentRef: ref("gone"), ControllerName: ours, Conditions: accepted(t0)},
	}}
	want := &gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{
		{ParentRef: ref("a"), ControllerName: ours, Conditions: accepted(t1)},
		{ParentRef: ref("b"), ControllerName: ours, Conditions: accepted(t1)},
	}}
	got := mergeRouteStatus(cur, want, ours)
	var names []string
	for _, p := range got.Parents {
		names = append(names, string(p.ControllerName)+"/"+string(p.ParentRef.Name))
	}
	if len(got.Parents) != 3 || names[0] != string(theirs)+"/x" || names[1] != string(ours)+"/a" || names[2] != string(ours)+"/b" {
		t.Fatalf("parents %v, want theirs/x, ours/a, ours/b", names)
	}
	if lt := got.Parents[1].Conditions[0].LastTransitionTime; !lt.Equal(&t0) {
		t.Errorf("unchanged condition of parent a moved to %v", lt)
	}
	if lt := got.Parents[2].Conditions[0].LastTransitionTime; !lt.Equal(&t1) {
		t.Errorf("new parent b: %v, want %v", lt, t1)
	}
	if none := mergeRouteStatus(cur, nil, ours); len(none.Parents) != 1 || none.Parents[0].ControllerName != theirs {
		t.Errorf("without desired status: %+v, want only the other controller's parent", none.Parents)
	}
}
