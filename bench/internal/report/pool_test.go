package report

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func TestPool(t *testing.T) {
	a, b := &Results{}, &Results{}
	for i, v := range []float64{10, 20} {
		a.Add(TConns, MCPU, "snigate", "µs", v)
		a.Add(TConns, MCPU, "nginx", "µs", []float64{12, 10}[i])
		a.Add(TConns, MCPU, "haproxy", "µs", []float64{11, 30}[i])
	}
	// A run without HAProxy: its round counts for the other two only.
	b.Add(TConns, MCPU, "snigate", "µs", 5)
	b.Add(TConns, MCPU, "nginx", "µs", 4)
	b.Add(TConns, MCPU, "sniproxy", "µs", 6)
	b.Add(TConns, MCPU, "sniproxy", "µs", 6) // a second round the others lack: not paired

	got := Pool([]*Results{a, b}, TConns, MCPU, true)
	want := []Standing{
		{Proxy: "snigate", Best: 1, Ratio: 1.25, Rounds: 3}, // 10/11, 20/10, 5/4
		{Proxy: "haproxy", Best: 0, Ratio: 2.05, Rounds: 2}, // 11/10, 30/10
		{Proxy: "nginx", Best: 2, Ratio: 0.8, Rounds: 3},    // 12/10, 10/20, 4/5
		{Proxy: "sniproxy", Best: 0, Ratio: 1.5, Rounds: 1}, // 6/4
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Proxy != w.Proxy || g.Best != w.Best || g.Rounds != w.Rounds || math.Abs(g.Ratio-w.Ratio) > 1e-9 {
			t.Errorf("standing %d: got %+v, want %+v", i, g, w)
		}
	}

	// More is better: nginx's 12 and HAProxy's 30 win their rounds, snigate's ratio is
	// 10/12 and 20/30.
	up := Pool([]*Results{a}, TConns, MCPU, false)
	if len(up) != 3 || up[0].Best != 0 || math.Abs(up[0].Ratio-0.75) > 1e-9 || up[1].Best != 1 || up[2].Best != 1 {
		t.Errorf("more is better: %+v", up)
	}
	if Pool([]*Results{a}, TRR, MRate, false) != nil {
		t.Error("a metric no run measured has no standing")
	}
}

func TestFloorTarget(t *testing.T) {
	run := func(mode string, mine, peer float64) *Results {
		r := &Results{Mode: mode}
		for i := 0; i < 3; i++ {
			r.Add(TRR, MRate, "snigate", "requests/s", mine)
			r.Add(TRR, MRate, "haproxy", "requests/s", peer)
		}
		return r
	}
	judge := func(runs ...*Results) Target {
		r := &Results{Pooled: runs}
		return r.FloorTarget("many connections", "requests/s ≥ the best peer's", TRR, MRate, false)
	}
	// Two full runs and a smoke run: not enough to judge.
	if tg := judge(run("full", 100, 100), run("full", 100, 100), run("smoke", 100, 100)); tg.Known {
		t.Errorf("judged on two full runs: %+v", tg)
	}
	// Even within ×0.97–1.03: met, and said to be a draw.
	tg := judge(run("full", 98, 100), run("full", 99, 100), run("full", 98, 100))
	if !tg.Known || !tg.Met || !strings.Contains(tg.Margin, "a draw") {
		t.Errorf("a draw at ×0.98: %+v", tg)
	}
	// Ahead: met, not a draw (HAProxy's ratio is ×0.90).
	tg = judge(run("full", 110, 100), run("full", 111, 100), run("full", 109, 100))
	if !tg.Known || !tg.Met || strings.Contains(tg.Margin, "a draw") {
		t.Errorf("ahead at ×1.10: %+v", tg)
	}
	// Behind by more than the slack: missed.
	tg = judge(run("full", 95, 100), run("full", 96, 100), run("full", 95, 100))
	if !tg.Known || tg.Met {
		t.Errorf("behind at ×0.95: %+v", tg)
	}
	// Four even proxies, each the best in turn: every ratio to the best of the others is
	// ×0.95, a draw at the floor, not a miss.
	even := func(mine float64) *Results {
		r := &Results{Mode: "full"}
		for i := 0; i < 4; i++ {
			for j, p := range []string{"snigate", "haproxy", "nginx", "sniproxy"} {
				v := 95.0
				if i == j {
					v = 100
				}
				if p == "snigate" && mine != 0 {
					v = mine
				}
				r.Add(TRR, MRate, p, "requests/s", v)
			}
		}
		return r
	}
	tg = judge(even(0), even(0), even(0))
	if !tg.Known || !tg.Met || !strings.Contains(tg.Margin, "a draw") {
		t.Errorf("four even proxies: %+v", tg)
	}
	// Snigate behind three even peers is no draw.
	if tg = judge(even(80), even(80), even(80)); tg.Met {
		t.Errorf("behind even peers: %+v", tg)
	}
}

// TestReadJSON: a run of bench/run.sh reads back; the control-plane benchmark's results,
// kept in the same folder, are ErrNotARun, so that no pool counts them as runs.
func TestReadJSON(t *testing.T) {
	dir := t.TempDir()
	run := &Results{Mode: "full", Date: "2026-12-07T19:00:00Z", Rounds: 5}
	run.Add(TConns, MCPU, "snigate", "µs", 61)
	if err := run.WriteJSON(dir + "/run.json"); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(dir + "/run.json")
	if err != nil || got.Date != run.Date || got.Rounds != 5 || len(got.Metrics) != 1 {
		t.Fatalf("ReadJSON(run) = %+v, %v; want the run back", got, err)
	}
	cp := `{"time": "2026-12-07T19:05:00Z", "mode": "full", "commit": "2749e91", "steps": [{"tenants": 1000}]}`
	if err := os.WriteFile(dir+"/cpscale.json", []byte(cp), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSON(dir + "/cpscale.json"); !errors.Is(err, ErrNotARun) {
		t.Fatalf("ReadJSON(cpscale) error = %v, want ErrNotARun", err)
	}
	if err := os.WriteFile(dir+"/bad.json", []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSON(dir + "/bad.json"); err == nil || errors.Is(err, ErrNotARun) {
		t.Fatalf("ReadJSON(bad) error = %v, want the decoding error", err)
	}
}
