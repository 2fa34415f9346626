package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/source/file"
)

const renderUsage = `Usage: snigate render -f PATH [flags]

Prints the Gateway API and cert-manager objects that the TenantGateways and
DatabaseExposures in PATH render to, as YAML documents, in a fixed order (Gateways,
ListenerSets, HTTPRoutes, TLSRoutes, TCPRoutes, Issuers, Certificates; each by namespace and name): for
review, and for GitOps. A TenantGateway that renders nothing, or a DatabaseExposure that
publishes nothing, is named on stderr with the reason, and the exit code is 1.

Flags:
`

// renderCmd prints the rendered objects of the TenantGateways in the files.
func renderCmd(args []string, out, errOut io.Writer) (int, error) {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), renderUsage)
		fs.PrintDefaults()
	}
	var paths pathsFlag
	fs.Var(&paths, "f", "manifest file or folder (repeatable)")
	certManager := fs.Bool("cert-manager", true, "render for a cluster where cert-manager issues the certificates")
	cmNamespace := fs.String("cert-manager-namespace", "cert-manager", "namespace of cert-manager, whose routes may use the http listener")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if len(paths) == 0 {
		return 2, fmt.Errorf("render: -f PATH is required")
	}
	res, err := file.Load(paths...)
	if err != nil {
		return 1, err
	}
	r := render.Render(res, render.Options{CertManager: *certManager, CertManagerNamespace: *cmNamespace})
	var docs []any
	docs = appendSorted(docs, r.Gateways)
	docs = appendSorted(docs, r.ListenerSets)
	docs = appendSorted(docs, r.HTTPRoutes)
	docs = appendSorted(docs, r.TLSRoutes)
	docs = appendSorted(docs, r.TCPRoutes)
	docs = appendSorted(docs, r.Issuers)
	docs = appendSorted(docs, r.Certificates)
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return 1, err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		out.Write(b)
	}
	code := 0
	for _, t := range r.Tenants {
		if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionAccepted); c != nil && c.Status != metav1.ConditionTrue {
			fmt.Fprintf(errOut, "TenantGateway %s/%s: not rendered: %s: %s\n", t.Namespace, t.Name, c.Reason, c.Message)
			code = 1
		} else if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue && c.Reason != v1alpha1.ReasonPending {
			fmt.Fprintf(errOut, "TenantGateway %s/%s: %s: %s\n", t.Namespace, t.Name, c.Reason, c.Message)
			code = 1
		}
	}
	for _, x := range r.Exposures {
		if c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionAccepted); c != nil && c.Status != metav1.ConditionTrue {
			fmt.Fprintf(errOut, "DatabaseExposure %s/%s: not published: %s: %s\n", x.Namespace, x.Name, c.Reason, c.Message)
			code = 1
		}
	}
	return code, nil
}

func appendSorted[T metav1.Object](docs []any, objs []T) []any {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	for _, o := range objs {
		docs = append(docs, o)
	}
	return docs
}
