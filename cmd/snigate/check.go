package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/translate"
	"github.com/snigate/snigate/internal/trustanchor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// check validates manifests without serving. It renders the TenantGateways as serve does,
// prints every TenantGateway's status (writeTenants), every object's status conditions and
// the effective routing table (writeReport), then the problems, and returns exit code 1 when
// the input is rejected or any condition reports a problem (a TenantGateway's
// ListenerBudget warns without failing).
func check(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var paths pathsFlag
	fs.Var(&paths, "f", "manifest file or folder (repeatable)")
	bind := fs.String("bind", "0.0.0.0", "bind address for Gateways without an IPAddress in spec.addresses")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if len(paths) == 0 {
		return 2, fmt.Errorf("check: -f PATH is required")
	}
	res, err := file.Load(paths...)
	if err != nil {
		return 1, err
	}
	// TenantGateways are rendered as serve renders them; the report covers what they render.
	rendered := render.Render(res, render.Options{})
	anchors := trustanchor.Render(trustanchor.Input{TrustAnchors: res.TrustAnchors, Secrets: res.Secrets}, trustanchor.Options{})
	res = rendered.Merge(res)
	r := translate.Translate(res, translate.Options{DefaultBindAddress: *bind, Generation: 1})
	render.Complete(rendered, r.Status, nil)
	if len(r.Errors) == 0 {
		if err := writeTenants(out, res, rendered, anchors); err != nil {
			return 1, err
		}
		if err := writeReport(out, res, r); err != nil {
			return 1, err
		}
	}
	list := problems(r)
	for _, t := range rendered.Tenants {
		for _, c := range t.Status.Conditions {
			if c.Status != metav1.ConditionTrue && c.Type != v1alpha1.ConditionListenerBudget {
				list = append(list, fmt.Sprintf("TenantGateway %s/%s: %s=%s (%s): %s", t.Namespace, t.Name, c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	for _, a := range anchors.Anchors {
		for _, c := range a.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				list = append(list, fmt.Sprintf("TrustAnchor %s/%s: %s=%s (%s): %s", a.Namespace, a.Name, c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	for _, x := range rendered.Exposures {
		for _, c := range x.Status.Conditions {
			// The certificate probe needs a connection to the backend: serve runs it.
			if c.Status != metav1.ConditionTrue && c.Type != v1alpha1.ConditionCertificateVerified {
				list = append(list, fmt.Sprintf("DatabaseExposure %s/%s: %s=%s (%s): %s", x.Namespace, x.Name, c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	if len(list) > 0 {
		fmt.Fprintf(out, "\n%d problem(s):\n", len(list))
		for _, p := range list {
			fmt.Fprintln(out, "  -", p)
		}
		return 1, nil
	}
	return 0, nil
}

// writeTenants prints each TenantGateway: its apex and mode, its conditions and the listeners
// it rendered. Nothing is printed without TenantGateways.
func writeTenants(out io.Writer, in *resources.Resources, r *render.Result, anchors *trustanchor.Result) error {
	w := bufio.NewWriter(out)
	for _, t := range r.Tenants {
		var apex, mode string
		for _, tg := range in.TenantGateways {
			if tg.Namespace == t.Namespace && tg.Name == t.Name {
				apex, mode = tg.Spec.Apex, string(cmp.Or(tg.Spec.Certificates.Mode, v1alpha1.CertificatesHTTP01))
			}
		}
		fmt.Fprintf(w, "TenantGateway %s/%s  apex: %s  certificates: %s  listeners: %d of %d\n",
			t.Namespace, t.Name, apex, mode, t.Status.ListenerCount, render.MaxListeners)
		writeConditions(w, "  ", t.Status.Conditions)
		for _, l := range t.Status.Listeners {
			state := "ready"
			if !l.Ready {
				state = "not ready (" + l.Reason + ")"
			}
			host := cmp.Or(l.Hostname, "*")
			fmt.Fprintf(w, "  listener %s  :%d  %s  routes: %d  %s", l.Name, l.Port, host, l.AttachedRoutes, state)
			if l.Certificate != "" {
				fmt.Fprintf(w, "  certificate: Secret %s", l.Certificate)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
	for _, x := range r.Exposures {
		var engine v1alpha1.Engine
		for _, d := range in.DatabaseExposures {
			if d.Namespace == x.Namespace && d.Name == x.Name {
				engine = d.Spec.Engine
			}
		}
		fmt.Fprintf(w, "DatabaseExposure %s/%s  engine: %s", x.Namespace, x.Name, engine)
		if x.Status.Listener != "" {
			fmt.Fprintf(w, "  listener %s :%d  hostnames: %s", x.Status.Listener, x.Status.Port, strings.Join(x.Status.Hostnames, ", "))
		}
		fmt.Fprintln(w)
		// The certificate probe connects to the backend; check does not (serve shows it in
		// /status).
		var conds []metav1.Condition
		for _, c := range x.Status.Conditions {
			if c.Type != v1alpha1.ConditionCertificateVerified {
				conds = append(conds, c)
			}
		}
		writeConditions(w, "  ", conds)
		for _, m := range x.Status.Members {
			fmt.Fprintf(w, "  member %s  %s", m.Name, m.Reason)
			if m.Route != "" {
				fmt.Fprintf(w, "  route %s  hostnames: %s", m.Route, strings.Join(m.Hostnames, ", "))
			}
			if m.Reason != v1alpha1.ReasonAccepted && m.Message != "" {
				fmt.Fprintf(w, "  (%s)", m.Message)
			}
			fmt.Fprintln(w)
		}
		if x.Status.Connect != "" {
			fmt.Fprintf(w, "  connect: %s\n", x.Status.Connect)
		}
		for _, a := range x.Status.Access {
			fmt.Fprintf(w, "  access %s (%s): %s\n", a.Policy, a.Target, a.Rules)
		}
		fmt.Fprintln(w)
	}
	for _, a := range anchors.Anchors {
		fmt.Fprintf(w, "TrustAnchor %s/%s  publishes: Secret %s", a.Namespace, a.Name, a.Status.SecretName)
		for _, c := range a.Status.Certificates {
			fmt.Fprintf(w, "\n  CA %s  sha256 %s  until %s", c.Subject, c.SHA256, c.NotAfter.Format("2006-01-02"))
		}
		fmt.Fprintln(w)
		writeConditions(w, "  ", a.Status.Conditions)
		fmt.Fprintln(w)
	}
	return w.Flush()
}
