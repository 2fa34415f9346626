// Package conditions builds the status conditions of snigate's own kinds (TenantGateway,
// DatabaseExposure, TrustAnchor) the way their pure stages need: each render builds the
// conditions anew, and a condition's LastTransitionTime moves only when its status differs
// from the one stored on the object, so that an unchanged status is written as it was.
//
//	var conds []metav1.Condition
//	conditions.Set(&conds, stored.Status.Conditions, metav1.Condition{Type: "Ready",
//		Status: conditions.Status(ok), Reason: reason, Message: msg}, now)
//
// apimachinery's meta.SetStatusCondition keeps the time of the condition already in the
// list it changes; here the list is new on every render and the time to keep is the stored
// object's, hence this small helper.
package conditions

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Set adds c to conds, replacing one of the same type, with LastTransitionTime now(), or the
// one of stored's condition of that type when its status is the same.
func Set(conds *[]metav1.Condition, stored []metav1.Condition, c metav1.Condition, now func() metav1.Time) {
	c.LastTransitionTime = now()
	for _, p := range stored {
		if p.Type == c.Type && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		}
	}
	for i := range *conds {
		if (*conds)[i].Type == c.Type {
			(*conds)[i] = c
			return
		}
	}
	*conds = append(*conds, c)
}

// Status is True for ok, False otherwise.
func Status(ok bool) metav1.ConditionStatus {
	if ok {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}
