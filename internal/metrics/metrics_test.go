package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// conditionList is n objects' conditions, in no particular order.
func conditionList(n int) []Condition {
	var list []Condition
	for i := range n {
		ns, name := fmt.Sprintf("t-%04d", (i*7919)%n), fmt.Sprintf("db-%d", i)
		list = append(list,
			Condition{Kind: "DatabaseExposure", Namespace: ns, Name: name, Type: "Programmed", True: i%3 != 0},
			Condition{Kind: "DatabaseExposure", Namespace: ns, Name: name, Type: "Accepted", True: true})
	}
	return list
}

// snigate_object_condition exports each condition its source returns at the scrape, once,
// with its value: a scrape after a change sees the new list.
func TestConditionsExportTheCurrentList(t *testing.T) {
	c := newConditions()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	var current []Condition
	c.From(func() []Condition { return current })
	want := func(list []Condition) string {
		var b strings.Builder
		b.WriteString("# HELP snigate_object_condition Status conditions of the TenantGateways, DatabaseExposures and TrustAnchors: 1 when True, 0 when False or Unknown (the reason is in their status and on the status page).\n# TYPE snigate_object_condition gauge\n")
		for _, x := range list {
			v := 0
			if x.True {
				v = 1
			}
			fmt.Fprintf(&b, "snigate_object_condition{kind=%q,name=%q,namespace=%q,type=%q} %d\n", x.Kind, x.Name, x.Namespace, x.Type, v)
		}
		return b.String()
	}
	for round, n := range []int{50, 50, 7} {
		list := conditionList(n)
		if round == 1 {
			list[0].True = !list[0].True // same objects, one value changed
		}
		current = list
		for scrape := range 2 {
			// testutil sorts the expected text as the registry sorts the families.
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want(list)), "snigate_object_condition"); err != nil {
				t.Fatalf("round %d, scrape %d: %v", round, scrape, err)
			}
		}
	}
}

// BenchmarkConditionsScrape is one scrape of /metrics' conditions at bench/cpscale's
// largest step (10 000 exposures and their tenants: ~30 000 series).
func BenchmarkConditionsScrape(b *testing.B) {
	c := newConditions()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	list := conditionList(15000)
	c.From(func() []Condition { return list })
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
