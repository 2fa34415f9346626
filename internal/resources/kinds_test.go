package resources

import (
	"reflect"
	"testing"
)

// Every object field of Resources belongs to exactly one kind, and each kind's functions
// agree on its type: a field added without its entry in Kinds, or an entry pointing at the
// wrong field, fails here rather than as a kind that a stage silently skips.
func TestKindsCoverResources(t *testing.T) {
	rt := reflect.TypeOf(Resources{})
	owner := map[string]string{} // field name -> kind
	for _, k := range Kinds {
		var r Resources
		obj := k.New()
		obj.SetName("x")
		k.Add(&r, obj)
		found := ""
		rv := reflect.ValueOf(r)
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			if f.Type.Kind() == reflect.Slice && rv.Field(i).Len() > 0 {
				if found != "" {
					t.Errorf("%s: Add filled %s and %s", k.Name, found, f.Name)
				}
				found = f.Name
			}
		}
		if found == "" {
			t.Errorf("%s: Add filled no field", k.Name)
			continue
		}
		if prev, dup := owner[found]; dup {
			t.Errorf("field %s belongs to %s and %s", found, prev, k.Name)
		}
		owner[found] = k.Name
		if got := k.Objects(&r); len(got) != 1 || got[0] != obj {
			t.Errorf("%s: Objects = %v after Add", k.Name, got)
		}

		// A list of the kind's NewList type becomes the objects, items by pointer.
		list := k.NewList()
		items := reflect.ValueOf(list).Elem().FieldByName("Items")
		if !items.IsValid() || items.Type().Elem() != reflect.TypeOf(obj).Elem() {
			t.Errorf("%s: NewList is %T, whose items are not %T", k.Name, list, obj)
			continue
		}
		items.Set(reflect.Append(items, reflect.ValueOf(obj).Elem()))
		var fromList Resources
		if err := k.SetList(&fromList, list); err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		if got := k.Objects(&fromList); len(got) != 1 || got[0].GetName() != "x" {
			t.Errorf("%s: SetList gave %v", k.Name, got)
		}
		if len(k.Versions) == 0 {
			t.Errorf("%s: no versions", k.Name)
		}
		if KindOf(k.Group, k.Name) == nil {
			t.Errorf("%s: KindOf(%q, %q) = nil", k.Name, k.Group, k.Name)
		}
	}
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if f.Type.Kind() == reflect.Slice && owner[f.Name] == "" {
			t.Errorf("Resources.%s belongs to no kind in Kinds", f.Name)
		}
	}
}

// Reversed reverses every kind and keeps the rest.
func TestReversed(t *testing.T) {
	var r Resources
	r.Origins = map[string]string{"a": "b"}
	for _, k := range Kinds {
		for _, name := range []string{"1", "2", "3"} {
			o := k.New()
			o.SetName(name)
			k.Add(&r, o)
		}
	}
	rev := Reversed(&r)
	if rev.Origins["a"] != "b" {
		t.Error("Origins not kept")
	}
	for _, k := range Kinds {
		got := k.Objects(rev)
		if len(got) != 3 || got[0].GetName() != "3" || got[2].GetName() != "1" {
			t.Errorf("%s not reversed", k.Name)
		}
		if k.Objects(&r)[0].GetName() != "1" {
			t.Errorf("%s: the input was changed", k.Name)
		}
	}
}
