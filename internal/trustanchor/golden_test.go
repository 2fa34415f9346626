package trustanchor

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml and testdata/pki from the current output")

var fixedNow = metav1.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func now() metav1.Time { return fixedNow }

// A golden input is a YAML stream of TrustAnchors, Secrets, Roles and RoleBindings, in one
// or more passes, and two kinds of group test.snigate.dev that exist only here:
//
//   - Pass (optional field restart: true) starts the next pass. Each pass renders its
//     documents with the previous pass's Result as Options.Previous, as a controller would
//     after applying it: the previous Result's objects are in the pass's input unless the
//     pass has a document of the same kind, namespace and name (someone replaced it), and
//     each TrustAnchor carries the status the previous pass wrote. restart: true renders
//     without Options.Previous (a restarted controller), the cluster as it was.
//   - InUse {metadata: {namespace, name}, certificates: PEM} is what the certificate probe
//     saw for the TrustAnchor <namespace>/<name> in this pass (Options.InUse). A pass
//     without InUse documents has InUse nil: the probe has not reported.
//
// Pass n renders at 2026-01-0n, so a condition that kept its status shows the time of the
// pass that set it. The *.out.yaml is the last pass's Result, its Secrets shown with
// stringData for reading (the Result holds data).
type goldenPass struct {
	in      Input
	inUse   map[types.NamespacedName][]*x509.Certificate
	restart bool
}

// decodeGolden reads a golden input; the file loader does not know TrustAnchors, Roles or
// RoleBindings (resources.Kinds), so this is a small strict decoder of its own.
func decodeGolden(data []byte) ([]goldenPass, error) {
	passes := []goldenPass{{}}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return passes, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if string(js) == "null" {
			continue
		}
		var h metav1.TypeMeta
		if err := json.Unmarshal(js, &h); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		p := &passes[len(passes)-1]
		strict := func(obj any) error {
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				return fmt.Errorf("document %d (%s): %w", n, h.Kind, err)
			}
			return nil
		}
		switch h.APIVersion + " " + h.Kind {
		case "test.snigate.dev/v1 Pass":
			var pass struct {
				metav1.TypeMeta `json:",inline"`
				Restart         bool `json:"restart"`
			}
			if err := strict(&pass); err != nil {
				return nil, err
			}
			passes = append(passes, goldenPass{restart: pass.Restart})
		case "test.snigate.dev/v1 InUse":
			var u struct {
				metav1.TypeMeta `json:",inline"`
				Metadata        types.NamespacedName `json:"metadata"`
				Certificates    string               `json:"certificates"`
			}
			if err := strict(&u); err != nil {
				return nil, err
			}
			if p.inUse == nil {
				p.inUse = map[types.NamespacedName][]*x509.Certificate{}
			}
			p.inUse[u.Metadata] = append(p.inUse[u.Metadata], parsePEM(u.Certificates)...)
		case "snigate.dev/v1alpha1 TrustAnchor":
			a := &v1alpha1.TrustAnchor{}
			if err := strict(a); err != nil {
				return nil, err
			}
			if a.Generation == 0 {
				a.Generation = 1 // as the API server, and the file loader
			}
			p.in.TrustAnchors = append(p.in.TrustAnchors, a)
		case "v1 Secret":
			s := &corev1.Secret{}
			if err := strict(s); err != nil {
				return nil, err
			}
			for k, v := range s.StringData { // as the API server does
				if s.Data == nil {
					s.Data = map[string][]byte{}
				}
				s.Data[k] = []byte(v)
			}
			s.StringData = nil
			p.in.Secrets = append(p.in.Secrets, s)
		case "rbac.authorization.k8s.io/v1 Role":
			o := &rbacv1.Role{}
			if err := strict(o); err != nil {
				return nil, err
			}
			p.in.Roles = append(p.in.Roles, o)
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			o := &rbacv1.RoleBinding{}
			if err := strict(o); err != nil {
				return nil, err
			}
			p.in.RoleBindings = append(p.in.RoleBindings, o)
		default:
			return nil, fmt.Errorf("document %d: unknown kind %s %s", n, h.APIVersion, h.Kind)
		}
	}
}

func parsePEM(s string) []*x509.Certificate {
	var certs []*x509.Certificate
	for rest := []byte(s); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return certs
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			panic(err)
		}
		certs = append(certs, c)
	}
}

// runPasses renders the passes in order, as a controller would (see goldenPass), and
// returns the last Result. reversed reverses every input list first; memo, when set, is
// kept across the passes as the controller keeps it.
func runPasses(passes []goldenPass, reversed bool, memo *GuardMemo) *Result {
	var prev *Result
	for i, p := range passes {
		in := p.in
		if prev != nil {
			in.Secrets = withApplied(in.Secrets, prev.Secrets)
			in.Roles = withApplied(in.Roles, prev.Roles)
			in.RoleBindings = withApplied(in.RoleBindings, prev.RoleBindings)
			in.TrustAnchors = slices.Clone(in.TrustAnchors)
			for j, a := range in.TrustAnchors {
				for _, pa := range prev.Anchors {
					if pa.Namespace == a.Namespace && pa.Name == a.Name && a.Status.Conditions == nil {
						a = a.DeepCopy()
						a.Status = pa.Status
						in.TrustAnchors[j] = a
					}
				}
			}
		}
		if reversed {
			in = Input{TrustAnchors: rev(in.TrustAnchors), Secrets: rev(in.Secrets), Roles: rev(in.Roles), RoleBindings: rev(in.RoleBindings)}
		}
		day := metav1.NewTime(fixedNow.AddDate(0, 0, i))
		opts := Options{Now: func() metav1.Time { return day }, Previous: prev, InUse: p.inUse, Memo: memo}
		if p.restart {
			opts.Previous = nil
		}
		prev = Render(in, opts)
	}
	return prev
}

// withApplied is objs with the applied ones added, unless objs has one of the same name.
func withApplied[T metav1.Object](objs, applied []T) []T {
	out := slices.Clone(objs)
	for _, a := range applied {
		if !slices.ContainsFunc(objs, func(o T) bool { return o.GetNamespace() == a.GetNamespace() && o.GetName() == a.GetName() }) {
			out = append(out, a)
		}
	}
	return out
}

func rev[T any](s []T) []T {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

// golden is what a *.out.yaml holds.
type golden struct {
	Secrets      []*corev1.Secret      `json:"secrets,omitempty"`
	Roles        []*rbacv1.Role        `json:"roles,omitempty"`
	RoleBindings []*rbacv1.RoleBinding `json:"roleBindings,omitempty"`
	Anchors      []Anchor              `json:"anchors,omitempty"`
}

func renderGolden(t *testing.T, out *Result) string {
	t.Helper()
	g := golden{Roles: out.Roles, RoleBindings: out.RoleBindings, Anchors: out.Anchors}
	for _, s := range out.Secrets {
		s = s.DeepCopy()
		s.StringData = map[string]string{}
		for k, v := range s.Data {
			s.StringData[k] = string(v)
		}
		s.Data = nil
		g.Secrets = append(g.Secrets, s)
	}
	b, err := yaml.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGolden renders every testdata/*.in.yaml and compares with *.out.yaml; the output must
// not depend on the order of the input. go test ./internal/trustanchor -update rewrites them.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			passes, err := decodeGolden(data)
			if err != nil {
				t.Fatal(err)
			}
			got := renderGolden(t, runPasses(passes, false, nil))
			if again := renderGolden(t, runPasses(passes, true, nil)); again != got {
				t.Errorf("output depends on input order:\n%s", cmp.Diff(got, again))
			}
			// Guard's memo changes nothing, whatever the order (its entries are shared).
			memo := &GuardMemo{}
			for _, reversed := range []bool{false, true, false} {
				if withMemo := renderGolden(t, runPasses(passes, reversed, memo)); withMemo != got {
					t.Errorf("output with Guard's memo (reversed %v) differs:\n%s", reversed, cmp.Diff(got, withMemo))
				}
			}
			outFile := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(outFile, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(outFile)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/trustanchor -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s differs (-want +got); if intended, run go test ./internal/trustanchor -update:\n%s", outFile, diff)
			}
		})
	}
}
