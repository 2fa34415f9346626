package report

import (
	"math"
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
