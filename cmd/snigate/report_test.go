package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/translate"
)

// The report is tested on translate's golden inputs: they cover every condition it prints.
const goldenInputs = "../../internal/translate/testdata/"

func translateFile(t *testing.T, name string) (*translate.Result, []byte) {
	t.Helper()
	res, err := file.Load(goldenInputs + name)
	if err != nil {
		t.Fatal(err)
	}
	r := translate.Translate(res, translate.Options{Generation: 1})
	var buf bytes.Buffer
	if len(r.Errors) == 0 {
		if err := writeReport(&buf, res, r); err != nil {
			t.Fatal(err)
		}
	}
	return r, buf.Bytes()
}

func TestReport(t *testing.T) {
	r, report := translateFile(t, "bad-certificates.in.yaml")
	out := string(report)
	for _, want := range []string{
		"Gateway default/gw  addresses: 0.0.0.0",
		"listener key-mismatch  TLS 443 mismatch.example.com Terminate",
		"ResolvedRefs: certificateRefs[0]: Secret default/key-mismatch: tls: private key does not match public key",
		"0.0.0.0:443 TLS",
		"good.example.com listener default/gw/good Terminate certificates=[*.example.com]",
		"default/app:8080 weight=1 [10.0.0.2:8080]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	list := problems(r)
	if len(list) == 0 || !strings.Contains(strings.Join(list, "\n"), "Gateway default/gw listener invalid-pem: ResolvedRefs=False (InvalidCertificateRef)") {
		t.Errorf("problems = %v", list)
	}
	ok, _ := translateFile(t, "hostname-intersection.in.yaml")
	if len(ok.Errors) > 0 {
		t.Fatal(ok.Errors)
	}
	var p []string
	for _, s := range problems(ok) {
		if !strings.Contains(s, "nomatch") {
			p = append(p, s)
		}
	}
	if len(p) > 0 {
		t.Errorf("unexpected problems: %v", p)
	}
}

// Rejected input: the problems are the input errors, one line each.
func TestProblemsOfInvalidInput(t *testing.T) {
	r, _ := translateFile(t, "invalid-input.in.yaml")
	if len(r.Errors) == 0 {
		t.Fatal("invalid-input.in.yaml was accepted")
	}
	if len(problems(r)) != len(r.Errors) {
		t.Errorf("problems() = %d lines, want the %d errors", len(problems(r)), len(r.Errors))
	}
}

// Policies in the report: each target with its condition, the PROXY settings in the table,
// and every policy that does not take effect among the problems (check exits 1).
func TestReportPolicies(t *testing.T) {
	r, report := translateFile(t, "policies.in.yaml")
	out := string(report)
	for _, want := range []string{
		"BackendPolicy default/nats-proxy\n  target Service default/nats\n    Accepted=True (Accepted)",
		"0.0.0.0:443 TLS proxyProtocol=[10.0.0.0/8 2001:db8::/32] required",
		`default/nats:4222 weight=1 [10.1.0.5:4222] proxyProtocol="v2 authority alpn"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var got []string
	for _, p := range problems(r) {
		if strings.Contains(p, "Policy ") {
			got = append(got, p[:strings.Index(p, ":")])
		}
	}
	want := []string{
		"BackendPolicy default/nats-proxy target Service default/gone",
		"BackendPolicy default/nats-v1 target Service default/nats",
		"ListenerPolicy default/other target Gateway default/gw sectionName=tls-b",
		"ListenerPolicy default/other target Gateway default/gw sectionName=nope",
		"ListenerPolicy default/other target Gateway default/missing",
		"ListenerPolicy default/other target Gateway default/gw sectionName=web",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policy problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
