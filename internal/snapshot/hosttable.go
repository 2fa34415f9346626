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
// A HostTable is built with Add and then only read. Its zero value is an empty table.
type HostTable[T any] struct {
	exact map[string]T
	// wild is keyed by the wildcard's suffix including the leading dot: ".example.com".
	wild   map[string]T
	any    T
	hasAny bool
	// maxWildLabels bounds the suffixes Lookup needs to try; 0 when there is no wildcard.
	maxWildLabels int
}

// Reserve makes room for exact names and wildcards before Adds: building a table of 100 000
// names in maps that grow as they go took twice as long (issue 6). It only has an effect on
// an empty table.
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

// Len is the number of entries.
func (t *HostTable[T]) Len() int {
	n := len(t.exact) + len(t.wild)
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
	for k, v := range t.exact {
		out = append(out, Entry[T]{k, v})
	}
	sortEntries(out, func(a, b string) bool { return a < b })
	w := make([]Entry[T], 0, len(t.wild))
	for k, v := range t.wild {
		w = append(w, Entry[T]{"*" + k, v})
	}
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
