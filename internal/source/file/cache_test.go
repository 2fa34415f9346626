package file

import (
	"os"
	"path/filepath"
	"testing"
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
	cached := func(f string) bool {
		fileCache.mu.Lock()
		defer fileCache.mu.Unlock()
		_, ok := fileCache.m[filepath.Join(dir, f)]
		return ok
	}
	write("a.yaml", svc("a"))
	write("b.yaml", svc("b"))
	first, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	write("b.yaml", svc("b2"))
	res, err := Load(dir)
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
	if res, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if res.Services[1].Name != "b" {
		t.Fatalf("service after the file shrank: %s", res.Services[1].Name)
	}

	// A file with an error is not cached: the next load reports the error again.
	write("c.yaml", svc("c")+"bogus: 1\n")
	if _, err := Load(dir); err == nil {
		t.Fatal("unknown field accepted")
	}
	if cached("c.yaml") {
		t.Error("a file with an error is cached")
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("unknown field accepted on the second load")
	}

	// A duplicate across files is found when both files come from the cache.
	write("c.yaml", svc("a"))
	if _, err := Load(dir); err == nil {
		t.Fatal("duplicate accepted")
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("duplicate accepted when both files are cached")
	}

	os.Remove(filepath.Join(dir, "b.yaml"))
	os.Remove(filepath.Join(dir, "c.yaml"))
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	if cached("b.yaml") {
		t.Error("a removed file stays in the cache")
	}
}
