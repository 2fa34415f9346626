// Package report holds the benchmark's results: the machine-readable model written to
// bench/results/latest.json, the evaluation of the performance targets, the generated
// docs/performance.md with its SVG chart, and each proxy's standing pooled over the rounds
// of several runs (Pool).
package report

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"sync"
)

// Results is one run of the harness.
type Results struct {
	Mode     string            `json:"mode"` // full or smoke
	Date     string            `json:"date"` // RFC 3339, UTC
	Rounds   int               `json:"rounds"`
	Seconds  float64           `json:"seconds"` // wall time of the whole run
	Command  string            `json:"command"`
	Machine  Machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Params   map[string]any    `json:"params"`
	Metrics  []*Metric         `json:"metrics"`
	Micro    []Micro           `json:"micro,omitempty"`
	Targets  []Target          `json:"targets"`
	Errors   []string          `json:"errors,omitempty"`

	mu sync.Mutex
	// Verbose logs every value as it is added.
	Verbose func(format string, a ...any) `json:"-"`
	// Pooled are the full runs the at-the-floor targets are judged over (this one among
	// them, when it is a full run): see FloorTarget.
	Pooled []*Results `json:"-"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc    int    `json:"nproc"`
	CPU      string `json:"cpu"`
	Kernel   string `json:"kernel"`
	MemGiB   int    `json:"memGiB"`
	Go       string `json:"go"`
	Hostname string `json:"-"`
}

// Metric is one measured quantity of one target (a proxy, or "direct"), one value per
// round.
type Metric struct {
	Test   string    `json:"test"`
	Name   string    `json:"name"`
	Target string    `json:"target"`
	Unit   string    `json:"unit"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// Micro is one Go micro-benchmark line.
type Micro struct {
	Package     string  `json:"package"`
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"nsPerOp"`
	BytesPerOp  float64 `json:"bytesPerOp"`
	AllocsPerOp float64 `json:"allocsPerOp"`
}

// Target is one of the performance targets, evaluated.
type Target struct {
	Area   string  `json:"area"`
	Goal   string  `json:"goal"`
	Value  string  `json:"value"` // what was measured, in words
	Ratio  float64 `json:"ratio"` // measured / limit where meaningful (≤ 1 is met for "at most")
	Met    bool    `json:"met"`
	Known  bool    `json:"known"`  // false: not measured in this run
	Margin string  `json:"margin"` // by how much it was met or missed
}

// Add records one value.
func (r *Results) Add(test, name, target, unit string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if r.Verbose != nil {
		r.Verbose("  %s %s %s = %.4g %s", test, target, name, v, unit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.Metrics {
		if m.Test == test && m.Name == name && m.Target == target {
			m.Values = append(m.Values, v)
			return
		}
	}
	r.Metrics = append(r.Metrics, &Metric{Test: test, Name: name, Target: target, Unit: unit, Values: []float64{v}})
}

// Error records an error; a run with errors fails.
func (r *Results) Error(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Errors = append(r.Errors, err.Error())
}

// Get returns a metric, or nil.
func (r *Results) Get(test, name, target string) *Metric {
	for _, m := range r.Metrics {
		if m.Test == test && m.Name == name && m.Target == target {
			return m
		}
	}
	return nil
}

// Med returns a metric's median.
func (r *Results) Med(test, name, target string) (float64, bool) {
	m := r.Get(test, name, target)
	if m == nil || len(m.Values) == 0 {
		return 0, false
	}
	return m.Median, true
}

// Summarize computes every metric's median, min and max.
func (r *Results) Summarize() {
	for _, m := range r.Metrics {
		m.Median, m.Min, m.Max = Median(m.Values), slices.Min(m.Values), slices.Max(m.Values)
	}
}

// Median of values (mean of the middle two for an even count).
func Median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := slices.Clone(values)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// WriteJSON writes the results to path.
func (r *Results) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ErrNotARun is ReadJSON's answer for a JSON file that is not a run of bench/run.sh: the
// control-plane benchmark (bench/cpscale.sh) keeps its runs in the same folder,
// bench/results/runs/, and counted among the data plane's they made "40 rounds of 30 runs"
// out of eight.
var ErrNotARun = errors.New("not a bench/run.sh result (no date or rounds)")

// ReadJSON reads results written by WriteJSON; a JSON file of another kind is ErrNotARun.
func ReadJSON(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &Results{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	if r.Date == "" || r.Rounds == 0 {
		return nil, ErrNotARun
	}
	return r, nil
}
