package cpscale

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Step is one step's numbers.
type Step struct {
	Shape     string `json:"shape"`
	Tenants   int    `json:"tenants"`
	Exposures int    `json:"exposures"`
	// Seconds from the controller's start until every exposure was Programmed, and until
	// every sampled exposure completed a TLS handshake through snigate.
	ProgrammedSeconds float64 `json:"programmedSeconds"`
	ServedSeconds     float64 `json:"servedSeconds"`
	// Milliseconds, per trial.
	ApplyServing  []float64 `json:"applyServingMs"`
	DeleteRefused []float64 `json:"deleteRefusedMs"`
	FloorAdd      []float64 `json:"informerFloorAddMs"`
	FloorDelete   []float64 `json:"informerFloorDeleteMs"`
	// The controller's requests for one new exposure, from its create until it served plus
	// a second: by "verb resource", the median of each over the trials; Writes their
	// create/update/patch/delete total per trial.
	Requests map[string]float64 `json:"requestsPerNewExposure"`
	Writes   []int              `json:"writesPerNewExposure"`
	// The controller's RSS (MiB) after convergence and after the trials, its CPU seconds to
	// converge, and the certificate probe's connections a minute during the trials.
	RSSConvergedMiB float64 `json:"rssConvergedMiB"`
	RSSEndMiB       float64 `json:"rssEndMiB"`
	CPUConverge     float64 `json:"cpuSecondsToConverge"`
	// The API server's and etcd's CPU seconds over the same time, and the controller's
	// writes (create, update, patch, delete) it took: what converging costs the other side.
	APIServerCPUConverge float64 `json:"apiServerCPUSecondsToConverge"`
	ConvergeWrites       int     `json:"writesToConverge"`
	ProbesPerMinute      float64 `json:"probesPerMinute"`
	// Seconds from the controller's start until every exposure had its certificate probe's
	// verdict, and the configurations applied for each new exposure (its route: 1).
	SettledSeconds float64   `json:"settledSeconds"`
	Generations    []float64 `json:"generationsPerNewExposure"`
	// With provisioned data planes: how many ran, their RSS (MiB, together) after
	// convergence and after the trials, and their CPU seconds to converge.
	DataPlanes               int     `json:"dataPlanes,omitempty"`
	DataPlaneRSSConvergedMiB float64 `json:"dataPlaneRSSConvergedMiB,omitempty"`
	DataPlaneRSSEndMiB       float64 `json:"dataPlaneRSSEndMiB,omitempty"`
	DataPlaneCPUConverge     float64 `json:"dataPlaneCPUSecondsToConverge,omitempty"`
	// Where the trials' changes spent the controller's time, by its own account
	// (snigate_pipeline_stage_seconds): each stage's mean milliseconds, and how many times
	// it ran per trial (a create and a delete, and what follows from them).
	StageMs       map[string]float64 `json:"stageMeanMsDuringTrials,omitempty"`
	StagePerTrial map[string]float64 `json:"stageRunsPerTrial,omitempty"`
	// The write floor (floor_test.go), measured after a shape's last step.
	WriteFloor *WriteFloor `json:"writeFloor,omitempty"`
}

// WriteFloor is what the write floor (floor_test.go) measured: how long a bare client took
// to make the writes converging cannot do without.
type WriteFloor struct {
	Writes  int     `json:"writes"`
	Seconds float64 `json:"seconds"`
	// The API server's and etcd's CPU seconds for them.
	APIServerCPU float64 `json:"apiServerCPUSeconds"`
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile is the q-quantile of v (nearest rank).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// Markdown is the steps as the table docs/performance.md shows.
func Markdown(steps []Step) string {
	var b strings.Builder
	b.WriteString("| shape | tenants | exposures | converged: Programmed / served / probed (s) | apply → serving p50 / p99 (ms) | informer floor p99 (ms) | ÷ floor p99 | delete → refused p50 / p99 (ms) | floor p99 (ms) | writes per new exposure | configurations per new exposure | RSS converged / end (MiB) | CPU to converge: controller / API server and etcd (s) | writes to converge | probes / min |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range steps {
		fa, fd := quantile(s.FloorAdd, 0.99), quantile(s.FloorDelete, 0.99)
		ratio := "—"
		if fa > 0 {
			ratio = fmt.Sprintf("×%.1f", quantile(s.ApplyServing, 0.99)/fa)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f / %.1f / %.1f | %.0f / %.0f | %.0f | %s | %.0f / %.0f | %.0f | %.0f | %.0f (max %.0f) | %.0f / %.0f | %.1f / %.1f | %d | %.0f |\n",
			s.Shape, s.Tenants, s.Exposures, s.ProgrammedSeconds, s.ServedSeconds, s.SettledSeconds,
			quantile(s.ApplyServing, 0.5), quantile(s.ApplyServing, 0.99), fa, ratio,
			quantile(s.DeleteRefused, 0.5), quantile(s.DeleteRefused, 0.99), fd,
			median(toFloats(s.Writes)), median(s.Generations), quantile(s.Generations, 1),
			s.RSSConvergedMiB, s.RSSEndMiB, s.CPUConverge, s.APIServerCPUConverge, s.ConvergeWrites, s.ProbesPerMinute)
	}
	for _, s := range steps {
		if f := s.WriteFloor; f != nil && f.Writes > 0 {
			fmt.Fprintf(&b, "\nThe write floor at %d exposures (%s): %d writes (a route created, its status, the exposure's status, each) took a bare client %.1f s, %.0f writes/s, the API server and etcd %.1f CPU s (%.1f ms each); converging took the controller %.1f s for %d writes.\n",
				s.Exposures, s.Shape, f.Writes, f.Seconds, float64(f.Writes)/f.Seconds, f.APIServerCPU, 1000*f.APIServerCPU/float64(f.Writes),
				s.ServedSeconds, s.ConvergeWrites)
		}
	}
	for _, s := range steps {
		if s.DataPlanes > 0 {
			fmt.Fprintf(&b, "\nThe data planes at %d exposures (%s): %d, RSS %.0f MiB converged, %.0f MiB at the end (together), %.1f CPU s to converge.\n",
				s.Exposures, s.Shape, s.DataPlanes, s.DataPlaneRSSConvergedMiB, s.DataPlaneRSSEndMiB, s.DataPlaneCPUConverge)
		}
	}
	for i, s := range steps {
		if len(s.StageMs) == 0 || (i+1 < len(steps) && steps[i+1].Shape == s.Shape) {
			continue // the largest step of each shape
		}
		fmt.Fprintf(&b, "\nWhere the trials' changes went at %d exposures (%s), by the controller's own account (snigate_pipeline_stage_seconds), mean ms per run (runs per trial):", s.Exposures, s.Shape)
		for _, stage := range []string{"render", "translate", "complete", "dataplane", "tenant_apply"} {
			if n := s.StagePerTrial[stage]; n > 0 {
				fmt.Fprintf(&b, " %s %.1f (%.1f);", stage, s.StageMs[stage], n)
			}
		}
		b.WriteString("\n")
	}
	// The requests of one new exposure, at the largest step.
	if len(steps) > 0 {
		last := steps[len(steps)-1]
		keys := make([]string, 0, len(last.Requests))
		for k := range last.Requests {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "\nThe controller's requests for one new exposure at %d exposures (%s), medians of the trials:", last.Exposures, last.Shape)
		for _, k := range keys {
			if last.Requests[k] > 0 {
				fmt.Fprintf(&b, " %s %.0f;", k, last.Requests[k])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func toFloats(v []int) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Section is the Markdown section docs/performance.md shows (bench/results/control-plane.md,
// which bench/run.sh --render puts before the notes): how it was measured, the steps, and
// the targets judged on the largest step of each shape.
func Section(run Run, previous *Run) string {
	var b strings.Builder
	b.WriteString("## 8. The control plane at scale\n\n")
	b.WriteString("bench/cpscale.sh: a real kube-apiserver and etcd with the install's RBAC, `snigate controller`\n")
	b.WriteString("with its local proxy as the install's ServiceAccount, a TLS backend in a network namespace; tenants\n")
	b.WriteString("sharing one platform Gateway (a TenantGateway each with `parentGatewayRef`: a ListenerSet), each with a\n")
	b.WriteString("TrustAnchor, a Service and 10 DatabaseExposures (redis, on the shared engine listener), then one\n")
	b.WriteString("tenant with 10 000 on a Gateway of its own. Converged: from the controller's start until every exposure\n")
	b.WriteString("is Programmed, then until 20 sampled exposures complete a TLS handshake through snigate. Apply → serving:\n")
	b.WriteString("one more exposure created, until a TLS client with its SNI completes a handshake with the backend\n")
	b.WriteString("through snigate; delete → refused: until that client is closed without a byte. The floor: a bare\n")
	b.WriteString("informer on the same API server seeing the same create and delete. Writes: the controller's\n")
	b.WriteString("create, update, patch and delete requests for one new exposure, from the API server's audit log\n")
	b.WriteString("(from the create until it served, and a second more).\n\n")
	runs(&b, run, previous, "The full run before it")
	return b.String()
}

// runs writes the tables and the targets of run, and of previous (if any) under before.
func runs(b *strings.Builder, run Run, previous *Run, before string) {
	one := func(title string, r Run) {
		fmt.Fprintf(b, "%s, %s, commit %s%s:\n\n", title, r.Time.Format("2006-01-02 15:04 MST"), or(r.Commit, "unknown"), memLimit(r))
		b.WriteString(Markdown(r.Steps))
		b.WriteString("\n")
		b.WriteString(targets(r.Steps))
	}
	one("This run", run)
	if previous != nil {
		b.WriteString("\n")
		one(before, *previous)
	}
}

// ProvisionedSection is the Markdown section of a run with provisioned data planes
// (bench/results/control-plane-provisioned.md, which bench/run.sh --render puts after
// Section's): how it differs from Section's runs, the steps, and the targets.
func ProvisionedSection(run Run, previous *Run) string {
	var b strings.Builder
	b.WriteString("### 8.1 The control plane at scale with provisioned data planes\n\n")
	b.WriteString("bench/cpscale.sh --provision: the same steps, with `snigate controller --provision` in place of its\n")
	b.WriteString("local proxy. kube-controller-manager's Deployment and ReplicaSet controllers roll out the data plane\n")
	b.WriteString("Deployment it writes for each Gateway (one replica), and a stand-in node (internal/testutil/dpnode)\n")
	b.WriteString("schedules its Pods, runs each as a `snigate dataplane` process on an address of its own, reports them\n")
	b.WriteString("Ready, and balances connections to them at the LoadBalancer Service's address, which it also\n")
	b.WriteString("assigns. A new exposure is served once its TLSRoute, written by the controller, has reached the\n")
	b.WriteString("data plane through the API server. The controller's RSS and CPU are its own; the data planes' are\n")
	b.WriteString("given below the table. No write floor (the data planes would watch its writes).\n\n")
	runs(&b, run, previous, "The run before it")
	return b.String()
}

// Run is one run's results, as bench/results/cpscale.json holds them.
type Run struct {
	Time   time.Time `json:"time"`
	Mode   string    `json:"mode"`
	Commit string    `json:"commit,omitempty"`
	// The memory limit of the controller's cgroup in this run, MiB (0: none).
	MemoryLimitMiB int `json:"memoryLimitMiB,omitempty"`
	// Provisioned: the controller ran with --provision, its data planes as processes of a
	// stand-in node behind a load balancer (SNIGATE_CPSCALE_PROVISION).
	Provisioned bool   `json:"provisioned,omitempty"`
	Steps       []Step `json:"steps"`
}

// memLimit says the run's memory limit, if it had one.
func memLimit(r Run) string {
	if r.MemoryLimitMiB == 0 {
		return ""
	}
	return fmt.Sprintf(", the controller in a cgroup with a memory limit of %d MiB", r.MemoryLimitMiB)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// targets judges the targets on the largest step of each shape.
func targets(steps []Step) string {
	var b strings.Builder
	b.WriteString("| target | measured | |\n|---|---|---|\n")
	for _, shape := range []string{"shared", "one tenant"} {
		var last *Step
		for i := range steps {
			if steps[i].Shape == shape {
				last = &steps[i]
			}
		}
		if last == nil {
			continue
		}
		as, ar := quantile(last.ApplyServing, 0.99), quantile(last.DeleteRefused, 0.99)
		fa, fd := quantile(last.FloorAdd, 0.99), quantile(last.FloorDelete, 0.99)
		met := func(ok bool) string {
			if ok {
				return "met"
			}
			return "**missed**"
		}
		at := fmt.Sprintf("%s, %d exposures", shape, last.Exposures)
		fmt.Fprintf(&b, "| apply → serving p99 ≤ 3 × the floor's and ≤ 1 s (%s) | %.0f ms, floor %.0f ms | %s |\n", at, as, fa, met(as <= 1000 && fa > 0 && as <= 3*fa))
		fmt.Fprintf(&b, "| delete → refused p99, the same (%s) | %.0f ms, floor %.0f ms | %s |\n", at, ar, fd, met(ar <= 1000 && fd > 0 && ar <= 3*fd))
		floor := ""
		if f := last.WriteFloor; f != nil && f.Writes > 0 {
			floor = fmt.Sprintf(", the API server's write floor %.1f s", f.Seconds)
		}
		fmt.Fprintf(&b, "| initial convergence ≤ 60 s (%s) | %.1f s%s | %s |\n", at, last.ServedSeconds, floor, met(last.ServedSeconds <= 60))
		fmt.Fprintf(&b, "| controller RSS ≤ 512 MiB (%s) | %.0f MiB | %s |\n", at, max(last.RSSConvergedMiB, last.RSSEndMiB), met(max(last.RSSConvergedMiB, last.RSSEndMiB) <= 512))
	}
	return b.String()
}
