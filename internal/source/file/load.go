// Package file reads snigate's input from YAML (or JSON) files: the same Gateway API and core
// objects a user would apply to a Kubernetes cluster, decoded strictly into the official Go
// types.
//
//	res, err := file.Load("examples/quickstart/")
//	if err != nil { /* names file, document, object and field */ }
//	result := translate.Translate(res, translate.Options{})
//
// A process that reloads the same files keeps one Loader, which decodes only what changed:
//
//	var ld file.Loader
//	res, err := ld.Load("examples/quickstart/") // then again after every change
//
// What Load accepts:
//   - Each path is a file or a folder. A folder contributes every *.yaml, *.yml and *.json file
//     directly inside it (not in sub-folders), in lexical order; names starting with "." are
//     skipped (editor swap files, .git).
//   - A file holds one or more YAML documents separated by "---" lines; JSON is YAML. Documents
//     that are empty or only comments are skipped. A "v1 List" document contributes its items.
//   - Kinds: those of resources.Kinds (gateway.networking.k8s.io/v1 GatewayClass, Gateway,
//     TLSRoute, TCPRoute, HTTPRoute, ReferenceGrant (v1beta1 too); v1 Service, Secret,
//     Namespace; discovery.k8s.io/v1 EndpointSlice).
//
// Decoding is strict, like the API server: unknown fields, duplicate keys, unknown kinds and
// two objects with the same kind, namespace and name are errors. Load applies the defaults the
// API server would: metadata.namespace "default" for namespaced kinds, metadata.generation 1,
// and a Secret's stringData merged into data. It validates nothing else; translate does.
//
// Errors name the file, the 1-based index of the document in it (counting every "---"
// separated document, empty ones included), the object when known, and the field:
// `dir/db.yaml: document 2 (TLSRoute default/db): ...`. Resources.Origins records
// "dir/db.yaml#2" ("#2/items[0]" inside a List) for translate's errors.
// Load reports every error it finds, joined with errors.Join.
//
// Speed matters at 100 000 routes, where a reload must apply a one-route change within
// 50 ms (docs/performance.md). Documents in plain block-style YAML are converted by package
// blockyaml and decoded at once; every other document, and every document with an error,
// goes through sigs.k8s.io/yaml and the checks one by one, so errors read the same either
// way. A Loader remembers the objects of each file it read without error, with the file's
// content: its next Load decodes only the files (and within them the documents) that
// changed, and the objects of the others are the same pointers as before, as the contract of
// package resources requires.
package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file/blockyaml"
)

// Load reads every object in paths (files or folders) into one Resources, decoding
// everything: a one-off read. See Loader for reloads.
func Load(paths ...string) (*resources.Resources, error) {
	return new(Loader).Load(paths...)
}

// Loader reads files like Load and remembers what each file held, so that its next Load
// decodes only what changed and returns the same object pointers for the rest. It keeps the
// files of its latest Load only. The zero value is ready to use; a Loader is safe for use by
// one goroutine at a time (the runner serialises loads), and separate Loaders share nothing.
type Loader struct {
	cache filesCache
}

// Load reads every object in paths (files or folders) into one Resources.
func (ld *Loader) Load(paths ...string) (*resources.Resources, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input files given")
	}
	l := &loader{
		cache: &ld.cache,
		res:   &resources.Resources{Origins: map[string]string{}},
		seen:  map[string]where{},
	}
	read := map[string]bool{}
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			l.errs = append(l.errs, err)
			continue
		}
		for _, f := range files {
			data, err := ld.cache.read(f)
			if err != nil {
				l.errs = append(l.errs, err)
				continue
			}
			read[f] = true
			l.file(f, data)
		}
	}
	ld.cache.keep(read)
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return l.res, nil
}

// Decode reads the objects of one file's content; name is used in errors and Origins. It is
// Load without the file system, for tests and for input read from elsewhere.
func Decode(name string, data []byte) (*resources.Resources, error) {
	l := &loader{
		res:  &resources.Resources{Origins: map[string]string{}},
		seen: map[string]where{},
	}
	l.file(name, data)
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return l.res, nil
}

// expand turns a path into the list of files to read.
func expand(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p) // sorted by name
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".yaml", ".yml", ".json":
			out = append(out, filepath.Join(p, name))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no *.yaml, *.yml or *.json files in folder", p)
	}
	return out, nil
}

// loader is the state of one Load or Decode.
type loader struct {
	// cache: reuse the objects of unchanged files (nil for Decode, whose input has no file).
	cache *filesCache
	res   *resources.Resources
	seen  map[string]where // origin key -> where it was first defined
	errs  []error
	// objs collects the objects of the file being read, for the cache.
	objs []object
}

// where names a document for error messages: "file: document 2".
type where struct {
	file string
	doc  int
	item int // index in a List document, -1 otherwise
}

func (w where) String() string { return resources.DescribeOrigin(w.origin()) }

func (w where) origin() string {
	s := w.file + "#" + strconv.Itoa(w.doc)
	if w.item >= 0 {
		s += "/items[" + strconv.Itoa(w.item) + "]"
	}
	return s
}

func (l *loader) fail(w where, obj string, format string, args ...any) {
	prefix := w.String()
	if obj != "" {
		prefix += " (" + obj + ")"
	}
	l.errs = append(l.errs, fmt.Errorf("%s: %s", prefix, fmt.Sprintf(format, args...)))
}

// object is one decoded object with the API server's defaults applied, and where it was
// defined. Objects are shared between loads: nothing downstream may modify them (translate
// does not).
type object struct {
	w      where
	kind   string
	k      *resources.Kind
	obj    resources.Object
	key    string // resources.OriginKey
	origin string // w.origin()
}

func (l *loader) file(name string, data []byte) {
	var prev fileEntry
	if l.cache != nil {
		var ok bool
		if prev, ok = l.cache.get(name); ok && bytes.Equal(prev.data, data) {
			for i := range prev.objs {
				l.add(&prev.objs[i])
			}
			return
		}
	}
	errs := len(l.errs)
	l.objs = nil
	docs := splitDocuments(data)
	// Documents unchanged since this file was last read keep their objects: editing one
	// route in a file of 100 000 hostnames decodes that route's document only, and the
	// objects translate sees again are the same pointers (which its memo keys on).
	reused := make([][]object, len(docs))
	todo := docs
	if len(prev.byDoc) > 0 {
		todo = nil
		for i, d := range docs {
			if objs, ok := prev.byDoc[string(d.data)]; ok {
				reused[i] = objs
			} else {
				todo = append(todo, d)
			}
		}
	}
	conv := convertAll(todo)
	for i, doc := range docs {
		w := where{file: name, doc: i + 1, item: -1}
		if objs := reused[i]; objs != nil {
			for _, o := range objs {
				o.w.doc = i + 1 // the document may have moved
				o.origin = o.w.origin()
				l.objs = append(l.objs, o)
				l.add(&o)
			}
			continue
		}
		c := conv[0]
		conv = conv[1:]
		if c.obj != nil {
			l.decoded(w, c.obj.h, c.obj.obj, c.obj.k)
			continue
		}
		l.document(w, doc, c)
	}
	// Only a file without errors is cached, so a file with errors reports them again.
	if l.cache != nil && len(l.errs) == errs {
		l.cache.put(name, data, l.objs)
	}
	l.objs = nil
}

// filesCache remembers the objects of each file with the content they came from, so that a
// reload after one file changed decodes only that file: with 100 000 routes, decoding is
// most of the time a reload takes. Only the files of the latest Load are kept.
type filesCache struct {
	mu sync.Mutex
	m  map[string]fileEntry // nil until the first put
	// scratch is the buffer files are read into: an unchanged 6 MB file is compared with
	// the cache without allocating 6 MB on every reload.
	scratch []byte
}

type fileEntry struct {
	data []byte
	objs []object
	// byDoc groups objs by the text of the document they came from (the keys point into
	// data, which is never written again).
	byDoc map[string][]object
}

// read reads a file into the scratch buffer: the data is valid until the next read (put
// stores a copy).
func (c *filesCache) read(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c.mu.Lock()
	buf := c.scratch[:0]
	c.mu.Unlock()
	if st, err := f.Stat(); err == nil && int64(cap(buf)) <= st.Size() {
		buf = make([]byte, 0, st.Size()+512) // the size may change while reading: one more byte tells EOF
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.scratch = buf
	c.mu.Unlock()
	return buf, nil
}

// get returns what the last error-free read of a file left.
func (c *filesCache) get(name string) (fileEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e, ok
}

func (c *filesCache) put(name string, data []byte, objs []object) {
	c.mu.Lock()
	if len(data) > 0 && len(c.scratch) > 0 && &c.scratch[0] == &data[0] {
		data = bytes.Clone(data) // the scratch buffer stays for the next read
	}
	c.mu.Unlock()
	docs := splitDocuments(data)
	byDoc := make(map[string][]object, len(docs))
	for _, o := range objs {
		if d := docs[o.w.doc-1].data; len(d) > 0 {
			k := unsafe.String(unsafe.SliceData(d), len(d))
			byDoc[k] = append(byDoc[k], o)
		}
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]fileEntry{}
	}
	c.m[name] = fileEntry{data: data, objs: objs, byDoc: byDoc}
	c.mu.Unlock()
}

// keep drops every file not in names.
func (c *filesCache) keep(names map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.m {
		if !names[n] {
			delete(c.m, n)
		}
	}
}

// converted is one document decoded (obj), or turned from YAML into JSON by
// sigs.k8s.io/yaml (js, or the error that stopped it) for the careful path.
type converted struct {
	obj *decoded
	js  []byte
	err error
}

// decoded is a document's object after strict decoding.
type decoded struct {
	h   header
	obj resources.Object
	k   *resources.Kind
}

// convertAll converts and decodes documents on every CPU (they are independent); everything
// after it stays sequential, in file order, so errors and duplicate detection do not depend
// on scheduling.
func convertAll(docs []document) []converted {
	out := make([]converted, len(docs))
	workers := min(runtime.GOMAXPROCS(0), len(docs)/64+1)
	if workers <= 1 {
		var last header
		for i, d := range docs {
			out[i] = convert(d.data, &last)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last header
			for {
				i := int(next.Add(1)) - 1
				if i >= len(docs) {
					return
				}
				out[i] = convert(docs[i].data, &last)
			}
		}()
	}
	wg.Wait()
	return out
}

// convert takes the quick path for a document when it can: blockyaml's conversion and a
// strict decode of one object that succeeds. Anything else (YAML blockyaml declines, a List,
// any error) takes sigs.k8s.io/yaml and the careful path in loader.document, so that errors
// read the same whichever path a document could have taken. last is the header of the
// previous document the caller decoded quickly.
func convert(doc []byte, last *header) converted {
	if js, ok := blockyaml.ToJSON(doc); ok {
		if d := decodeQuick(js, last); d != nil {
			last.APIVersion, last.Kind = d.h.APIVersion, d.h.Kind
			return converted{obj: d}
		}
	}
	js, err := yaml.YAMLToJSONStrict(doc)
	return converted{js: js, err: err}
}

// decodeQuick decodes a JSON object of a known kind strictly, or returns nil. Documents of a
// file are mostly of one kind, so it first decodes into the type of the previous document
// (last), which saves reading the header separately: that guess stands when the decode is
// strict and the object's own apiVersion and kind are the guessed ones.
func decodeQuick(js []byte, last *header) *decoded {
	if r := decodeTLSRoute(js); r != nil && r.APIVersion != "" && r.Kind != "" && r.Name != "" {
		d := &decoded{obj: r, k: tlsRouteKind}
		d.h.APIVersion, d.h.Kind = r.APIVersion, r.Kind
		d.h.Metadata.Name, d.h.Metadata.Namespace = r.Name, r.Namespace
		return d
	}
	if last.Kind != "" {
		if obj, kd, err := newObject(last.APIVersion, last.Kind); err == nil {
			if strict, err := kjson.UnmarshalStrict(js, obj); err == nil && len(strict) == 0 {
				if v, k := obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind(); v == last.APIVersion && k == last.Kind && obj.GetName() != "" {
					d := &decoded{obj: obj, k: kd}
					d.h.APIVersion, d.h.Kind = v, k
					d.h.Metadata.Name, d.h.Metadata.Namespace = obj.GetName(), obj.GetNamespace()
					return d
				}
			}
		}
	}
	var h header
	if err := json.Unmarshal(js, &h); err != nil || h.APIVersion == "" || h.Kind == "" || h.Metadata.Name == "" {
		return nil
	}
	obj, k, err := newObject(h.APIVersion, h.Kind)
	if err != nil {
		return nil
	}
	if strict, err := kjson.UnmarshalStrict(js, obj); err != nil || len(strict) > 0 {
		return nil
	}
	return &decoded{h: h, obj: obj, k: k}
}

// document is one YAML document of a file and the file line it starts on.
type document struct {
	data []byte
	line int
}

// splitDocuments splits a YAML stream at "---" separator lines. Text before the first
// separator counts as a document only when it holds more than blank lines and comments, so a
// file starting with "---" (or a comment and "---") begins with document 1. Documents share
// data's memory.
func splitDocuments(data []byte) []document {
	var docs []document
	cur := document{line: 1}
	start, pos := 0, 0 // cur.data is data[start:pos]
	started := false
	lineNo := 0
	for pos < len(data) {
		end := len(data)
		if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
			end = pos + i + 1
		}
		lineNo++
		if isSeparator(bytes.TrimRight(data[pos:end], "\r\n")) {
			cur.data = data[start:pos:pos]
			if started || hasContent(cur.data) {
				docs = append(docs, cur)
			}
			cur, started = document{line: lineNo + 1}, true
			start = end
		}
		pos = end
	}
	cur.data = data[start:pos:pos]
	if started || hasContent(cur.data) {
		docs = append(docs, cur)
	}
	return docs
}

// hasContent reports whether a chunk of YAML has a line that is neither blank nor a comment.
func hasContent(b []byte) bool {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return true
		}
	}
	return false
}

func isSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := line[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

var yamlLineRE = regexp.MustCompile(`\bline (\d+)`)

// header is the part of every object needed to pick its type.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// document reads one document that the quick path did not decode: sigs.k8s.io/yaml's
// conversion, then every check with its error message.
func (l *loader) document(w where, doc document, c converted) {
	js, err := c.js, c.err
	if err != nil {
		// The YAML parser counts lines from the document's start; show file lines.
		msg := yamlLineRE.ReplaceAllStringFunc(err.Error(), func(m string) string {
			n, _ := strconv.Atoi(yamlLineRE.FindStringSubmatch(m)[1])
			return "line " + strconv.Itoa(n+doc.line-1)
		})
		l.fail(w, "", "invalid YAML: %s", msg)
		return
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || bytes.Equal(js, []byte("null")) {
		return // empty or comment-only document
	}
	l.object(w, js)
}

// object decodes one object and adds it.
func (l *loader) object(w where, js []byte) {
	if js[0] != '{' {
		l.fail(w, "", "not an object")
		return
	}
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		l.fail(w, "", "%v", err)
		return
	}
	if h.APIVersion == "" || h.Kind == "" {
		l.fail(w, "", "apiVersion and kind are required")
		return
	}
	if h.APIVersion == "v1" && h.Kind == "List" {
		if w.item >= 0 {
			l.fail(w, "", "nested List")
			return
		}
		var list struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   json.RawMessage   `json:"metadata,omitempty"`
			Items      []json.RawMessage `json:"items"`
		}
		if strict, err := kjson.UnmarshalStrict(js, &list); err != nil || len(strict) > 0 {
			l.fail(w, "List", "%v", errors.Join(append(strict, err)...))
			return
		}
		for i, it := range list.Items {
			iw := w
			iw.item = i
			l.object(iw, bytes.TrimSpace(it))
		}
		return
	}

	obj, k, err := newObject(h.APIVersion, h.Kind)
	if err != nil {
		l.fail(w, "", "%v", err)
		return
	}
	id := describe(h.Kind, k.Namespaced, h.Metadata.Namespace, h.Metadata.Name)
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		l.fail(w, id, "%v", err)
		return
	}
	if len(strict) > 0 {
		for _, e := range strict {
			l.fail(w, id, "%v", e)
		}
		return
	}
	l.decoded(w, h, obj, k)
}

// decoded applies the API server's defaults to a decoded object and adds it.
func (l *loader) decoded(w where, h header, m resources.Object, k *resources.Kind) {
	id := describe(h.Kind, k.Namespaced, h.Metadata.Namespace, h.Metadata.Name)
	if m.GetName() == "" {
		l.fail(w, id, "metadata.name: required")
		return
	}
	if k.Namespaced {
		if m.GetNamespace() == "" {
			m.SetNamespace(metav1.NamespaceDefault)
		}
	} else {
		// The API server ignores a namespace on cluster-scoped objects.
		m.SetNamespace("")
	}
	if m.GetGeneration() == 0 {
		m.SetGeneration(1)
	}
	if s, ok := m.(*corev1.Secret); ok {
		mergeStringData(s)
	}
	o := object{w: w, kind: h.Kind, k: k, obj: m, key: resources.OriginKey(h.Kind, m.GetNamespace(), m.GetName()), origin: w.origin()}
	l.objs = append(l.objs, o)
	l.add(&o)
}

// add records an object, unless one of the same kind, namespace and name came before.
func (l *loader) add(o *object) {
	if prev, dup := l.seen[o.key]; dup {
		m := o.obj
		l.fail(o.w, describe(o.kind, m.GetNamespace() != "", m.GetNamespace(), m.GetName()),
			"duplicate object: already defined at %s", prev)
		return
	}
	l.seen[o.key] = o.w
	l.res.Origins[o.key] = o.origin

	o.k.Add(l.res, o.obj)
}

func describe(kind string, namespaced bool, ns, name string) string {
	if name == "" {
		return kind
	}
	if !namespaced {
		return kind + " " + name
	}
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return kind + " " + ns + "/" + name
}

// tlsRouteKind is the kind decodeTLSRoute decodes.
var tlsRouteKind = resources.KindOf(gwv1.GroupName, "TLSRoute")

// newObject returns an empty object of the given type and its kind.
func newObject(apiVersion, kind string) (resources.Object, *resources.Kind, error) {
	group, version, _ := strings.Cut(apiVersion, "/")
	if version == "" { // core group: "v1"
		group, version = "", group
	}
	if k := resources.KindOf(group, kind); k != nil && slices.Contains(k.Versions, version) {
		return k.New(), k, nil
	}
	// A Gateway API version snigate does not read: name the version to use (users meet
	// this moving from v1alpha2 and v1beta1). Other groups get the list of kinds.
	if group == gwv1.GroupName {
		for _, k := range resources.Kinds {
			if k.Group != group || slices.Contains(k.Versions, version) {
				continue
			}
			if own := resources.KindOf(group, kind); own != nil {
				k = *own
			}
			return nil, nil, fmt.Errorf("apiVersion %s: unsupported version for %s, use %s/%s", apiVersion, kind, group, k.Versions[0])
		}
	}
	return nil, nil, fmt.Errorf("unsupported kind %s %s (snigate reads %s)", apiVersion, kind, strings.Join(resources.KindNames(), ", "))
}

// mergeStringData folds stringData into data the way the API server does on write:
// stringData wins for keys present in both.
func mergeStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = make(map[string][]byte, len(s.StringData))
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}
