package file

import (
	"strconv"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// decodeTLSRoute decodes the JSON of a gateway.networking.k8s.io/v1 TLSRoute without
// reflection, or returns nil. A file of 100 000 hostnames is thousands of TLSRoutes, and
// the strict reflective decode was the largest part of a first load (~20 µs of ~50 µs per
// route on one CPU; 100 000 hostnames must serve within 0.3 s of start, docs/performance.md).
//
// It takes only the fields such routes have (metadata name, namespace, labels and
// annotations; parentRefs, hostnames, rules with name and backendRefs) with plain values:
// strings without escapes, integers in range, no nulls. Anything else — another kind, an
// unknown, duplicate or differently-cased field, any other field, a value of the wrong
// type, JSON it is not sure of — makes it return nil, and the document takes the strict
// reflective decode, which then reports the error. What it returns is what
// sigs.k8s.io/json.UnmarshalStrict returns for the same input (FuzzDecodeTLSRoute
// compares the two).
func decodeTLSRoute(js []byte) *gwv1.TLSRoute {
	// Every string of the route is a piece of one copy of the document: one allocation
	// instead of one per string, for a few hundred bytes more kept per route.
	d := jdec{b: js, s: string(js)}
	r := &gwv1.TLSRoute{}
	d.object(func(key string) bool {
		switch key {
		case "apiVersion":
			r.APIVersion = d.str()
			return r.APIVersion == "gateway.networking.k8s.io/v1"
		case "kind":
			r.Kind = d.str()
			return r.Kind == "TLSRoute"
		case "metadata":
			d.meta(&r.ObjectMeta)
		case "spec":
			d.tlsRouteSpec(&r.Spec)
		default:
			return false
		}
		return true
	})
	d.ws()
	if d.bad || d.i != len(d.b) {
		return nil
	}
	return r
}

// jdec reads JSON; any error or anything it does not handle sets bad, after which every
// method returns zero values.
type jdec struct {
	b   []byte
	s   string // string(b)
	i   int
	bad bool
}

func (d *jdec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c, consuming it if so.
func (d *jdec) next(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling field for each key with the reader at its value; field
// reads the value and reports false for a key it does not take. A key seen twice is bad:
// the strict decode reports duplicates.
func (d *jdec) object(field func(key string) bool) {
	if d.bad || !d.next('{') {
		d.bad = true
		return
	}
	if d.next('}') {
		return
	}
	var seen [8]string
	n := 0
	for !d.bad {
		key := d.str()
		if d.bad || !d.next(':') {
			d.bad = true
			return
		}
		for _, k := range seen[:n] {
			if k == key {
				d.bad = true
				return
			}
		}
		if n == len(seen) {
			d.bad = true
			return
		}
		seen[n] = key
		n++
		if !field(key) {
			d.bad = true
			return
		}
		if d.next(',') {
			continue
		}
		if !d.next('}') {
			d.bad = true
		}
		return
	}
}

// array reads an array, calling elem for each element with the reader at it. It reports
// whether the array was empty.
func (d *jdec) array(elem func()) (empty bool) {
	if d.bad || !d.next('[') {
		d.bad = true
		return false
	}
	if d.next(']') {
		return true
	}
	for !d.bad {
		elem()
		if d.next(',') {
			continue
		}
		if !d.next(']') {
			d.bad = true
		}
		return false
	}
	return false
}

// str reads a string without escapes: one with a backslash, a control character or
// invalid UTF-8 (which encoding/json would replace) is left to the strict decode.
func (d *jdec) str() string {
	if d.bad || !d.next('"') {
		d.bad = true
		return ""
	}
	start := d.i
	ascii := true
	for ; d.i < len(d.b); d.i++ {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.s[start:d.i]
			d.i++
			if !ascii && !utf8.ValidString(s) {
				d.bad = true
				return ""
			}
			return s
		case c == '\\' || c < 0x20:
			d.bad = true
			return ""
		case c >= 0x80:
			ascii = false
		}
	}
	d.bad = true
	return ""
}

// int32 reads an integer that fits int32, written as JSON writes integers.
func (d *jdec) int32() int32 {
	d.ws()
	if d.bad {
		return 0
	}
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	// No digits, a leading zero, or a fraction or exponent after them: not ours.
	if d.i == digits || (d.b[digits] == '0' && d.i-digits > 1) ||
		(d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E')) {
		d.bad = true
		return 0
	}
	n, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 32)
	if err != nil {
		d.bad = true
		return 0
	}
	return int32(n)
}

// stringMap reads an object of strings; like encoding/json, an empty object is an empty
// map, not nil.
func (d *jdec) stringMap() map[string]string {
	m := map[string]string{}
	if d.bad || !d.next('{') {
		d.bad = true
		return nil
	}
	if d.next('}') {
		return m
	}
	for !d.bad {
		k := d.str()
		if !d.next(':') {
			d.bad = true
			return nil
		}
		v := d.str()
		if _, dup := m[k]; dup {
			d.bad = true
			return nil
		}
		m[k] = v
		if d.next(',') {
			continue
		}
		if !d.next('}') {
			d.bad = true
		}
		return m
	}
	return nil
}

func (d *jdec) meta(m *metav1.ObjectMeta) {
	d.object(func(key string) bool {
		switch key {
		case "name":
			m.Name = d.str()
		case "namespace":
			m.Namespace = d.str()
		case "labels":
			m.Labels = d.stringMap()
		case "annotations":
			m.Annotations = d.stringMap()
		default:
			return false
		}
		return true
	})
}

func (d *jdec) tlsRouteSpec(s *gwv1.TLSRouteSpec) {
	d.object(func(key string) bool {
		switch key {
		case "parentRefs":
			if d.array(func() {
				s.ParentRefs = append(s.ParentRefs, gwv1.ParentReference{})
				d.parentRef(&s.ParentRefs[len(s.ParentRefs)-1])
			}) {
				s.ParentRefs = []gwv1.ParentReference{}
			}
		case "hostnames":
			// Collected on the stack, then copied: one allocation for the usual 16.
			var buf [16]gwv1.Hostname
			hs := buf[:0]
			if d.array(func() { hs = append(hs, gwv1.Hostname(d.str())) }) {
				s.Hostnames = []gwv1.Hostname{}
			} else {
				s.Hostnames = append(s.Hostnames, hs...)
			}
		case "rules":
			if d.array(func() {
				s.Rules = append(s.Rules, gwv1.TLSRouteRule{})
				d.tlsRouteRule(&s.Rules[len(s.Rules)-1])
			}) {
				s.Rules = []gwv1.TLSRouteRule{}
			}
		default:
			return false
		}
		return true
	})
}

func (d *jdec) parentRef(p *gwv1.ParentReference) {
	d.object(func(key string) bool {
		switch key {
		case "group":
			p.Group = ptrTo(gwv1.Group(d.str()))
		case "kind":
			p.Kind = ptrTo(gwv1.Kind(d.str()))
		case "namespace":
			p.Namespace = ptrTo(gwv1.Namespace(d.str()))
		case "name":
			p.Name = gwv1.ObjectName(d.str())
		case "sectionName":
			p.SectionName = ptrTo(gwv1.SectionName(d.str()))
		case "port":
			p.Port = ptrTo(gwv1.PortNumber(d.int32()))
		default:
			return false
		}
		return true
	})
}

func (d *jdec) tlsRouteRule(r *gwv1.TLSRouteRule) {
	d.object(func(key string) bool {
		switch key {
		case "name":
			r.Name = ptrTo(gwv1.SectionName(d.str()))
		case "backendRefs":
			if d.array(func() {
				r.BackendRefs = append(r.BackendRefs, gwv1.BackendRef{})
				d.backendRef(&r.BackendRefs[len(r.BackendRefs)-1])
			}) {
				r.BackendRefs = []gwv1.BackendRef{}
			}
		default:
			return false
		}
		return true
	})
}

func (d *jdec) backendRef(b *gwv1.BackendRef) {
	d.object(func(key string) bool {
		switch key {
		case "group":
			b.Group = ptrTo(gwv1.Group(d.str()))
		case "kind":
			b.Kind = ptrTo(gwv1.Kind(d.str()))
		case "name":
			b.Name = gwv1.ObjectName(d.str())
		case "namespace":
			b.Namespace = ptrTo(gwv1.Namespace(d.str()))
		case "port":
			b.Port = ptrTo(gwv1.PortNumber(d.int32()))
		case "weight":
			b.Weight = ptrTo(d.int32())
		default:
			return false
		}
		return true
	})
}

func ptrTo[T any](v T) *T { return &v }
