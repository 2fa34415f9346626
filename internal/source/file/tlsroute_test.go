package file

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// tlsRouteSeeds are TLSRoute documents as JSON: ones decodeTLSRoute takes, and near misses
// it must leave to the strict decode.
var tlsRouteSeeds = []string{
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"name":"r-1","namespace":"default"},"spec":{"parentRefs":[{"name":"bench","sectionName":"pass"}],"hostnames":["h1.scale.test","h2.scale.test"],"rules":[{"backendRefs":[{"name":"be","port":443}]}]}}`,
	` { "kind" : "TLSRoute" , "apiVersion":"gateway.networking.k8s.io/v1", "metadata":{"name":"a","labels":{"x":"y","z":""},"annotations":{}},
	  "spec":{"parentRefs":[{"group":"gateway.networking.k8s.io","kind":"Gateway","namespace":"ns","name":"gw","port":8443}],"hostnames":[],"rules":[{"name":"r","backendRefs":[{"group":"","kind":"Service","name":"s","namespace":"o","port":1,"weight":-0},{"name":"t","weight":2147483647}]},{"backendRefs":[]}]}} `,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"name":"ü"},"spec":{"parentRefs":[],"rules":[]}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{},"spec":{}}`,
	// Near misses.
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"name":"a"},"spec":{"hostnames":["a"]},"status":{}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"name":"a","name":"b"}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"Name":"a"}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"name":"a\u0062"}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"name":"a","generation":2}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","spec":{"rules":[{"backendRefs":[{"name":"s","port":443.0}]}]}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","spec":{"rules":[{"backendRefs":[{"name":"s","port":2147483648}]}]}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","spec":{"rules":[{"backendRefs":[{"name":"s","port":0443}]}]}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","spec":{"rules":[{"backendRefs":[{"name":"s","port":null}]}]}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","spec":{"hostnames":"a"}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","spec":{"hostnames":["a",]}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute","metadata":{"labels":{"a":"1","a":"2"}}}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"TLSRoute"} {}`,
	`{"apiVersion":"gateway.networking.k8s.io/v1beta1","kind":"TLSRoute","metadata":{"name":"a"}}`,
	`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}`,
	"{\"apiVersion\":\"gateway.networking.k8s.io/v1\",\"kind\":\"TLSRoute\",\"metadata\":{\"name\":\"\xff\"}}",
}

// checkTLSRoute fails when decodeTLSRoute takes a document and the strict decode gives
// anything else: an error, a strict error or another object.
func checkTLSRoute(t *testing.T, js []byte) bool {
	got := decodeTLSRoute(js)
	if got == nil {
		return false
	}
	var want gwv1.TLSRoute
	strict, err := kjson.UnmarshalStrict(js, &want)
	if err != nil || len(strict) > 0 {
		t.Fatalf("decodeTLSRoute took %s, which the strict decode refuses: %v %v", js, err, strict)
	}
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("decodeTLSRoute(%s) =\n%#v\nthe strict decode gives\n%#v", js, got, &want)
	}
	return true
}

func TestDecodeTLSRoute(t *testing.T) {
	taken := 0
	for _, s := range tlsRouteSeeds {
		if checkTLSRoute(t, []byte(s)) {
			taken++
		}
	}
	// The first four seeds are meant for the quick path: it must not quietly decline all.
	if taken != 4 {
		t.Errorf("decodeTLSRoute took %d seeds, want 4", taken)
	}
	// Every TLSRoute of the translate goldens, as the YAML converter writes it.
	files, _ := filepath.Glob("../../translate/testdata/*.in.yaml")
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitDocuments(data) {
			if !strings.Contains(string(doc.data), "kind: TLSRoute") {
				continue
			}
			js, err := yaml.YAMLToJSON(doc.data)
			if err != nil {
				continue
			}
			if checkTLSRoute(t, js) {
				n++
			}
		}
	}
	if n == 0 {
		t.Error("no golden TLSRoute took the quick path")
	}
}

func FuzzDecodeTLSRoute(f *testing.F) {
	for _, s := range tlsRouteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) { checkTLSRoute(t, js) })
}
