package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every snigate_ metric an example alert rule uses is one snigate exports: a renamed metric
// cannot leave a rule that never fires.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	m := New()
	descs := make(chan *prometheus.Desc, 1024)
	go func() {
		for _, c := range []prometheus.Collector{m.Connections, m.Rejected, m.Active, m.Bytes, m.HelloSeconds, m.DialSeconds,
			m.Reloads, m.Generation, m.Routes, m.HTTPRequests, m.HTTPSeconds, m.BackendCertificateExpiry} {
			c.Describe(descs)
		}
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	exported := map[string]bool{}
	for d := range descs {
		if s := fqName.FindStringSubmatch(d.String()); s != nil {
			exported[s[1]] = true
		}
	}
	files, _ := filepath.Glob("../../examples/alerts/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples/alerts/*.yaml")
	}
	used := regexp.MustCompile(`snigate_[a-z_]+`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range used.FindAllString(string(b), -1) {
			if !exported[name] {
				t.Errorf("%s uses %s, which snigate does not export", f, name)
			}
		}
	}
}
