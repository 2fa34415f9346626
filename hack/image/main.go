// Command image builds snigate's container image without a Docker daemon: one layer on an
// empty base (FROM scratch) holding the static binary, a CA bundle and a passwd entry for
// the non-root user, written as a `docker load`-able tarball and as an OCI image layout.
//
//	go run ./hack/image --binary bin/snigate-static --tarball bin/snigate-image.tar \
//	    --oci bin/snigate-oci --tag snigate:v1.2.3 --version v1.2.3
//
// scripts/image.sh builds the binary and runs it. The image format (layer digests, config,
// manifest, tarball and layout) is go-containerregistry's; only the layer's few file
// entries are written here with archive/tar, because its file-map helper (crane.Layer)
// gives every file mode 0, and the binary must be executable.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// Entrypoint is where the binary is in the image.
	Entrypoint = "/snigate"
	// User is the image's user: non-root, the UID the install manifests run as.
	User = "65532:65532"
)

// Options are what goes into the image.
type Options struct {
	Binary   string // the static snigate binary
	CABundle string // PEM roots for the backends' and ACME servers' certificates
	Version  string // org.opencontainers.image.version and the default tag
	Revision string // org.opencontainers.image.revision (a commit), optional
	// Created is the image's creation time; zero: the Unix epoch, so that the same inputs
	// give the same image digest.
	Created time.Time
}

// Build assembles the image.
func Build(o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", o.CABundle)
	}
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: Entrypoint[1:], mode: 0o755, data: bin},
	}
	layerTar, err := tarOf(files, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: o.Created.UTC()}
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "snigate",
		"org.opencontainers.image.description": "One IP, many TLS services: a Kubernetes Gateway API implementation that routes by SNI without terminating TLS",
		"org.opencontainers.image.source":      "https://github.com/snigate/snigate",
		"org.opencontainers.image.version":     o.Version,
	}
	if o.Revision != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = o.Revision
	}
	return mutate.ConfigFile(img, cf)
}

type file struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// tarOf is the layer's file system: entries owned by root, at time t.
func tarOf(files []file, t time.Time) ([]byte, error) {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: t, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func main() {
	var o Options
	flag.StringVar(&o.Binary, "binary", "bin/snigate-static", "the static snigate binary (CGO_ENABLED=0)")
	flag.StringVar(&o.CABundle, "ca", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put into the image")
	flag.StringVar(&o.Version, "version", "dev", "version label")
	flag.StringVar(&o.Revision, "revision", "", "revision label (a commit)")
	tag := flag.String("tag", "", "image reference in the tarball (default snigate:<version>)")
	tarPath := flag.String("tarball", "", "write a `docker load`-able tarball here")
	ociPath := flag.String("oci", "", "write an OCI image layout into this folder")
	flag.Parse()
	if err := run(o, *tag, *tarPath, *ociPath); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o Options, tag, tarPath, ociPath string) error {
	if tarPath == "" && ociPath == "" {
		return errors.New("nothing to write: give --tarball or --oci")
	}
	if tag == "" {
		tag = "snigate:" + o.Version
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	if tarPath != "" {
		if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
			return err
		}
	}
	if ociPath != "" {
		if err := os.RemoveAll(ociPath); err != nil {
			return err
		}
		p, err := layout.Write(ociPath, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref.TagStr()})); err != nil {
			return err
		}
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(ref.String(), d.String())
	return nil
}
