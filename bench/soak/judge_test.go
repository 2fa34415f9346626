package soak

import (
	"testing"
	"time"
)

// The full soak's RSS climbs from each upgrade's fresh process to a plateau: bounded. A
// leak (fds, goroutines or RSS past the first five minutes' most) is not.
func TestJudge(t *testing.T) {
	p := plans["full"]
	// One sample a minute: a fresh process at 0, 5, 10… minutes (the upgrades), climbing to
	// its plateau, as measured on 2026-12-06.
	rss := []float64{42.9, 52.1, 60.9, 61.8, 62.2, 43.1, 52.1, 60.3, 61.6, 61.9, 42.8, 51.2, 59.7, 60.3, 61.1, 62.2}
	build := func(fds func(int) int, gor func(int) int, mem func(int) float64) *Result {
		r := &Result{Plan: p}
		for i := range rss {
			r.Samples = append(r.Samples, Sample{At: (time.Duration(i) * time.Minute).Seconds(), FDs: fds(i), Goroutines: gor(i), RSSMiB: mem(i)})
		}
		r.judge()
		return r
	}
	flat := func(v int) func(int) int { return func(int) int { return v } }
	plateau := func(i int) float64 { return rss[i] }
	if r := build(flat(38), flat(16), plateau); r.Verdict != "bounded" {
		t.Errorf("plateaus: %s (%+v)", r.Verdict, r)
	}
	if r := build(func(i int) int { return 38 + 4*i }, flat(16), plateau); r.Verdict != "GREW after settling" {
		t.Errorf("an fd leak: %s", r.Verdict)
	}
	if r := build(flat(38), func(i int) int { return 16 + 10*i }, plateau); r.Verdict != "GREW after settling" {
		t.Errorf("a goroutine leak: %s", r.Verdict)
	}
	if r := build(flat(38), flat(16), func(i int) float64 { return 40 + 3*float64(i) }); r.Verdict != "GREW after settling" {
		t.Errorf("an RSS leak: %s", r.Verdict)
	}
	if r := (&Result{Plan: p, Samples: []Sample{{At: 0}}}); func() string { r.judge(); return r.Verdict }() != "too short to judge" {
		t.Errorf("one sample: %s", r.Verdict)
	}
}
