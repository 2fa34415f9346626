package snapshot

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestHostTablePrecedence(t *testing.T) {
	var tb HostTable[string]
	for _, p := range []string{"a.example.com", "*.example.com", "*.b.example.com", "*.com", ""} {
		if !tb.Add(p, p) {
			t.Fatalf("Add(%q) refused", p)
		}
	}
	if tb.Add("*.example.com", "second") {
		t.Fatal("a second value for a taken pattern must be refused: the first (oldest) wins")
	}
	cases := map[string]string{
		"a.example.com":      "a.example.com",   // exact beats every wildcard
		"x.example.com":      "*.example.com",   // wildcard
		"x.y.example.com":    "*.example.com",   // a wildcard matches several labels
		"x.b.example.com":    "*.b.example.com", // longer suffix beats shorter
		"b.example.com":      "*.example.com",   // *.b.example.com never matches its bare domain
		"example.com":        "*.com",           // *.example.com never matches the bare domain
		"com":                "",                // only the catch-all is left
		"other.org":          "",
		"deep.a.example.com": "*.example.com",
	}
	for name, want := range cases {
		got, ok := tb.Lookup([]byte(name))
		if !ok || got != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestHostTableNoCatchAll(t *testing.T) {
	var tb HostTable[int]
	tb.Add("*.example.com", 1)
	for _, name := range []string{"example.com", "xexample.com", ".example.com", "com", ""} {
		if v, ok := tb.Lookup([]byte(name)); ok {
			t.Errorf("Lookup(%q) = %d, want no match", name, v)
		}
	}
	if v, ok := tb.Lookup([]byte("a.example.com")); !ok || v != 1 {
		t.Errorf("Lookup(a.example.com) = %d, %v", v, ok)
	}
}

func TestNormalizeSNI(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"A.Example.COM", "a.example.com", true},
		{"a.example.com.", "a.example.com", true},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", true},
		{"", "", false},
		{".", "", false},
		{"a b", "", false},
		{"a\x00b", "", false},
		{"ä.example", "", false}, // IDNs arrive as punycode; raw UTF-8 is not a host name
	}
	for _, c := range cases {
		in := []byte(c.in)
		var buf [MaxHostnameLen]byte
		got, ok := NormalizeSNI(buf[:], in)
		if string(in) != c.in {
			t.Errorf("NormalizeSNI modified its input %q", c.in)
		}
		if ok != c.ok || (ok && string(got) != c.want) {
			t.Errorf("NormalizeSNI(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestRoutePick(t *testing.T) {
	r := NewRoute("r", []Backend{
		{Name: "a", Weight: 90, Endpoints: nil, Reason: "BackendNotFound"},
		{Name: "zero", Weight: 0, Reason: ""},
		{Name: "b", Weight: 10, Endpoints: endpoints("127.0.0.1:1")},
	})
	if r.TotalWeight != 100 {
		t.Fatalf("TotalWeight = %d", r.TotalWeight)
	}
	for n := int64(0); n < 100; n++ {
		b := r.Pick(n)
		if n < 90 && b != nil {
			t.Fatalf("Pick(%d) = %s; the invalid backend's share must be rejected", n, b.Name)
		}
		if n >= 90 && (b == nil || b.Name != "b") {
			t.Fatalf("Pick(%d) = %v, want b", n, b)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, size := range []int{1, 100_000} {
		var tb HostTable[*Route]
		r := &Route{Name: "r"}
		for i := 0; i < size; i++ {
			tb.Add(fmt.Sprintf("host-%d.example.com", i), r)
		}
		tb.Add("*.wild.example.com", r)
		exact := []byte(fmt.Sprintf("host-%d.example.com", size-1))
		wild := []byte("a.b.wild.example.com")
		b.Run(fmt.Sprintf("exact/%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tb.Lookup(exact); !ok {
					b.Fatal("miss")
				}
			}
		})
		b.Run(fmt.Sprintf("wildcard/%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tb.Lookup(wild); !ok {
					b.Fatal("miss")
				}
			}
		})
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	var tb HostTable[int]
	tb.Add("a.example.com", 1)
	tb.Add("*.example.com", 2)
	name := []byte("x.y.example.com")
	if n := testing.AllocsPerRun(100, func() { tb.Lookup(name) }); n != 0 {
		t.Fatalf("Lookup allocates %v times", n)
	}
}

func endpoints(s ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, x := range s {
		out = append(out, netip.MustParseAddrPort(x))
	}
	return out
}

func TestRouteHostnames(t *testing.T) {
	l := &Listener{Name: "l"}
	l.Routes.Add("a.test", &Route{})
	l.Routes.Add("*.b.test", &Route{})
	tcp := &Listener{Name: "t", Route: &Route{}}
	p1 := &Port{Address: "127.0.0.1:1", Protocol: ProtocolTLS}
	p1.Listeners.Add("", l)
	p2 := &Port{Address: "127.0.0.1:2", Protocol: ProtocolTCP, TCP: tcp}
	s := New(1, []*Port{p1, p2})
	if n := s.RouteHostnames(); n != 3 {
		t.Fatalf("RouteHostnames = %d, want 3", n)
	}
	var d Description = s.Describe()
	got := 0
	for _, p := range d.Ports {
		for _, l := range p.Listeners {
			got += len(l.Routes)
		}
	}
	if got != 3 {
		t.Fatalf("Describe lists %d routes, RouteHostnames says 3", got)
	}
}

// A reserved table behaves as one that grew.
func TestReserve(t *testing.T) {
	var a, b HostTable[int]
	a.Reserve(2, 1)
	for i, p := range []string{"a.example", "*.example", "b.example", "a.example"} {
		if got, want := a.Add(p, i), b.Add(p, i); got != want {
			t.Fatalf("Add(%q) = %v on the reserved table, %v on the other", p, got, want)
		}
	}
	for _, n := range []string{"a.example", "b.example", "c.example", "example"} {
		va, oka := a.Lookup([]byte(n))
		vb, okb := b.Lookup([]byte(n))
		if va != vb || oka != okb {
			t.Errorf("Lookup(%q) = %d %v on the reserved table, %d %v on the other", n, va, oka, vb, okb)
		}
	}
}

// TestHostTableEdit checks an edited table against one built from scratch with the same
// entries, through several generations of edits (some past the full-copy threshold), and
// that the table it came from is unchanged.
func TestHostTableEdit(t *testing.T) {
	want := map[string]int{}
	var base HostTable[int]
	for i := range 200 {
		p := fmt.Sprintf("h%d.example.com", i)
		if i%10 == 0 {
			p = fmt.Sprintf("*.w%d.example.com", i)
		}
		base.Add(p, i)
		want[p] = i
	}
	base.Add("", -1)
	want[""] = -1
	check := func(tb *HostTable[int], want map[string]int) {
		t.Helper()
		var fresh HostTable[int]
		for p, v := range want {
			fresh.Add(p, v)
		}
		if tb.Len() != fresh.Len() {
			t.Fatalf("Len = %d, want %d", tb.Len(), fresh.Len())
		}
		if got, exp := fmt.Sprint(tb.Entries()), fmt.Sprint(fresh.Entries()); got != exp {
			t.Fatalf("Entries differ:\n got %s\nwant %s", got, exp)
		}
		for i := range 300 {
			for _, name := range []string{fmt.Sprintf("h%d.example.com", i), fmt.Sprintf("x.w%d.example.com", i), "a.b.c.w10.example.com", "other"} {
				g, gok := tb.Lookup([]byte(name))
				w, wok := fresh.Lookup([]byte(name))
				if g != w || gok != wok {
					t.Fatalf("Lookup(%s) = %d, %v; want %d, %v", name, g, gok, w, wok)
				}
			}
		}
	}
	cur := &base
	baseEntries := fmt.Sprint(base.Entries())
	for gen := range 40 {
		next := cur.Edit()
		for j := range 5 {
			n := gen*5 + j
			switch j {
			case 0: // delete an exact name, maybe one already gone
				p := fmt.Sprintf("h%d.example.com", n)
				next.Delete(p)
				delete(want, p)
			case 1: // replace a value
				p := fmt.Sprintf("h%d.example.com", n+1)
				if _, ok := want[p]; ok {
					next.Set(p, 1000+n)
					want[p] = 1000 + n
				}
			case 2: // a new exact name, then deleted again in a later generation
				p := fmt.Sprintf("new%d.example.com", n)
				if !next.Add(p, n) {
					t.Fatalf("Add(%s) refused", p)
				}
				want[p] = n
				old := fmt.Sprintf("new%d.example.com", n-10)
				next.Delete(old)
				delete(want, old)
			case 3: // wildcards, deeper than any before
				p := fmt.Sprintf("*.a.b.w%d.example.com", n)
				next.Set(p, n)
				want[p] = n
				q := fmt.Sprintf("*.w%d.example.com", n-n%10)
				next.Delete(q)
				delete(want, q)
			case 4: // a taken pattern is refused
				for p := range want {
					if next.Add(p, -5) {
						t.Fatalf("Add(%q) accepted a taken pattern", p)
					}
					break
				}
			}
		}
		if gen == 20 {
			next.Delete("")
			delete(want, "")
		}
		check(&next, want)
		cur = &next
	}
	if got := fmt.Sprint(base.Entries()); got != baseEntries {
		t.Fatal("Edit changed the table it came from")
	}
}

// A table Edit copied in full (its changes had grown past an eighth of it) takes a Delete
// of a name of its base: the first change after a full copy.
func TestHostTableDeleteAfterFullCopy(t *testing.T) {
	var base HostTable[int]
	for i := range 100 {
		base.Add(fmt.Sprintf("h%d.example.com", i), i)
	}
	cur := &base
	for gen := 0; ; gen++ {
		next := cur.Edit()
		if next.over == nil && gen > 0 {
			// A full copy: delete a name it holds.
			next.Delete("h99.example.com")
			if _, ok := next.Lookup([]byte("h99.example.com")); ok || next.Len() != 100+gen*10-1 {
				t.Fatalf("after the delete: found %v, Len %d", ok, next.Len())
			}
			return
		}
		for j := range 10 {
			next.Set(fmt.Sprintf("n%d-%d.example.com", gen, j), j)
		}
		cur = &next
		if gen > 100 {
			t.Fatal("Edit never made a full copy")
		}
	}
}
