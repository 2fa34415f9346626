package blockyaml

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// accepted are documents ToJSON converts, with the JSON it writes.
var accepted = []struct{ yaml, json string }{
	{"a: b\n", `{"a":"b"}`},
	{"a: 1\nb: -20\nc: 0\nd: true\ne: false\n", `{"a":1,"b":-20,"c":0,"d":true,"e":false}`},
	{"a:\n  b: c\n  d:\n    e: f\n", `{"a":{"b":"c","d":{"e":"f"}}}`},
	{"a:\n- b\n- c\nd: e\n", `{"a":["b","c"],"d":"e"}`},
	{"a:\n  - b\n  -   c\n", `{"a":["b","c"]}`},
	{"a:\n- name: x\n  port: 1\n- name: z\n", `{"a":[{"name":"x","port":1},{"name":"z"}]}`},
	{"a:\n-   name: x\n    port: 1\n", `{"a":[{"name":"x","port":1}]}`},
	{"a:\n- - b\n  - c\n- d\n", `{"a":[["b","c"],"d"]}`},
	{"a:\n-\n  b: c\n-\n", `{"a":[{"b":"c"},null]}`},
	{"a:\nb:\n", `{"a":null,"b":null}`},
	{"a: \"x \\\"y\\\" \\\\ \\n\\t/\"\n", `{"a":"x \"y\" \\ \n\t/"}`},
	{"a: 'it''s'\n\"b\": 'c' # note\n", `{"a":"it's","b":"c"}`},
	{"a: [\"127.0.0.1\", b, 2, 'c']\nd: []\ne: {}\n", `{"a":["127.0.0.1","b",2,"c"],"d":[],"e":{}}`},
	{"# head\na: b # tail\n\n  # indented comment\nc: d#e\n", `{"a":"b","c":"d#e"}`},
	{"a: 127.0.0.1\nb: http://x:80/y\nc: a b\nd: yesterday\n", `{"a":"127.0.0.1","b":"http://x:80/y","c":"a b","d":"yesterday"}`},
	{"  a: b\n  c: d\n", `{"a":"b","c":"d"}`},
	{"a: \"*.example.com\"\nmetadata:\n  labels:\n    kubernetes.io/service-name: be\n", `{"a":"*.example.com","metadata":{"labels":{"kubernetes.io/service-name":"be"}}}`},
}

// declined are documents ToJSON leaves to sigs.k8s.io/yaml.
var declined = []string{
	"",
	"# only a comment\n",
	"- a\n- b\n",
	"a\n",
	"a: b\na: c\n",     // duplicate key
	"a: b\n\"a\": c\n", // the same key, quoted
	"a: &x b\nc: *x\n", // anchor, alias
	"a: !!str 1\n",     // tag
	"a: |\n  text\n",   // block scalar
	"a: >\n  text\n",   // folded scalar
	"a: b\n  c\n",      // multi-line plain scalar
	"a: \"b\n  c\"\n",  // multi-line quoted scalar
	"a:\tb\n",          // tab
	"a: b\r\n",         // carriage return
	"a: é\n",           // non-ASCII
	"a: yes\n", "a: on\n", "a: ~\n", "a: null\n", "a: Null\n", "a: y\n", "a: NO\n",
	"a: 1.5\n", "a: 1e3\n", "a: 0777\n", "a: 0x1f\n", "a: +1\n", "a: 1_000\n", "a: -0\n",
	"a: .inf\n", "a: 2001-12-14\n", "a: 12345678901234567890\n",
	"yes: a\n", "1: a\n", "<<: a\n", "null: a\n", // keys YAML 1.1 does not read as strings
	"a: {b: c}\n", "a: [b, [c]]\n", "a: [b\n", "a: [b,]\n",
	"? a\n: b\n",
	"a: b: c\n",
	"a:b\n",
	"a: \"x\\u0041\"\n", "a: \"x\\/\"\n", // escapes other than the common ones
	"a: 'b'c\n",
	"a:\n  b: c\n d: e\n", // inconsistent indentation
	"a:\n  - b\n   - c\n",
	"%YAML 1.1\na: b\n",
	"a: b\n...\n",
	"a: - b\n",
}

func TestAccepted(t *testing.T) {
	for _, c := range accepted {
		got, ok := ToJSON([]byte(c.yaml))
		if !ok {
			t.Errorf("ToJSON(%q) declined", c.yaml)
			continue
		}
		if string(got) != c.json {
			t.Errorf("ToJSON(%q) = %s, want %s", c.yaml, got, c.json)
		}
		agrees(t, []byte(c.yaml), got)
	}
}

func TestDeclined(t *testing.T) {
	for _, d := range declined {
		if got, ok := ToJSON([]byte(d)); ok {
			t.Errorf("ToJSON(%q) = %s, want it declined", d, got)
		}
	}
}

// agrees fails unless sigs.k8s.io/yaml reads doc as the same value as js.
func agrees(t *testing.T, doc, js []byte) {
	t.Helper()
	want, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		t.Fatalf("ToJSON accepted %q, which sigs.k8s.io/yaml refuses: %v", doc, err)
	}
	if a, b := decode(t, js), decode(t, want); !reflect.DeepEqual(a, b) {
		t.Fatalf("ToJSON(%q) = %s, sigs.k8s.io/yaml says %s", doc, js, want)
	}
}

func decode(t *testing.T, js []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("invalid JSON %s: %v", js, err)
	}
	return v
}

// FuzzToJSON checks the package's contract: whatever ToJSON converts, sigs.k8s.io/yaml
// converts to the same value.
func FuzzToJSON(f *testing.F) {
	for _, c := range accepted {
		f.Add([]byte(c.yaml))
	}
	for _, d := range declined {
		f.Add([]byte(d))
	}
	// The examples, one document at a time.
	files, _ := filepath.Glob("../../../../examples/*/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			f.Add(doc)
		}
	}
	var reused Converter // across inputs: whatever it converted before must not show
	f.Fuzz(func(t *testing.T, doc []byte) {
		js, ok := ToJSON(doc)
		if ok {
			agrees(t, doc, js)
		}
		again, okAgain := reused.ToJSON(doc)
		if okAgain != ok || !bytes.Equal(again, js) {
			t.Fatalf("a reused Converter: %q, %v; ToJSON: %q, %v", again, okAgain, js, ok)
		}
	})
}

// A Converter gives what ToJSON gives, whatever it converted or declined before, larger or
// smaller.
func TestConverterReuse(t *testing.T) {
	var docs []string
	docs = append(docs, string(scaleDocument()))
	for i, c := range accepted {
		docs = append(docs, c.yaml)
		if i < len(declined) {
			docs = append(docs, declined[i])
		}
	}
	docs = append(docs, string(scaleDocument()), "a: b\n")
	var c Converter
	for _, doc := range docs {
		want, wantOK := ToJSON([]byte(doc))
		got, ok := c.ToJSON([]byte(doc))
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Errorf("Converter.ToJSON(%q) = %s, %v; ToJSON gives %s, %v", doc, got, ok, want, wantOK)
		}
	}
}

// scaleDocument is one document of the benchmark's route-scale file (internal/standalone's
// writeRoutes): a TLSRoute with 16 hostnames.
func scaleDocument() []byte {
	var b bytes.Buffer
	b.WriteString("apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata:\n  name: r-7\n  namespace: default\nspec:\n  parentRefs:\n  - name: bench\n    sectionName: pass\n  hostnames:\n")
	for i := range 16 {
		fmt.Fprintf(&b, "  - %q\n", fmt.Sprintf("h%d.scale.test", 112+i))
	}
	b.WriteString("  rules:\n  - backendRefs:\n    - name: be\n      port: 443\n")
	return b.Bytes()
}

// BenchmarkToJSON compares ToJSON with the path it shortcuts, on the document the package
// exists for (see the package doc for the other libraries measured).
func BenchmarkToJSON(b *testing.B) {
	doc := scaleDocument()
	b.Run("blockyaml", func(b *testing.B) {
		for b.Loop() {
			if _, ok := ToJSON(doc); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("blockyaml-reused", func(b *testing.B) {
		var c Converter
		for b.Loop() {
			if _, ok := c.ToJSON(doc); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("sigs.k8s.io-yaml", func(b *testing.B) {
		for b.Loop() {
			if _, err := yaml.YAMLToJSONStrict(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestScaleDocumentAccepted(t *testing.T) {
	doc := scaleDocument()
	js, ok := ToJSON(doc)
	if !ok {
		t.Fatalf("ToJSON declined the route-scale document:\n%s", doc)
	}
	agrees(t, doc, js)
}
