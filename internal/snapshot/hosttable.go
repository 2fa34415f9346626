package snapshot

import (
	"sort"
	"strings"
)

// HostTable maps hostnames to values with Gateway API precedence: an exact name beats any
// wildcard, a longer wildcard suffix beats a shorter one, and any wildcard beats the
// catch-all entry (a listener without hostname). A wildcard "*.example.com" matches one or
// more labels in front of "example.com" and never "example.com" itself.
//
// A HostTable is built with Add and then only read. Its zero value is an empty table. Edit
// derives a changed copy that shares the unchanged entries, so that a new snapshot after a
// one-route change does not copy a table of 100 000 names: such a change must apply within
// 50 ms (docs/performance.md, route scale).
type HostTable[T any] struct {
	exact map[string]T
	// wild is keyed by the wildcard's suffix including the leading dot: ".example.com".
	wild   map[string]T
	any    T
	hasAny bool
	// maxWildLabels bounds the suffixes Lookup needs to try; 0 when there is no wildcard.
	// After a Delete it may be larger than needed, which only costs a map lookup.
	maxWildLabels int

	// A table made by Edit shares exact and wild with the table it came from and never
	// writes them: its changes are in over, keyed like exact and wild (exact names never
	// start with a dot, wildcard suffixes always do), which Lookup consults first.
	shared bool
	over   map[string]overEntry[T]
	// overLen is what over adds to len(exact)+len(wild): entries set minus entries deleted.
	overLen int
}

// overEntry is a changed entry: a new value, or a deleted one.
type overEntry[T any] struct {
	v       T
	deleted bool
}

// Reserve makes room for exact names and wildcards before Adds: building a table of 100 000
// names in maps that grow as they go took twice as long, and 100 000 names must be served
// within 0.3 s of start (docs/performance.md, route scale). It only has an effect on an
// empty table.
func (t *HostTable[T]) Reserve(exact, wild int) {
	if t.exact == nil && exact > 0 {
		t.exact = make(map[string]T, exact)
	}
	if t.wild == nil && wild > 0 {
		t.wild = make(map[string]T, wild)
	}
}

// Add inserts a value for a normalized hostname pattern: "a.example.com", "*.example.com", or
// "" for the catch-all. It reports false and changes nothing when the pattern is taken: the
// first value added wins, so callers add in precedence order (oldest route first).
func (t *HostTable[T]) Add(pattern string, v T) bool {
	if t.shared {
		if _, ok := t.Get(pattern); ok {
			return false
		}
		t.Set(pattern, v)
		return true
	}
	switch {
	case pattern == "" || pattern == "*":
		if t.hasAny {
			return false
		}
		t.any, t.hasAny = v, true
	case strings.HasPrefix(pattern, "*."):
		if t.wild == nil {
			t.wild = map[string]T{}
		}
		key := pattern[1:]
		if _, ok := t.wild[key]; ok {
			return false
		}
		t.wild[key] = v
		if n := strings.Count(key, "."); n > t.maxWildLabels {
			t.maxWildLabels = n
		}
	default:
		if t.exact == nil {
			t.exact = map[string]T{}
		}
		if _, ok := t.exact[pattern]; ok {
			return false
		}
		t.exact[pattern] = v
	}
	return true
}

// Lookup returns the value for a normalized name (lower-case, no trailing dot). It does not
// allocate: map lookups keyed by string(b) are compiled without a copy.
func (t *HostTable[T]) Lookup(name []byte) (T, bool) {
	if len(t.over) > 0 {
		return t.lookupOver(name)
	}
	if v, ok := t.exact[string(name)]; ok {
		return v, true
	}
	if len(t.wild) > 0 {
		// Try suffixes from the longest (most specific) to the shortest, starting after the
		// first label: a wildcard needs at least one label in front of it.
		dots := 0
		for _, c := range name {
			if c == '.' {
				dots++
			}
		}
		for i, c := range name {
			if c != '.' {
				continue
			}
			// name[i:] holds `dots` dots; a suffix with more labels than any wildcard
			// key cannot match, so the map is not consulted for it.
			if i > 0 && dots <= t.maxWildLabels {
				if v, ok := t.wild[string(name[i:])]; ok {
					return v, true
				}
			}
			dots--
		}
	}
	if t.hasAny {
		return t.any, true
	}
	var zero T
	return zero, false
}

// lookupOver is Lookup for a table with changes in over: every map lookup looks at over
// first. It is a copy of Lookup's loop rather than a branch inside it, so the common table
// (no changes) pays nothing for them.
func (t *HostTable[T]) lookupOver(name []byte) (T, bool) {
	if v, ok := t.get(string(name), t.exact); ok {
		return v, true
	}
	if t.maxWildLabels > 0 {
		dots := 0
		for _, c := range name {
			if c == '.' {
				dots++
			}
		}
		for i, c := range name {
			if c != '.' {
				continue
			}
			if i > 0 && dots <= t.maxWildLabels {
				if v, ok := t.get(string(name[i:]), t.wild); ok {
					return v, true
				}
			}
			dots--
		}
	}
	if t.hasAny {
		return t.any, true
	}
	var zero T
	return zero, false
}

// get looks a key up in over, then in base (exact or wild).
func (t *HostTable[T]) get(key string, base map[string]T) (T, bool) {
	if e, ok := t.over[key]; ok {
		return e.v, !e.deleted
	}
	v, ok := base[key]
	return v, ok
}

// key returns the map key of a pattern and the base map it belongs in; any is true for
// the catch-all.
func (t *HostTable[T]) key(pattern string) (key string, base map[string]T, any bool) {
	switch {
	case pattern == "" || pattern == "*":
		return "", nil, true
	case strings.HasPrefix(pattern, "*."):
		return pattern[1:], t.wild, false
	}
	return pattern, t.exact, false
}

// Get returns the value of a pattern (not a lookup: "*.example.com" is the wildcard entry).
func (t *HostTable[T]) Get(pattern string) (T, bool) {
	key, base, any := t.key(pattern)
	if any {
		return t.any, t.hasAny
	}
	return t.get(key, base)
}

// Edit returns a copy of t to change with Set and Delete while t keeps serving: the copy
// shares t's maps and keeps its own changes on top of them, so it costs the number of
// changes since the last full copy, not the size of the table. When those changes grow
// past an eighth of the table, Edit makes a full copy and starts over. t must not be
// changed afterwards (it is part of a published snapshot anyway).
func (t *HostTable[T]) Edit() HostTable[T] {
	c := *t
	c.shared = true
	if len(t.over) > 64+(len(t.exact)+len(t.wild))/8 {
		c.exact = make(map[string]T, len(t.exact)+t.overLen)
		c.wild = make(map[string]T, len(t.wild))
		for k, v := range t.exact {
			c.exact[k] = v
		}
		for k, v := range t.wild {
			c.wild[k] = v
		}
		for k, e := range t.over {
			m := c.exact
			if strings.HasPrefix(k, ".") {
				m = c.wild
			}
			if e.deleted {
				delete(m, k)
			} else {
				m[k] = e.v
			}
		}
		c.over, c.overLen = nil, 0
		return c
	}
	c.over = make(map[string]overEntry[T], len(t.over)+4)
	for k, e := range t.over {
		c.over[k] = e
	}
	return c
}

// Set gives a pattern a value, replacing the one it has. Only on a table made by Edit.
func (t *HostTable[T]) Set(pattern string, v T) {
	t.mustBeEdit()
	key, base, any := t.key(pattern)
	if any {
		t.any, t.hasAny = v, true
		return
	}
	if _, had := t.get(key, base); !had {
		t.overLen++
	}
	if t.over == nil {
		t.over = map[string]overEntry[T]{}
	}
	t.over[key] = overEntry[T]{v: v}
	if strings.HasPrefix(key, ".") {
		if n := strings.Count(key, "."); n > t.maxWildLabels {
			t.maxWildLabels = n
		}
	}
}

// Delete removes a pattern. Only on a table made by Edit.
func (t *HostTable[T]) Delete(pattern string) {
	t.mustBeEdit()
	key, base, any := t.key(pattern)
	if any {
		var zero T
		t.any, t.hasAny = zero, false
		return
	}
	if _, had := t.get(key, base); !had {
		return
	}
	t.overLen--
	if _, inBase := base[key]; inBase {
		if t.over == nil {
			t.over = map[string]overEntry[T]{} // Edit made a full copy
		}
		t.over[key] = overEntry[T]{deleted: true}
	} else {
		delete(t.over, key) // set since the last full copy: forget it
	}
}

func (t *HostTable[T]) mustBeEdit() {
	if !t.shared {
		panic("snapshot: HostTable.Set or Delete on a table not made by Edit")
	}
}

// Len is the number of entries.
func (t *HostTable[T]) Len() int {
	n := len(t.exact) + len(t.wild) + t.overLen
	if t.hasAny {
		n++
	}
	return n
}

// Entry is one pattern of a table, for describing it.
type Entry[T any] struct {
	Pattern string
	Value   T
}

// Entries lists the table in precedence order: exact names sorted, then wildcards from the
// longest suffix, then the catch-all.
func (t *HostTable[T]) Entries() []Entry[T] {
	out := make([]Entry[T], 0, t.Len())
	var w []Entry[T]
	for k, v := range t.exact {
		if _, changed := t.over[k]; !changed {
			out = append(out, Entry[T]{k, v})
		}
	}
	for k, v := range t.wild {
		if _, changed := t.over[k]; !changed {
			w = append(w, Entry[T]{"*" + k, v})
		}
	}
	for k, e := range t.over {
		switch {
		case e.deleted:
		case strings.HasPrefix(k, "."):
			w = append(w, Entry[T]{"*" + k, e.v})
		default:
			out = append(out, Entry[T]{k, e.v})
		}
	}
	sortEntries(out, func(a, b string) bool { return a < b })
	sortEntries(w, func(a, b string) bool {
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	out = append(out, w...)
	if t.hasAny {
		out = append(out, Entry[T]{"", t.any})
	}
	return out
}

func sortEntries[T any](e []Entry[T], less func(a, b string) bool) {
	sort.Slice(e, func(i, j int) bool { return less(e[i].Pattern, e[j].Pattern) })
}

// MaxHostnameLen is the longest DNS name NormalizeSNI accepts.
const MaxHostnameLen = 253

// NormalizeSNI writes the lower-cased SNI, without one trailing dot, into dst (which needs
// room for MaxHostnameLen bytes) and returns it. The input is never modified: it is part of
// the ClientHello that is forwarded byte for byte. It reports false for a name that cannot
// be a DNS hostname (empty, too long, or bytes outside letters, digits, '-', '_' and '.').
// IDNs arrive as punycode ("xn--..."), which is plain ASCII.
func NormalizeSNI(dst, sni []byte) ([]byte, bool) {
	if n := len(sni); n > 0 && sni[n-1] == '.' {
		sni = sni[:n-1]
	}
	if len(sni) == 0 || len(sni) > MaxHostnameLen || len(dst) < len(sni) {
		return nil, false
	}
	dst = dst[:len(sni)]
	for i, c := range sni {
		switch {
		case c >= 'A' && c <= 'Z':
			dst[i] = c + ('a' - 'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
			dst[i] = c
		default:
			return nil, false
		}
	}
	return dst, true
}
