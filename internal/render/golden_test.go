package render

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/translate"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current output")

var fixedNow = metav1.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func now() metav1.Time { return fixedNow }

// goldenOptions: inputs named cluster-*.in.yaml render as in a cluster with cert-manager.
func goldenOptions(in string) Options {
	return Options{Now: now, CertManager: strings.HasPrefix(filepath.Base(in), "cluster-")}
}

// golden is what a *.out.yaml holds: the rendered objects and each TenantGateway's status
// after translate saw the rendered Gateways.
type golden struct {
	Gateways     []*gwv1.Gateway               `json:"gateways,omitempty"`
	ListenerSets []*gwv1.ListenerSet           `json:"listenerSets,omitempty"`
	HTTPRoutes   []*gwv1.HTTPRoute             `json:"httpRoutes,omitempty"`
	TLSRoutes    []*gwv1.TLSRoute              `json:"tlsRoutes,omitempty"`
	TCPRoutes    []*gwv1.TCPRoute              `json:"tcpRoutes,omitempty"`
	Access       []*v1alpha1.AccessPolicy      `json:"accessPolicies,omitempty"`
	Issuers      []*cmv1.Issuer                `json:"issuers,omitempty"`
	Certificates []*cmv1.Certificate           `json:"certificates,omitempty"`
	Tenants      []Tenant                      `json:"tenants,omitempty"`
	Exposures    []Exposure                    `json:"databaseExposures,omitempty"`
	CertNames    []CertificateNames            `json:"certificateNames,omitempty"`
	Errors       []string                      `json:"translateErrors,omitempty"`
	Gateway      []translate.GatewayStatus     `json:"gatewayStatus,omitempty"`
	ListenerSet  []translate.ListenerSetStatus `json:"listenerSetStatus,omitempty"`
	// Routes is each route's Accepted condition per parent: which routes the tenant tree let in.
	Routes []string `json:"routes,omitempty"`
}

// run renders res, translates the merge and completes the status, as the runner does.
func run(res *resources.Resources, opts Options) (*Result, *translate.Result) {
	out := Render(res, opts)
	tr := translate.Translate(out.Merge(res), translate.Options{Now: opts.Now, Generation: 1})
	Complete(out, tr.Status, opts.Now)
	return out, tr
}

func renderGolden(t *testing.T, out *Result, tr *translate.Result) string {
	t.Helper()
	g := golden{Gateways: out.Gateways, ListenerSets: out.ListenerSets, HTTPRoutes: out.HTTPRoutes, TLSRoutes: out.TLSRoutes, TCPRoutes: out.TCPRoutes, Access: out.AccessPolicies,
		Issuers: out.Issuers, Certificates: out.Certificates, Tenants: out.Tenants, Exposures: out.Exposures, CertNames: out.CertificateNames}
	for _, e := range tr.Errors {
		g.Errors = append(g.Errors, e.Error())
	}
	if tr.Status != nil {
		for _, gs := range tr.Status.Gateways {
			for _, rg := range out.Gateways {
				if gs.Namespace == rg.Namespace && gs.Name == rg.Name {
					g.Gateway = append(g.Gateway, gs)
				}
			}
		}
		for _, ss := range tr.Status.ListenerSets {
			for _, rs := range out.ListenerSets {
				if ss.Namespace == rs.Namespace && ss.Name == rs.Name {
					g.ListenerSet = append(g.ListenerSet, ss)
				}
			}
		}
	}
	if tr.Status != nil {
		add := func(kind, ns, name string, parents []gwv1.RouteParentStatus) {
			for _, p := range parents {
				for _, c := range p.Conditions {
					if c.Type == string(gwv1.RouteConditionAccepted) {
						g.Routes = append(g.Routes, fmt.Sprintf("%s %s/%s -> %s/%s: %s %s: %s", kind, ns, name,
							deref(p.ParentRef.Namespace, ns), p.ParentRef.Name, c.Status, c.Reason, c.Message))
					}
				}
			}
		}
		for _, r := range tr.Status.HTTPRoutes {
			add("HTTPRoute", r.Namespace, r.Name, r.Status.Parents)
		}
		for _, r := range tr.Status.TLSRoutes {
			add("TLSRoute", r.Namespace, r.Name, r.Status.Parents)
		}
		for _, r := range tr.Status.TCPRoutes {
			add("TCPRoute", r.Namespace, r.Name, r.Status.Parents)
		}
	}
	b, err := yaml.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGolden renders every testdata/*.in.yaml and compares with *.out.yaml; the output must
// not depend on the order of the input. go test ./internal/render -update rewrites them.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			res, err := file.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			out, tr := run(res, goldenOptions(in))
			got := renderGolden(t, out, tr)
			rout, rtr := run(resources.Reversed(res), goldenOptions(in))
			if again := renderGolden(t, rout, rtr); again != got {
				t.Errorf("output depends on input order:\n%s", cmp.Diff(got, again))
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
				t.Fatalf("%v (run go test ./internal/render -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s differs (-want +got); if intended, run go test ./internal/render -update:\n%s", outFile, diff)
			}
		})
	}
}

func deref[T ~string](p *T, def string) string {
	if p == nil {
		return def
	}
	return string(*p)
}
