package cluster

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// The status equalities see every field: a status with every field set equals its deep
// copy, and changing any one field (a value, a pointer to nil, a slice's length) anywhere in
// it makes them differ. A field added to a status type and not to its equality fails here.
func TestStatusEqualSeesEveryField(t *testing.T) {
	checkSeesEveryField(t, equalExposureStatus, (*v1alpha1.DatabaseExposureStatus).DeepCopy)
	checkSeesEveryField(t, equalTenantStatus, (*v1alpha1.TenantGatewayStatus).DeepCopy)
	checkSeesEveryField(t, equalAnchorStatus, (*v1alpha1.TrustAnchorStatus).DeepCopy)
}

func checkSeesEveryField[S any](t *testing.T, equal func(a, b *S) bool, deepCopy func(*S) *S) {
	t.Helper()
	var full S
	fill(reflect.ValueOf(&full).Elem())
	other := deepCopy(&full)
	if !equal(&full, other) {
		t.Fatalf("%T: a status differs from its deep copy", full)
	}
	changes := 0
	eachChange(reflect.ValueOf(other).Elem(), fmt.Sprintf("%T", full), func(path string) {
		changes++
		if equal(&full, other) {
			t.Errorf("%s changed, and the statuses still compare equal", path)
		}
	})
	if !equal(&full, other) {
		t.Fatalf("%T: the changes were not undone", full)
	}
	if changes < 5 {
		t.Fatalf("%T: only %d changes tried", full, changes)
	}
	// An empty slice is no change from none: both are left out of the object's JSON.
	var none, empty S
	if !equal(&none, &empty) {
		t.Fatalf("%T: two zero statuses differ", none)
	}
}

var fillTime = metav1.NewTime(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))

var timeType = reflect.TypeFor[metav1.Time]()

// fill sets every field reachable from v: a slice gets one element, a pointer a value.
func fill(v reflect.Value) {
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(fillTime))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	default:
		panic(fmt.Sprintf("fill: %s", v.Type()))
	}
}

// eachChange changes, one at a time, every value reachable from v, calls check with the
// change in place, and undoes it: leaves get another value, pointers nil, slices another
// element.
func eachChange(v reflect.Value, path string, check func(path string)) {
	swap := func(to reflect.Value, what string) {
		was := reflect.New(v.Type()).Elem()
		was.Set(v)
		v.Set(to)
		check(path + " " + what)
		v.Set(was)
	}
	if v.Type() == timeType {
		swap(reflect.ValueOf(metav1.NewTime(fillTime.Add(time.Second))), "later")
		return
	}
	switch v.Kind() {
	case reflect.String:
		swap(reflect.ValueOf("y").Convert(v.Type()), "to y")
	case reflect.Int, reflect.Int32, reflect.Int64:
		swap(reflect.ValueOf(v.Int()+1).Convert(v.Type()), "plus one")
	case reflect.Bool:
		swap(reflect.ValueOf(!v.Bool()), "negated")
	case reflect.Pointer:
		swap(reflect.Zero(v.Type()), "to nil")
		eachChange(v.Elem(), path, check)
	case reflect.Slice:
		longer := reflect.Append(v, v.Index(0))
		swap(longer, "one element longer")
		eachChange(v.Index(0), path+"[0]", check)
	case reflect.Struct:
		for i := range v.NumField() {
			eachChange(v.Field(i), path+"."+v.Type().Field(i).Name, check)
		}
	default:
		panic(fmt.Sprintf("eachChange: %s", v.Type()))
	}
}
