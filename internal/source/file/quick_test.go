package file

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The quick path reuses one converter's buffers for every document; what it decoded from
// one document must not change when the next is converted into the same buffers.
func TestConvertKeepsNoBuffer(t *testing.T) {
	var docs []document
	for i := range 12 {
		var b strings.Builder
		switch i % 4 {
		case 0: // package file's own TLSRoute decoder
			fmt.Fprintf(&b, "apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata:\n  name: route-%d\n  namespace: ns-%d\n  labels:\n    team: t%d\nspec:\n  parentRefs:\n  - name: gw-%d\n    sectionName: pass\n  hostnames:\n  - h%d.example.com\n  rules:\n  - backendRefs:\n    - name: be-%d\n      port: %d\n", i, i, i, i, i, i, 5400+i)
		case 1: // encoding/json through the previous document's type, then by header
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-%d\n  annotations:\n    note: n%d\nspec:\n  ports:\n  - name: p%d\n    port: %d\n", i, i, i, 6000+i)
		case 2: // bytes decoded from base64
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-%d\ntype: Opaque\ndata:\n  key: %s\n", i, "c2VjcmV0LXZhbHVl")
		case 3:
			fmt.Fprintf(&b, "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: gw-%d\nspec:\n  gatewayClassName: class-%d\n  listeners:\n  - name: tls-%d\n    port: %d\n    protocol: TLS\n", i, i, i, 443+i)
		}
		docs = append(docs, document{data: []byte(b.String())})
	}

	var shared converter
	got := make([]converted, len(docs))
	for i, d := range docs {
		got[i] = shared.convert(d.data)
	}
	for i, d := range docs {
		var fresh converter
		want := fresh.convert(d.data)
		if want.obj == nil {
			t.Fatalf("document %d did not take the quick path:\n%s", i, d.data)
		}
		if got[i].obj == nil || !reflect.DeepEqual(got[i].obj.obj, want.obj.obj) || got[i].obj.h != want.obj.h {
			t.Errorf("document %d decoded with a reused converter, after the documents that followed it:\n%+v\nwant\n%+v", i, got[i].obj, want.obj)
		}
	}
}
