package file

import (
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file/blockyaml"
)

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
		var c converter
		for i, d := range docs {
			out[i] = c.convert(d.data)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c converter
			for {
				i := int(next.Add(1)) - 1
				if i >= len(docs) {
					return
				}
				out[i] = c.convert(docs[i].data)
			}
		}()
	}
	wg.Wait()
	return out
}

// converter is one worker's state: the header of the previous document it decoded quickly,
// and blockyaml's buffers, which it reuses because nothing decoded keeps the JSON (the
// TLSRoute decoder copies it into a string, encoding/json copies what it keeps).
type converter struct {
	last header
	yaml blockyaml.Converter
}

// convert takes the quick path for a document when it can: blockyaml's conversion and a
// strict decode of one object that succeeds. Anything else (YAML blockyaml declines, a List,
// any error) takes sigs.k8s.io/yaml and the careful path in loader.document, so that errors
// read the same whichever path a document could have taken.
func (c *converter) convert(doc []byte) converted {
	if js, ok := c.yaml.ToJSON(doc); ok {
		if d := decodeQuick(js, &c.last); d != nil {
			c.last.APIVersion, c.last.Kind = d.h.APIVersion, d.h.Kind
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
