// Package blockyaml converts the plain block-style YAML that Kubernetes manifests are
// usually written in to JSON, and declines everything else.
//
//	js, ok := blockyaml.ToJSON(doc)
//	if !ok {
//		js, err = yaml.YAMLToJSONStrict(doc) // sigs.k8s.io/yaml: all of YAML, and its errors
//	}
//
// A Converter does the same for many documents in a row, into buffers it reuses: the JSON
// it returns lasts until its next call, which suits a decoder that copies what it keeps.
//
// It exists for speed (100 000 hostnames must serve within 0.3 s of start,
// docs/performance.md): sigs.k8s.io/yaml parses a document into YAML nodes, builds
// Go maps from them, converts those and marshals them to JSON, which took most of the start
// time of a 100 000-route configuration. ToJSON writes JSON in one pass over the lines.
// General YAML libraries were measured on that input (6 313 TLSRoute documents, 6 MB, one
// CPU, medians of interleaved runs) and none comes close: per document, ToJSON takes 9 µs,
// sigs.k8s.io/yaml 100 µs, go.yaml.in/yaml/v3 (into any, then encoding/json) 117 µs, and
// github.com/goccy/go-yaml's YAMLToJSON 248 µs. Merely parsing into a yaml/v3 Node
// costs 85 µs (320 ms for the whole file streamed through one Decoder): more than the
// 0.3 s start budget. Plugged into package file's quick path, the first load takes 0.27 s
// with ToJSON, 0.82 s with sigs.k8s.io/yaml, 1.10 s with yaml/v3 and 1.91 s with goccy.
// Both libraries also read YAML 1.2 ("yes" is a string, not true), so they would need
// guarding to keep sigs.k8s.io/yaml's meaning anyway. BenchmarkToJSON keeps the comparison
// with sigs.k8s.io/yaml.
//
// The contract is one-sided: when ToJSON returns true, the JSON holds the same value
// sigs.k8s.io/yaml.YAMLToJSONStrict returns for the document (object keys come in document
// order rather than sorted). Anything it is not sure about makes it return false, never an
// error, so error messages stay the ones sigs.k8s.io/yaml writes. What it reads:
//
//   - a document whose root is a block mapping, indented with spaces;
//   - block mappings and block sequences (also a sequence at its key's indentation), nested
//     through "- key: value" items;
//   - single-line scalars: plain, single-quoted and double-quoted (escapes \" \\ \b \f
//     \n \r \t), and single-line flow sequences of them, "[]" and "{}";
//   - full-line and trailing comments.
//
// It declines: tabs, carriage returns, control and non-ASCII bytes, anchors, aliases, tags,
// block scalars (| and >), multi-line scalars, flow mappings with content, complex keys,
// directives, duplicate keys, and plain scalars whose YAML 1.1 type is not plainly a string,
// an integer, true or false (null, ~, yes, no, on, off, floats, octal, timestamps, ...).
// FuzzToJSON checks the contract against sigs.k8s.io/yaml.
package blockyaml

import (
	"bytes"
	"math"
)

// ToJSON converts one YAML document (without "---" separators); see the package doc. The
// JSON is the caller's to keep.
func ToJSON(doc []byte) ([]byte, bool) {
	var c Converter
	return c.ToJSON(doc)
}

// A Converter converts documents as ToJSON does, but keeps its buffers from one document to
// the next: the JSON it returns is valid only until its next call. Its zero value is ready;
// it is not safe for concurrent use.
//
// A loader that decodes each document's JSON into objects and drops it needs no copy of it,
// and the buffers of a large configuration's first load are fresh memory: a line table
// and an output of a quarter more than the document, for each of thousands of documents.
type Converter struct {
	lines []line
	out   []byte
}

// ToJSON converts one YAML document (without "---" separators) into c's buffer.
func (c *Converter) ToJSON(doc []byte) ([]byte, bool) {
	for _, b := range doc {
		if (b < ' ' && b != '\n') || b >= 0x7f {
			return nil, false
		}
	}
	if len(doc) > math.MaxInt32 {
		return nil, false // beyond line's offsets; sigs.k8s.io/yaml reads it
	}
	if n := bytes.Count(doc, []byte("\n")) + 1; cap(c.lines) < n {
		c.lines = make([]line, 0, n)
	}
	if n := len(doc) + len(doc)/4; cap(c.out) < n {
		c.out = make([]byte, 0, n)
	}
	p := parser{doc: doc, lines: c.lines[:0], out: c.out[:0]}
	defer func() { c.lines, c.out = p.lines[:0], p.out[:0] }() // what append grew
	for start := 0; start < len(doc); {
		end := len(doc)
		next := end
		if i := bytes.IndexByte(doc[start:], '\n'); i >= 0 {
			end, next = start+i, start+i+1
		}
		indent := start
		for indent < end && doc[indent] == ' ' {
			indent++
		}
		text := bytes.TrimRight(doc[indent:end], " ")
		switch {
		case len(text) == 0 || text[0] == '#':
			start = next
			continue // blank or comment
		case indent == start && (text[0] == '%' || bytes.HasPrefix(text, []byte("..."))):
			return nil, false // directive or document end
		}
		p.lines = append(p.lines, line{indent: int32(indent - start), off: int32(indent), end: int32(indent + len(text))})
		start = next
	}
	if len(p.lines) == 0 || isDash(p.text(p.lines[0])) {
		return nil, false // empty, or not a mapping
	}
	if !p.mapping(p.lines[0].indent) || p.pos != len(p.lines) {
		return nil, false
	}
	return p.out, true
}

// line is a line with content: its indentation and where the rest, trailing spaces
// removed, lies in the document. Offsets rather than a slice keep it at 12 bytes: a
// 100 000-route file has as many lines, and the first load's memory is fresh pages.
type line struct {
	indent, off, end int32
}

type parser struct {
	doc   []byte
	lines []line
	pos   int
	out   []byte
}

// text is l's content.
func (p *parser) text(l line) []byte { return p.doc[l.off:l.end] }

// isDash reports whether text starts a block sequence item.
func isDash(text []byte) bool {
	return text[0] == '-' && (len(text) == 1 || text[1] == ' ')
}

// mapping reads a block mapping whose keys sit at column n.
func (p *parser) mapping(n int32) bool {
	p.out = append(p.out, '{')
	var buf [16][]byte // most mappings have few keys: no allocation
	keys := buf[:0]
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < n {
			break
		}
		if l.indent > n || isDash(p.text(l)) {
			return false
		}
		key, rest, ok := splitKey(p.text(l))
		if !ok {
			return false
		}
		for _, k := range keys {
			if bytes.Equal(k, key) {
				return false // duplicate: let sigs.k8s.io/yaml say so
			}
		}
		keys = append(keys, key)
		if len(keys) > 1 {
			p.out = append(p.out, ',')
		}
		p.out = appendString(p.out, key)
		p.out = append(p.out, ':')
		p.pos++
		if len(rest) > 0 {
			if !p.inline(rest) || !p.nothingDeeper(n) {
				return false
			}
			continue
		}
		// "key:" alone: a nested block, a sequence at the key's column, or null.
		switch {
		case p.pos < len(p.lines) && p.lines[p.pos].indent > n:
			if !p.block(p.lines[p.pos].indent) {
				return false
			}
		case p.pos < len(p.lines) && p.lines[p.pos].indent == n && isDash(p.text(p.lines[p.pos])):
			if !p.sequence(n) {
				return false
			}
		default:
			p.out = append(p.out, "null"...)
		}
	}
	p.out = append(p.out, '}')
	return true
}

// sequence reads a block sequence whose dashes sit at column m.
func (p *parser) sequence(m int32) bool {
	p.out = append(p.out, '[')
	for first := true; p.pos < len(p.lines); first = false {
		l := p.lines[p.pos]
		if l.indent < m || (l.indent == m && !isDash(p.text(l))) {
			break
		}
		if l.indent > m {
			return false
		}
		if !first {
			p.out = append(p.out, ',')
		}
		text := p.text(l)
		rest := bytes.TrimLeft(text[1:], " ")
		col := m + int32(len(text)-len(rest))
		if len(rest) == 0 || rest[0] == '#' {
			// "-" alone: the item is the nested block, or null.
			p.pos++
			if p.pos < len(p.lines) && p.lines[p.pos].indent > m {
				if !p.block(p.lines[p.pos].indent) {
					return false
				}
			} else {
				p.out = append(p.out, "null"...)
			}
			continue
		}
		if _, _, ok := splitKey(rest); ok || isDash(rest) {
			// "- key: value" or "- - item": the rest of the line is the first line of a
			// block at its own column.
			p.lines[p.pos] = line{indent: col, off: l.end - int32(len(rest)), end: l.end}
			if !p.block(col) {
				return false
			}
			continue
		}
		p.pos++
		if !p.inline(rest) || !p.nothingDeeper(m) {
			return false
		}
	}
	p.out = append(p.out, ']')
	return true
}

// block reads the mapping or sequence starting at the current line, at column n.
func (p *parser) block(n int32) bool {
	if isDash(p.text(p.lines[p.pos])) {
		return p.sequence(n)
	}
	return p.mapping(n)
}

// nothingDeeper reports whether the next line does not continue a scalar value on a line of
// column n: a more indented line would make it a multi-line scalar (or an error).
func (p *parser) nothingDeeper(n int32) bool {
	return p.pos == len(p.lines) || p.lines[p.pos].indent <= n
}

// splitKey splits "key: rest" or "key:"; it reports false when text is not a mapping entry
// this package reads.
func splitKey(text []byte) (key, rest []byte, ok bool) {
	var after []byte
	switch text[0] {
	case '"', '\'':
		s, tail, ok := quoted(text)
		if !ok || len(tail) == 0 || tail[0] != ':' {
			return nil, nil, false
		}
		key, after = s, tail[1:]
	default:
		i := 0
		for ; i < len(text); i++ {
			if text[i] == ':' && (i+1 == len(text) || text[i+1] == ' ') {
				break
			}
		}
		if i == len(text) {
			return nil, nil, false
		}
		key, after = text[:i], text[i+1:]
		if len(key) == 0 || !plainKey(key) {
			return nil, nil, false
		}
	}
	if len(after) > 0 && after[0] != ' ' || len(text)-len(after) > 1000 {
		return nil, nil, false // YAML limits implicit keys to 1024 characters
	}
	rest = bytes.TrimLeft(after, " ")
	if len(rest) > 0 && rest[0] == '#' {
		rest = nil
	}
	return key, rest, true
}

// plainKey reports whether an unquoted key is a string in YAML 1.1 and has no character
// that could mean something else.
func plainKey(k []byte) bool {
	if k[len(k)-1] == ' ' || bytes.ContainsAny(k, "#[]{},\"'") {
		return false
	}
	return startsPlain(k) && plainString(k)
}

// startsPlain reports whether a plain scalar may start with s's first byte (YAML
// indicators may not; "-" followed by a non-space may, and is left to plainString).
func startsPlain(s []byte) bool {
	switch s[0] {
	case '-':
		return len(s) > 1 && s[1] != ' '
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ' ':
		return false
	}
	return true
}

// special holds the plain scalars YAML 1.1 (go-yaml v2, which sigs.k8s.io/yaml uses)
// resolves to something other than a string, apart from numbers.
var special = map[string]bool{}

func init() {
	for _, s := range []string{
		"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
		"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF",
		"", "~", "null", "Null", "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF",
		"+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", "<<",
	} {
		special[s] = true
	}
}

// plainString reports whether go-yaml v2 resolves the plain scalar s to a string without
// looking further: its first byte is not a sign, digit or dot, and it is no special word.
func plainString(s []byte) bool {
	switch c := s[0]; {
	case c == '+' || c == '-' || c == '.' || (c >= '0' && c <= '9'):
		return false
	}
	return !special[string(s)]
}

// inline writes the value that follows "key: " or "- " on one line.
func (p *parser) inline(v []byte) bool {
	switch v[0] {
	case '"', '\'':
		s, tail, ok := quoted(v)
		if !ok || !onlyComment(tail) {
			return false
		}
		p.out = appendString(p.out, s)
		return true
	case '[':
		return p.flowSequence(v)
	case '{':
		t := bytes.TrimLeft(v[1:], " ")
		if len(t) == 0 || t[0] != '}' || !onlyComment(t[1:]) {
			return false
		}
		p.out = append(p.out, "{}"...)
		return true
	}
	// A plain scalar ends at a comment.
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = bytes.TrimRight(v[:i], " ")
	}
	if !startsPlain(v) || bytes.HasSuffix(v, []byte(":")) || bytes.Contains(v, []byte(": ")) {
		return false
	}
	return p.scalar(v)
}

// scalar writes a plain scalar as the JSON value go-yaml v2 resolves it to.
func (p *parser) scalar(v []byte) bool {
	switch {
	case string(v) == "true" || string(v) == "false":
		p.out = append(p.out, v...)
	case plainString(v) || dottedDigits(v):
		p.out = appendString(p.out, v)
	case decimal(v):
		p.out = append(p.out, v...)
	default:
		return false
	}
	return true
}

// decimal reports whether v is an integer in plain decimal notation that fits an int64:
// "0", "443", "-1"; no sign "+", no leading zeros (octal in YAML 1.1), no "_".
func decimal(v []byte) bool {
	d := v
	if d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 || d[0] == '0' && (len(d) > 1 || len(v) > len(d)) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// dottedDigits reports whether v is digits with two or more dots ("127.0.0.1"): neither an
// integer, a float nor a timestamp in YAML 1.1, so a string.
func dottedDigits(v []byte) bool {
	dots := 0
	for _, c := range v {
		switch {
		case c == '.':
			dots++
		case c < '0' || c > '9':
			return false
		}
	}
	return dots >= 2
}

// flowSequence writes a one-line "[a, 'b', "c"]" of scalars.
func (p *parser) flowSequence(v []byte) bool {
	v = v[1:]
	p.out = append(p.out, '[')
	for n := 0; ; n++ {
		v = bytes.TrimLeft(v, " ")
		if len(v) == 0 {
			return false
		}
		if v[0] == ']' && n == 0 {
			v = v[1:]
			break
		}
		if n > 0 {
			p.out = append(p.out, ',')
		}
		switch v[0] {
		case '"', '\'':
			s, tail, ok := quoted(v)
			if !ok {
				return false
			}
			p.out = appendString(p.out, s)
			v = tail
		default:
			i := bytes.IndexAny(v, ",]")
			if i < 0 {
				return false
			}
			item := bytes.TrimRight(v[:i], " ")
			if len(item) == 0 || !flowPlain(item) || !p.scalar(item) {
				return false
			}
			v = v[i:]
		}
		v = bytes.TrimLeft(v, " ")
		if len(v) == 0 {
			return false
		}
		if v[0] == ']' {
			v = v[1:]
			break
		}
		if v[0] != ',' {
			return false
		}
		v = v[1:]
	}
	if !onlyComment(v) {
		return false
	}
	p.out = append(p.out, ']')
	return true
}

// flowPlain reports whether a plain scalar inside a flow sequence has only the characters
// of names, numbers and addresses: flow context gives more characters a meaning.
func flowPlain(item []byte) bool {
	for _, c := range item {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '-' && c != '_' && c != '/' {
			return false
		}
	}
	return startsPlain(item)
}

// onlyComment reports whether the rest of a line after a value is blank or a comment.
func onlyComment(tail []byte) bool {
	t := bytes.TrimLeft(tail, " ")
	return len(t) == 0 || (t[0] == '#' && len(t) < len(tail))
}

// quoted reads a single- or double-quoted scalar that ends on its line; it returns the
// value and what follows the closing quote.
func quoted(text []byte) (value, tail []byte, ok bool) {
	q := text[0]
	var b []byte // the value, once an escape made it differ from the text
	from := 1
	for i := 1; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\'' && q == '\'' && i+1 < len(text) && text[i+1] == '\'':
			b = append(b, text[from:i+1]...) // up to and including one quote
			i++
			from = i + 1
		case c == q:
			if b == nil {
				return text[1:i], text[i+1:], true // nothing escaped: no copy
			}
			return append(b, text[from:i]...), text[i+1:], true
		case c == '\\' && q == '"':
			if i+1 == len(text) {
				return nil, nil, false
			}
			b = append(b, text[from:i]...)
			i++
			switch e := text[i]; e {
			case '"', '\\':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			default:
				return nil, nil, false
			}
			from = i + 1
		}
	}
	return nil, nil, false
}

// appendString writes s as a JSON string.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	for _, c := range s {
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}
