//go:build linux

package cpscale

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/source/cluster"
)

// TestControlPlaneScale runs the benchmark when SNIGATE_CPSCALE says which: "smoke" (10
// tenants × 10 exposures, 5 trials) or "full" (10, 100 and 1 000 tenants × 10, 30 trials
// each, then 10 000 exposures on one tenant); "shared" and "one" run one of full's two
// shapes alone (while working on one). SNIGATE_CPSCALE_OUT names the JSON results;
// SNIGATE_CPSCALE_MEMORY_LIMIT, when set, runs the controller in a cgroup with that
// memory limit in MiB, as a container with resources.limits.memory;
// SNIGATE_CPSCALE_PROVISION, when set, runs it with --provision, its data planes run by a
// stand-in node (package dpnode) behind a load balancer, rather than with its local proxy.
func TestControlPlaneScale(t *testing.T) {
	mode := os.Getenv("SNIGATE_CPSCALE")
	if mode == "" {
		t.Skip("a benchmark: bench/cpscale.sh runs it (SNIGATE_CPSCALE=smoke or full)")
	}
	steps, trials, solo := []int{10}, 5, 0
	switch mode {
	case "full":
		steps, trials, solo = []int{10, 100, 1000}, 30, 10000
	case "shared":
		steps, trials = []int{10, 100, 1000}, 30
	case "one":
		steps, trials, solo = nil, 30, 10000
	}
	var results []Step
	t.Run("shared Gateway", func(t *testing.T) {
		if len(steps) == 0 {
			t.Skip("not in this mode")
		}
		e := newEnv(t, true)
		for i, n := range steps {
			e.addTenants(n, 10, true)
			results = append(results, e.measure(t, "shared", n*10, trials, "platform", "shared", i == len(steps)-1))
		}
	})
	if solo > 0 {
		t.Run("one tenant", func(t *testing.T) {
			e := newEnv(t, false)
			e.addTenants(1, solo, false)
			ns := tenantName(0)
			results = append(results, e.measure(t, "one tenant", solo, trials, ns, ns, true))
		})
	}
	run := Run{Time: time.Now().UTC(), Mode: mode, Commit: os.Getenv("SNIGATE_CPSCALE_COMMIT"),
		MemoryLimitMiB: memoryLimitMiB(t), Provisioned: provisioned(), Steps: results}
	if md := os.Getenv("SNIGATE_CPSCALE_MD"); md != "" {
		// SNIGATE_CPSCALE_PREVIOUS: the last full run's JSON, shown after this one.
		var prev *Run
		if p := os.Getenv("SNIGATE_CPSCALE_PREVIOUS"); p != "" {
			b, err := os.ReadFile(p)
			if err == nil {
				prev = &Run{}
				err = json.Unmarshal(b, prev)
			}
			if err != nil {
				t.Fatalf("SNIGATE_CPSCALE_PREVIOUS: %v", err)
			}
		}
		section := Section(run, prev)
		if run.Provisioned {
			section = ProvisionedSection(run, prev)
		}
		if err := os.WriteFile(md, []byte(section), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out := os.Getenv("SNIGATE_CPSCALE_OUT"); out != "" {
		b, _ := json.MarshalIndent(run, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Log("\n" + Markdown(results))
}

// measure starts the controller on what the cluster holds and takes a step's numbers; with
// floor, a shape's last step, it then stops the controller and measures the write floor
// (floor_test.go).
func (e *env) measure(t *testing.T, shape string, exposures, trials int, gwNS, gwName string, floor bool) Step {
	st := Step{Shape: shape, Tenants: e.tenants, Exposures: exposures, Requests: map[string]float64{}}
	t.Logf("step %s: %d tenants, %d exposures: starting the controller", shape, e.tenants, exposures)
	start, apiCPU, off := time.Now(), controlPlaneCPU(), e.auditSize()
	c := e.startController()
	defer c.stop()
	addr := e.gatewayAddress(gwNS, gwName, 10*time.Minute)
	// Converged: every exposure Programmed (a failing controller fails the smoke run soon).
	patience := 3 * time.Minute
	if exposures > 1000 {
		patience = 20 * time.Minute
	}
	deadline := start.Add(patience)
	for {
		n, all, err := e.programmed()
		if err == nil && n == all && all >= exposures {
			st.ProgrammedSeconds = time.Since(start).Seconds()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d exposures Programmed after %v (%v)\n%s", n, all, patience, err, c.tail())
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Served: a sample of them, by connecting.
	var sample []string
	for range 20 {
		ns := e.randomTenant()
		sample = append(sample, hostname(ns, fmt.Sprintf("db-%d", rand.IntN(exposures/e.tenants))))
	}
	for _, h := range sample {
		if !waitServed(addr, h, deadline) {
			t.Fatalf("%s not served after %v\n%s", h, patience, c.tail())
		}
	}
	st.ServedSeconds = time.Since(start).Seconds()
	st.RSSConvergedMiB, st.CPUConverge = c.usage()
	st.APIServerCPUConverge = controlPlaneCPU() - apiCPU
	st.DataPlaneRSSConvergedMiB, st.DataPlaneCPUConverge, st.DataPlanes = e.dataPlaneUsage()
	for k, n := range e.requests(off, start, time.Now()) {
		if verb, _, _ := strings.Cut(k, " "); verb == "create" || verb == "update" || verb == "patch" || verb == "delete" {
			st.ConvergeWrites += n
		}
	}
	t.Logf("step %s: converged: Programmed after %.1f s, served after %.1f s, RSS %.0f MiB, %.1f CPU s; API server and etcd %.1f CPU s for %d writes; %d data planes: RSS %.0f MiB, %.1f CPU s",
		shape, st.ProgrammedSeconds, st.ServedSeconds, st.RSSConvergedMiB, st.CPUConverge, st.APIServerCPUConverge, st.ConvergeWrites,
		st.DataPlanes, st.DataPlaneRSSConvergedMiB, st.DataPlaneCPUConverge)
	if keep := os.Getenv("SNIGATE_CPSCALE_KEEP"); keep != "" {
		// What the controller's memory holds once converged, for reading after the run.
		c.save(filepath.Join(keep, fmt.Sprintf("heap-%s-%d.pprof", strings.ReplaceAll(shape, " ", "-"), exposures)), "/debug/pprof/heap")
	}

	// Settled: every exposure has its certificate probe's verdict, so that the trials count
	// what one new exposure causes, not the first probes of the others.
	for {
		pending, err := e.pendingProbes()
		if err == nil && pending == 0 {
			st.SettledSeconds = time.Since(start).Seconds()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d exposures still without a probe verdict after %v (%v)\n%s", pending, patience, err, c.tail())
		}
		time.Sleep(250 * time.Millisecond)
	}

	// The floor: a bare informer on DatabaseExposures.
	seen := newSeen()
	stop := e.informer(t, seen)
	defer stop()
	probes0, probesAt := c.metric("snigate_certificate_probes_total"), time.Now()
	stages0 := c.stageTotals()
	writes := map[string][]float64{}
	if keep := os.Getenv("SNIGATE_CPSCALE_KEEP"); keep != "" {
		// Where the controller's time goes during the trials, for reading after the run.
		go c.profile(filepath.Join(keep, fmt.Sprintf("cpu-%s-%d.pprof", strings.ReplaceAll(shape, " ", "-"), exposures)), 30)
	}
	for i := range trials {
		ns := e.randomTenant()
		name := fmt.Sprintf("trial-%d", i)
		h := hostname(ns, name)
		gen := c.generation()
		off, t0 := e.auditSize(), time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := e.cl.Create(ctx, exposure(ns, name)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if !waitServed(addr, h, time.Now().Add(time.Minute)) {
			t.Fatalf("trial %d: %s not served within a minute\n%s", i, h, c.tail())
		}
		served := time.Since(t0)
		t.Logf("trial %d: %s created at %s, served after %v", i, h, t0.Format(time.RFC3339Nano), served)
		st.ApplyServing = append(st.ApplyServing, ms(served))
		if d, ok := seen.waitAdd(ns+"/"+name, t0, 10*time.Second); ok {
			st.FloorAdd = append(st.FloorAdd, ms(d))
		}
		// What the controller sent for it: until it served, and a second after.
		time.Sleep(time.Second)
		reqs := e.requests(off, t0, t0.Add(served+time.Second))
		total := 0
		for k, n := range reqs {
			writes[k] = append(writes[k], float64(n))
			verb, _, _ := strings.Cut(k, " ")
			if verb == "create" || verb == "update" || verb == "patch" || verb == "delete" {
				total += n
			}
		}
		st.Writes = append(st.Writes, total)
		// Configurations applied for it: one, its route; its probe's verdict, which came
		// meanwhile, changes a status and no configuration.
		st.Generations = append(st.Generations, c.generation()-gen)
		// And gone again.
		t1 := time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		if err := e.cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: exposure(ns, name).ObjectMeta}); err != nil {
			t.Fatal(err)
		}
		cancel()
		if !waitRefused(addr, h, time.Now().Add(time.Minute)) {
			t.Fatalf("trial %d: %s still served a minute after its deletion\n%s", i, h, c.tail())
		}
		st.DeleteRefused = append(st.DeleteRefused, ms(time.Since(t1)))
		if d, ok := seen.waitDelete(ns+"/"+name, t1, 10*time.Second); ok {
			st.FloorDelete = append(st.FloorDelete, ms(d))
		}
		// The status writes of the deletion finish before the next trial counts its own.
		time.Sleep(time.Second)
	}
	for k, v := range writes {
		for len(v) < trials {
			v = append(v, 0)
		}
		st.Requests[k] = median(v)
	}
	st.ProbesPerMinute = (c.metric("snigate_certificate_probes_total") - probes0) / time.Since(probesAt).Minutes()
	// Where the trials' changes spent the controller's time, by its own account.
	st.StageMs, st.StagePerTrial = map[string]float64{}, map[string]float64{}
	for stage, t := range c.stageTotals() {
		sum, n := t[0]-stages0[stage][0], t[1]-stages0[stage][1]
		if n > 0 {
			st.StageMs[stage], st.StagePerTrial[stage] = 1000*sum/n, n/float64(trials)
		}
	}
	stages := []string{"render", "translate", "complete", "tenant_apply"}
	if !provisioned() {
		stages = append(stages, "dataplane") // with --provision the controller serves nothing itself
	}
	for _, stage := range stages {
		if st.StagePerTrial[stage] == 0 {
			t.Errorf("step %s: no %s stage observed in snigate_pipeline_stage_seconds during the trials", shape, stage)
		}
	}
	st.RSSEndMiB, _ = c.usage()
	st.DataPlaneRSSEndMiB, _, _ = e.dataPlaneUsage()
	t.Logf("step %s: apply→serving p50 %.0f ms p99 %.0f ms (floor p99 %.0f ms); delete→refused p50 %.0f ms p99 %.0f ms; writes per exposure %v",
		shape, quantile(st.ApplyServing, 0.5), quantile(st.ApplyServing, 0.99), quantile(st.FloorAdd, 0.99),
		quantile(st.DeleteRefused, 0.5), quantile(st.DeleteRefused, 0.99), st.Writes)
	if floor && e.node == nil {
		// Not with provisioned data planes: they would watch the floor's copies of the
		// routes, and its API server is the same as the runs' without them.
		c.stop()
		f := e.writeFloor()
		st.WriteFloor = &f
	}
	return st
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// waitServed polls a TLS handshake with SNI h through addr until one completes.
func waitServed(addr, h string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if handshake(addr, h) == nil {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// waitRefused polls until the handshake with SNI h fails (snigate closes without a byte).
func waitRefused(addr, h string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if handshake(addr, h) != nil {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

func handshake(addr, h string) error {
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(addr, fmt.Sprint(redisPort)), &tls.Config{ServerName: h, InsecureSkipVerify: true})
	if err != nil {
		return err
	}
	return c.Close()
}

// seen records when a bare informer saw each DatabaseExposure come and go.
type seen struct {
	mu          sync.Mutex
	added, gone map[string]time.Time
	changed     chan struct{}
}

func newSeen() *seen {
	return &seen{added: map[string]time.Time{}, gone: map[string]time.Time{}, changed: make(chan struct{}, 1)}
}

func (s *seen) note(m map[string]time.Time, key string) {
	s.mu.Lock()
	m[key] = time.Now()
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *seen) wait(m map[string]time.Time, key string, since time.Time, timeout time.Duration) (time.Duration, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		at, ok := m[key]
		s.mu.Unlock()
		if ok && !at.Before(since) {
			return at.Sub(since), true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *seen) waitAdd(key string, since time.Time, timeout time.Duration) (time.Duration, bool) {
	return s.wait(s.added, key, since, timeout)
}

func (s *seen) waitDelete(key string, since time.Time, timeout time.Duration) (time.Duration, bool) {
	return s.wait(s.gone, key, since, timeout)
}

// informer runs a bare informer on DatabaseExposures (the admin's, not the controller's)
// and returns its stop.
func (e *env) informer(t *testing.T, s *seen) func() {
	scheme, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	// Its reflectors log through controller-runtime's logger, which nothing else here sets.
	crlog.SetLogger(logr.Discard())
	c, err := cache.New(e.kc.Config, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inf, err := c.GetInformer(ctx, &v1alpha1.DatabaseExposure{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(o any) string {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if m, ok := o.(client.Object); ok {
			return m.GetNamespace() + "/" + m.GetName()
		}
		return ""
	}
	inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.note(s.added, key(o)) },
		DeleteFunc: func(o any) { s.note(s.gone, key(o)) },
	})
	go c.Start(ctx)
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the bare informer did not sync")
	}
	return cancel
}
