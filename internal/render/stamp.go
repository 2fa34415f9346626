package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationRendered on every rendered object is a digest of the object as rendered (all of
// it but this annotation). In a cluster the controller applies the object as it is, so the
// copy the API server holds says which render it is: Merge translates that copy in place of
// the rendered object once the digests agree (its status then names the generation the API
// server gave it), and the rendered object itself until then (served before its round trip
// through the API server).
const AnnotationRendered = "snigate.dev/rendered"

// stamp sets o's AnnotationRendered. o is this render's own object, not yet shared.
func stamp[T metav1.Object](o T) {
	a := maps.Clone(o.GetAnnotations())
	delete(a, AnnotationRendered)
	if len(a) == 0 {
		a = nil
	}
	o.SetAnnotations(a)
	b, err := json.Marshal(o)
	if err != nil {
		// Rendered objects are plain API types: they always encode.
		panic("render: encoding a rendered object: " + err.Error())
	}
	sum := sha256.Sum256(b)
	setAnnotation(o, AnnotationRendered, hex.EncodeToString(sum[:8]))
}

// setAnnotation sets one annotation of o on a copy of its map (which render may share with
// an input object).
func setAnnotation[T metav1.Object](o T, key, value string) {
	a := maps.Clone(o.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	o.SetAnnotations(a)
}

// sameRendered reports whether in, an input object, is the cluster's copy of rendered: both
// carry the same AnnotationRendered.
func sameRendered(in, rendered metav1.Object) bool {
	d := rendered.GetAnnotations()[AnnotationRendered]
	return d != "" && in.GetAnnotations()[AnnotationRendered] == d
}
