package file

import (
	"os"
	"path/filepath"
	"testing"
)

// A reload converts only the files whose content changed, and always sees current content.
func TestConversionCache(t *testing.T) {
	dir := t.TempDir()
	svc := func(name string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  ports:\n  - port: 1\n"
	}
	write := func(f, content string) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", svc("a"))
	write("b.yaml", svc("b"))
	first, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(f string) convEntry {
		conversions.mu.Lock()
		defer conversions.mu.Unlock()
		return conversions.m[filepath.Join(dir, f)]
	}
	a1, b1 := entry("a.yaml"), entry("b.yaml")
	write("b.yaml", svc("b2"))
	res, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if names := []string{res.Services[0].Name, res.Services[1].Name}; names[0] != "a" || names[1] != "b2" {
		t.Fatalf("services after the change: %v", names)
	}
	if a2 := entry("a.yaml"); &a2.conv[0] != &a1.conv[0] {
		t.Error("the unchanged file was converted again")
	}
	if res.Services[0] != first.Services[0] {
		t.Error("the unchanged file's object was decoded again")
	}
	if res.Services[1] == first.Services[1] {
		t.Error("the changed file's object was reused")
	}
	if b2 := entry("b.yaml"); b2.sum == b1.sum {
		t.Error("the changed file kept its old conversion")
	}
	os.Remove(filepath.Join(dir, "b.yaml"))
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	conversions.mu.Lock()
	_, kept := conversions.m[filepath.Join(dir, "b.yaml")]
	conversions.mu.Unlock()
	if kept {
		t.Error("a removed file stays in the cache")
	}
}
