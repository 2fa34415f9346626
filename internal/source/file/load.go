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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/snigate/snigate/internal/resources"
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

// Size is the number of bytes Load would read from paths now: the sizes of the files it
// would read. A path or file it cannot read counts nothing; Load reports those.
func Size(paths ...string) int64 {
	var n int64
	for _, p := range paths {
		files, _ := expand(p)
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				n += st.Size()
			}
		}
	}
	return n
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
		// read returns the cached slice itself for unchanged content: Equal stops at the
		// pointers.
		if prev, ok = l.cache.get(name); ok && bytes.Equal(prev.data, data) {
			for i := range prev.objs {
				l.add(&prev.objs[i])
			}
			return
		}
	}
	errs := len(l.errs)
	docs := splitDocuments(data)
	// Most documents hold one object: sized at once, the list is not copied as it grows
	// (the cache keeps it).
	l.objs = make([]object, 0, len(docs))
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
		l.cache.put(name, data, docs, l.objs)
	}
	l.objs = nil
}
