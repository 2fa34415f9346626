package file

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/snigate/snigate/internal/resources"
)

// A reload decodes only the files whose content changed, and always sees current content.
func TestFileCache(t *testing.T) {
	dir := t.TempDir()
	svc := func(name string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  ports:\n  - port: 1\n"
	}
	write := func(f, content string) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var ld Loader
	cached := func(f string) bool {
		ld.cache.mu.Lock()
		defer ld.cache.mu.Unlock()
		_, ok := ld.cache.m[filepath.Join(dir, f)]
		return ok
	}
	write("a.yaml", svc("a"))
	write("b.yaml", svc("b"))
	first, err := ld.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	write("b.yaml", svc("b2"))
	res, err := ld.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if names := []string{res.Services[0].Name, res.Services[1].Name}; names[0] != "a" || names[1] != "b2" {
		t.Fatalf("services after the change: %v", names)
	}
	if res.Services[0] != first.Services[0] {
		t.Error("the unchanged file's object was decoded again")
	}
	if res.Services[1] == first.Services[1] {
		t.Error("the changed file's object was reused")
	}
	if got := res.Origins["Service/default/b2"]; got != filepath.Join(dir, "b.yaml")+"#1" {
		t.Errorf("origin of the changed file's object: %q", got)
	}
	// Shorter content than before, read into the same buffer.
	write("b.yaml", svc("b"))
	if res, err = ld.Load(dir); err != nil {
		t.Fatal(err)
	}
	if res.Services[1].Name != "b" {
		t.Fatalf("service after the file shrank: %s", res.Services[1].Name)
	}

	// A file with an error is not cached: the next load reports the error again.
	write("c.yaml", svc("c")+"bogus: 1\n")
	if _, err := ld.Load(dir); err == nil {
		t.Fatal("unknown field accepted")
	}
	if cached("c.yaml") {
		t.Error("a file with an error is cached")
	}
	if _, err := ld.Load(dir); err == nil {
		t.Fatal("unknown field accepted on the second load")
	}

	// A duplicate across files is found when both files come from the cache.
	write("c.yaml", svc("a"))
	if _, err := ld.Load(dir); err == nil {
		t.Fatal("duplicate accepted")
	}
	if _, err := ld.Load(dir); err == nil {
		t.Fatal("duplicate accepted when both files are cached")
	}

	os.Remove(filepath.Join(dir, "b.yaml"))
	os.Remove(filepath.Join(dir, "c.yaml"))
	if _, err := ld.Load(dir); err != nil {
		t.Fatal(err)
	}
	if cached("b.yaml") {
		t.Error("a removed file stays in the cache")
	}
}

// Within a changed file, documents whose text did not change keep their objects, under
// their new document numbers; the others are decoded, and their errors name the right
// document.
func TestFileCacheByDocument(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "all.yaml")
	svc := func(name string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  ports:\n  - port: 1\n"
	}
	write := func(docs ...string) {
		if err := os.WriteFile(f, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byName := func(res *resources.Resources) map[string]*corev1.Service {
		m := map[string]*corev1.Service{}
		for _, s := range res.Services {
			m[s.Name] = s
		}
		return m
	}
	// A List: one document, two objects.
	list := "apiVersion: v1\nkind: List\nitems:\n" +
		"- apiVersion: v1\n  kind: Service\n  metadata:\n    name: l1\n  spec:\n    ports:\n    - port: 1\n" +
		"- apiVersion: v1\n  kind: Service\n  metadata:\n    name: l2\n  spec:\n    ports:\n    - port: 1\n"
	var ld Loader
	write(svc("a"), svc("b"), list, svc("c"))
	first, err := ld.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := byName(first)

	// A new first document shifts the others; b is edited.
	write(svc("z"), svc("a"), svc("b2"), list, svc("c"))
	res, err := ld.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	after := byName(res)
	if len(before) != 5 || after["a"] != before["a"] || after["c"] != before["c"] || after["l1"] != before["l1"] || after["l2"] != before["l2"] {
		t.Errorf("an unchanged document was decoded again, or lost an object: %v, then %v", before, after)
	}
	if after["b2"] == nil || after["z"] == nil || after["b"] != nil || len(after) != 6 {
		t.Fatalf("services after the edit: %v", after)
	}
	for name, doc := range map[string]string{"z": "#1", "a": "#2", "b2": "#3", "l1": "#4/items[0]", "l2": "#4/items[1]", "c": "#5"} {
		if got := res.Origins["Service/default/"+name]; got != f+doc {
			t.Errorf("origin of %s: %q, want %q", name, got, f+doc)
		}
	}

	// An error in a changed document names its number; the unchanged ones still load.
	write(svc("z"), svc("a"), svc("b2")+"bogus: 1\n", svc("c"))
	_, err = ld.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "document 3") {
		t.Fatalf("error %v, want one naming document 3", err)
	}
	// A reused document duplicated is still a duplicate.
	write(svc("a"), svc("a"))
	if _, err := ld.Load(dir); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("error %v, want a duplicate", err)
	}
}

// Loaders share nothing: two runners reading the same files do not evict each other's
// cache, and the package-level Load, which has no cache, decodes everything every time.
func TestLoadersAreIndependent(t *testing.T) {
	dir := t.TempDir()
	svc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  ports:\n  - port: 1\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "b.yaml"), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	var one, two Loader
	first, err := one.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Load(other); err != nil { // keeps only other's files, in its own cache
		t.Fatal(err)
	}
	again, err := one.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Services[0] != first.Services[0] {
		t.Error("another Loader's load evicted this Loader's cache")
	}
	plain1, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain2, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if plain1.Services[0] == plain2.Services[0] || plain1.Services[0] == first.Services[0] {
		t.Error("the package-level Load reused objects: it must not share a cache")
	}
}

// A reload compares each file with the cache through a small buffer: an unchanged file
// is neither allocated nor copied again, and a file that changed anywhere (past the first
// buffer, grown, shrunk to a prefix) is read whole.
func TestFileCacheRead(t *testing.T) {
	dir := t.TempDir()
	svc := func(name string, pad int) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\n" +
			strings.Repeat("# padding\n", pad) + "spec:\n  ports:\n  - port: 1\n"
	}
	write := func(f, content string) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var ld Loader
	data := func(f string) []byte {
		ld.cache.mu.Lock()
		defer ld.cache.mu.Unlock()
		return ld.cache.m[filepath.Join(dir, f)].data
	}
	load := func() {
		t.Helper()
		if _, err := ld.Load(dir); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"a.yaml", "b.yaml"} {
			want, _ := os.ReadFile(filepath.Join(dir, f))
			if got := data(f); string(got) != string(want) {
				t.Fatalf("%s: cached %d bytes that differ from the file's %d", f, len(got), len(want))
			}
		}
	}
	big := svc("a", 100_000) // 1 MB: many comparison buffers
	write("a.yaml", big)
	write("b.yaml", svc("b", 0))
	load()
	a := data("a.yaml")
	load() // the comparison buffer is made once
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ld.Load(dir)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if &data("a.yaml")[0] != &a[0] {
		t.Error("the unchanged file's cached content was replaced")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(big))/4 {
		t.Errorf("a reload of unchanged files allocated %d bytes (a.yaml has %d)", n, len(big))
	}
	// Changes the comparison meets late, a grown file, a file cut to a prefix of itself,
	// and back.
	at := strings.LastIndex(big, "# padding\n") // past the first buffers
	write("a.yaml", big[:at]+"# editing\n"+big[at+10:])
	load()
	write("a.yaml", big+"# one more line\n")
	load()
	write("a.yaml", big[:len(big)/2]) // a Service without a spec, in comments
	load()
	write("a.yaml", big)
	load()
	write("b.yaml", svc("b2", 0))
	load()
}
