package conditions

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSetKeepsTheStoredTimeOfAnUnchangedStatus(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Hour))
	stored := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: then}}
	var conds []metav1.Condition
	Set(&conds, stored, metav1.Condition{Type: "Ready", Status: Status(true), Reason: "A"}, func() metav1.Time { return now })
	Set(&conds, stored, metav1.Condition{Type: "Accepted", Status: Status(false), Reason: "B"}, func() metav1.Time { return now })
	if len(conds) != 2 || !conds[0].LastTransitionTime.Equal(&then) || !conds[1].LastTransitionTime.Equal(&now) {
		t.Fatalf("conditions %+v", conds)
	}
	// Replaced, not appended; a changed status takes now.
	Set(&conds, stored, metav1.Condition{Type: "Ready", Status: Status(false), Reason: "C"}, func() metav1.Time { return now })
	if len(conds) != 2 || conds[0].Reason != "C" || !conds[0].LastTransitionTime.Equal(&now) {
		t.Fatalf("conditions %+v", conds)
	}
}
