package main

import (
	"testing"

	"github.com/snigate/snigate/internal/metrics"
)

// The access log exists at levels that show INFO lines, and its dropped lines are exported.
func TestLogs(t *testing.T) {
	for _, c := range []struct {
		format, level string
		access, want  bool
	}{
		{"json", "info", true, true}, {"text", "debug", true, true},
		{"json", "warn", true, false}, {"json", "info", false, false},
	} {
		l, err := newLogs(c.format, c.level, c.access)
		if err != nil {
			t.Fatal(err)
		}
		if (l.access != nil) != c.want {
			t.Errorf("%+v: access log %v", c, l.access != nil)
		}
		m := metrics.New()
		l.metrics(m)
		got, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range got {
			found = found || f.GetName() == "snigate_access_log_dropped_lines_total"
		}
		if !found {
			t.Errorf("%+v: snigate_access_log_dropped_lines_total not exported", c)
		}
		l.close()
	}
	if _, err := newLogs("yaml", "info", true); err == nil {
		t.Error("--log-format yaml accepted")
	}
}
