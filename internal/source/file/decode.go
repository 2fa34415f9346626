package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"

	"github.com/snigate/snigate/internal/resources"
)

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
