// Package monitoring tests the Prometheus alert rules (config/prometheus/rules.yaml) and the
// Grafana dashboard (config/grafana/snigate.json) against what snigate exports: every
// snigate_* name in an expression must be a metric of internal/metrics, and every
// expression must parse as PromQL (promtool, from Debian's prometheus package).
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/testutil"
)

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// exported are the metric names snigate's /metrics can show: each collector of
// metrics.Metrics, and for a histogram its _bucket, _sum and _count series.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	// client_golang gives a Desc's name only through its String ("Desc{fqName: \"…\", …}"):
	// that is the one place it is written down, short of a scrape with every label set.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := fqName.FindStringSubmatch(d.String())
			if name == nil {
				t.Fatalf("no fqName in %s", d)
			}
			out[name[1]] = true
			if strings.Contains(v.Type().Field(i).Type.String(), "Histogram") {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					out[name[1]+s] = true
				}
			}
		}
	}
	// The collectors registered by a method (the access log's, the AccessPolicies'): their
	// names as a scrape shows them.
	m.AccessLogDropped(func() float64 { return 0 })
	m.AccessClients(access.NewLimiter(1))
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "snigate_") {
			out[f.GetName()] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d metric names found in metrics.Metrics: %v", len(out), out)
	}
	return out
}

var snigateName = regexp.MustCompile(`\bsnigate_[a-z0-9_]+`)

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile("../prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("config/prometheus/rules.yaml: %v", err)
	}
	return rf
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("../grafana/snigate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("config/grafana/snigate.json: %v", err)
	}
	return d
}

// expressions are every PromQL expression of the rules and the dashboard, by where it is.
func expressions(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			out["rules.yaml "+g.Name+"/"+r.Alert+r.Record] = r.Expr
		}
	}
	for _, p := range readDashboard(t).Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("snigate.json panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	return out
}

func TestExpressionsNameExportedMetrics(t *testing.T) {
	names := exported(t)
	exprs := expressions(t)
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions in the rules and the dashboard", len(exprs))
	}
	used := map[string]bool{}
	for where, e := range exprs {
		found := snigateName.FindAllString(e, -1)
		if len(found) == 0 {
			t.Errorf("%s: no snigate metric in %q", where, e)
		}
		for _, n := range found {
			used[n] = true
			if !names[n] {
				t.Errorf("%s: %s is not a metric snigate exports (%q)", where, n, e)
			}
		}
	}
	// The alerts the install promises.
	var alerts []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
		}
	}
	for _, a := range []string{"SnigateConfigLoadFailing", "SnigateRejectionsSpiking", "SnigateBackendDialsFailing", "DatabaseCertificateExpiresSoon"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("rules.yaml has no alert %s", a)
		}
	}
	// The dashboard shows every snigate metric family.
	for n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(n, "snigate_") && !used[n] && !used[base] && !used[base+"_bucket"] && !used[base+"_count"] {
			t.Errorf("no expression shows %s", n)
		}
	}
}

// promtool checks the rule file, and the dashboard's queries as recording rules (with
// Grafana's variables given values), so every expression is valid PromQL.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	testutil.Require(t, "promtool (Debian package prometheus; scripts/install-test-deps.sh)", err)
	if out, err := exec.Command(promtool, "check", "rules", "../prometheus/rules.yaml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules config/prometheus/rules.yaml: %v\n%s", err, out)
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	var rf struct {
		Groups []map[string]any `json:"groups"`
	}
	var rules []map[string]string
	for i, p := range readDashboard(t).Panels {
		for j, tg := range p.Targets {
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel%d:target%d", i, j), "expr": grafana.Replace(tg.Expr)})
		}
	}
	rf.Groups = []map[string]any{{"name": "dashboard", "rules": rules}}
	b, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries as rules, promtool check rules: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%d dashboard queries parse", len(rules))
	}
}
