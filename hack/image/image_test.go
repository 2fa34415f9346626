package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image as `docker load` and a registry would see it: written by run as a tarball and an
// OCI layout, read back with go-containerregistry, its config and file system checked, and
// the binary taken out of it run.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "snigate-static")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=v9.9.9-test", "-o", bin, "../../cmd/snigate")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tarPath, ociPath := filepath.Join(dir, "image.tar"), filepath.Join(dir, "oci")
	o := Options{Binary: bin, CABundle: ca, Version: "v9.9.9-test", Revision: "abc123"}
	if err := run(o, "", tarPath, ociPath); err != nil {
		t.Fatal(err)
	}

	ref, err := name.NewTag("snigate:v9.9.9-test")
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(tarPath, &ref)
	if err != nil {
		t.Fatalf("the tarball holds no image tagged %s: %v", ref, err)
	}
	p, err := layout.FromPath(ociPath)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v9.9.9-test" {
		t.Fatalf("OCI layout index %+v, %v", im, err)
	}
	fromOCI, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Both forms hold the one image (the docker tarball keeps config and layers; its
	// manifest is docker's), and the same inputs give the same image.
	again, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ct, _ := fromTar.ConfigName()
	co, _ := fromOCI.ConfigName()
	do, _ := fromOCI.Digest()
	da, _ := again.Digest()
	if ct != co || do != da {
		t.Errorf("tarball config %s, OCI layout config %s; OCI digest %s, rebuilt %s", ct, co, do, da)
	}

	cf, err := fromOCI.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/snigate" || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %v, cmd %v", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("user %q, platform %s/%s", c.User, cf.OS, cf.Architecture)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title": "snigate", "org.opencontainers.image.version": "v9.9.9-test",
		"org.opencontainers.image.revision": "abc123", "org.opencontainers.image.source": "https://github.com/snigate/snigate",
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	layers, err := fromOCI.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v; want 1 on an empty base", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); !strings.Contains(string(mt), "oci.image.layer") {
		t.Errorf("layer media type %s", mt)
	}

	// The file system: a root-owned, read-only-friendly tree with nothing but these.
	files := readFS(t, fromTar)
	want := map[string]int64{"etc": 0o755, "etc/passwd": 0o644, "etc/group": 0o644, "etc/ssl": 0o755,
		"etc/ssl/certs": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "snigate": 0o755}
	for n, mode := range want {
		h, ok := files[n]
		if !ok {
			t.Errorf("no %s in the image", n)
			continue
		}
		if h.Mode != mode || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mode %o uid %d gid %d", n, h.Mode, h.Uid, h.Gid)
		}
	}
	if len(files) != len(want) {
		t.Errorf("files %v, want exactly %v", keys(files), keys(want))
	}
	if !strings.Contains(string(files["etc/passwd"].data), ":65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532: %q", files["etc/passwd"].data)
	}

	// The binary from the image runs.
	extracted := filepath.Join(dir, "from-image")
	if err := os.WriteFile(extracted, files["snigate"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "snigate v9.9.9-test" {
		t.Errorf("snigate version from the image: %q, %v", out, err)
	}
}

type entry struct {
	*tar.Header
	data []byte
}

// readFS is the image's flattened file system (mutate.Extract), by path.
func readFS(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, tr); err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = entry{h, b.Bytes()}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
