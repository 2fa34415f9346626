package translate

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/source/file"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current output")

var fixedNow = metav1.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func testOptions() Options {
	return Options{Now: func() metav1.Time { return fixedNow }, Generation: 1}
}

// goldenOptions are the options the golden input file in is translated with: testOptions,
// plus ProvisionedAddresses for a file named provisioned-*.in.yaml (the input of a cluster
// where internal/provision runs), with UsableAddresses 192.0.2.0/24 (the load balancer's
// pool) for provisioned-pool-*.in.yaml, and UsableAddresses 127.0.0.0/24 for
// local-*.in.yaml (a local proxy's prefix). The file name says it, so the input stays
// plain YAML that file.Load and `snigate check` read as they are.
func goldenOptions(in string) Options {
	o := testOptions()
	base := filepath.Base(in)
	o.ProvisionedAddresses = strings.HasPrefix(base, "provisioned-")
	switch {
	case strings.HasPrefix(base, "local-"):
		o.UsableAddresses = netip.MustParsePrefix("127.0.0.0/24")
	case strings.HasPrefix(base, "provisioned-pool-"):
		o.UsableAddresses = netip.MustParsePrefix("192.0.2.0/24")
	}
	return o
}

// golden is what a *.out.yaml holds: the snapshot as snapshot.Describe shows it and the
// status of every object, or the errors that rejected the input.
type golden struct {
	Errors   []string              `json:"errors,omitempty"`
	Snapshot *snapshot.Description `json:"snapshot,omitempty"`
	Status   *Status               `json:"status,omitempty"`
}

func render(t *testing.T, r *Result) string {
	t.Helper()
	g := golden{Status: r.Status}
	if r.Snapshot != nil {
		d := r.Snapshot.Describe()
		g.Snapshot = &d
	}
	for _, e := range r.Errors {
		g.Errors = append(g.Errors, e.Error())
	}
	out, err := yaml.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestGolden translates every testdata/*.in.yaml and compares with *.out.yaml.
// go test ./internal/translate -update rewrites the goldens; review the diff by hand.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			res, err := file.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			got := render(t, Translate(res, goldenOptions(in)))

			// The output must not depend on the order of the input.
			if again := render(t, Translate(reversed(res), goldenOptions(in))); again != got {
				t.Errorf("output depends on input order:\n%s", cmp.Diff(got, again))
			}

			out := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(out, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/translate -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s differs (-want +got); if intended, run go test ./internal/translate -update:\n%s", out, diff)
			}
		})
	}
}

func reversed(in *resources.Resources) *resources.Resources { return resources.Reversed(in) }
