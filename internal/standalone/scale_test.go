package standalone

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// The route-scale benchmarks reproduce the benchmark's route-scale test (bench/cmd/runner/scale.go) in
// process: 100 000 exact names and 1 000 wildcards as TLSRoutes of 16 hostnames each in one
// file, the layout bench/internal/peers writes. Run them on one CPU, as the harness runs the
// proxy:
//
//	taskset -c 1 go test -run '^$' -bench Scale -benchtime 5x ./internal/standalone/

const (
	scaleExact = 100_000
	scaleWild  = 1_000
)

// writeScaleFolder writes the harness' folder: gateway.yaml (one Passthrough listener on
// port), backends.yaml (one Service and EndpointSlice) and routes.yaml.
func writeScaleFolder(tb testing.TB, dir string, port, exact, wild int) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	write := func(name string, fill func(w io.Writer)) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			tb.Fatal(err)
		}
		w := bufio.NewWriter(f)
		fill(w)
		if err := w.Flush(); err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
	write("gateway.yaml", func(w io.Writer) {
		io.WriteString(w, fixture.GatewayYAML("default", "bench", fixture.Passthrough("pass", port, "")))
	})
	write("backends.yaml", func(w io.Writer) {
		io.WriteString(w, fixture.ServiceYAML("default", "be", 443, 9, "127.0.0.1"))
	})
	hosts := make([]string, 0, exact+wild)
	for i := range exact {
		hosts = append(hosts, fmt.Sprintf("h%d.scale.test", i))
	}
	for i := range wild {
		hosts = append(hosts, fmt.Sprintf("*.w%d.wild.test", i))
	}
	write("routes.yaml", func(w io.Writer) { writeRoutes(w, "r", hosts) })
}

// writeRoutes writes hosts as TLSRoutes of 16 hostnames, named prefix-N.
func writeRoutes(w io.Writer, prefix string, hosts []string) {
	for n, i := 0, 0; i < len(hosts); n, i = n+1, i+16 {
		if n > 0 {
			fmt.Fprint(w, "---\n")
		}
		io.WriteString(w, fixture.TLSRouteYAML(fixture.TLSRoute{
			Namespace: "default", Name: fmt.Sprintf("%s-%d", prefix, n), Gateway: "bench", Section: "pass",
			Hostnames: hosts[i:min(i+16, len(hosts))], Backends: []fixture.BackendRef{fixture.To("be", 443)},
		}))
	}
}

// writeChange replaces zz-change.yaml by renaming a new file over it, as the harness does.
func writeChange(tb testing.TB, dir, host string) {
	tb.Helper()
	tmp := filepath.Join(dir, ".zz-change.tmp")
	f, err := os.Create(tmp)
	if err != nil {
		tb.Fatal(err)
	}
	writeRoutes(f, "chg", []string{host})
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "zz-change.yaml")); err != nil {
		tb.Fatal(err)
	}
}

func newScaleRunner(tb testing.TB, dir string) (*Runner, *proxy.Proxy) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New()
	p := proxy.New(proxy.Options{Metrics: m, Logger: log})
	tb.Cleanup(func() { p.Shutdown(tb.Context()) })
	return New(Config{Paths: []string{dir}, Proxy: p, Metrics: m, Logger: log}), p
}

// timedLoad loads r under the benchmark's timer (stopped on entry, running on return), then
// checks, untimed, that host is served.
func timedLoad(b *testing.B, r *Runner, p *proxy.Proxy, host string) {
	b.Helper()
	b.StartTimer()
	if err := r.Load(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if _, rt := p.Snapshot().Ports[0].Lookup([]byte(host)); rt == nil {
		b.Fatalf("%s is not served", host)
	}
	b.StartTimer()
}

// BenchmarkScaleStart is the first load of a process: nothing cached.
func BenchmarkScaleStart(b *testing.B) {
	port := testutil.FreePort(b)
	base := b.TempDir()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		// A new folder each time: the caches are keyed by file name.
		dir := filepath.Join(base, strconv.Itoa(i))
		writeScaleFolder(b, dir, port, scaleExact, scaleWild)
		r, p := newScaleRunner(b, dir)
		b.StartTimer()
		if err := r.Load(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		p.Shutdown(b.Context())
		os.RemoveAll(dir)
		b.StartTimer()
	}
}

// BenchmarkScaleChange is a reload after a one-route file was replaced.
func BenchmarkScaleChange(b *testing.B) {
	dir := b.TempDir()
	writeScaleFolder(b, dir, testutil.FreePort(b), scaleExact, scaleWild)
	r, p := newScaleRunner(b, dir)
	writeChange(b, dir, "change-0.bench.test")
	if err := r.Load(); err != nil {
		b.Fatal(err)
	}
	for i := 1; b.Loop(); i++ {
		b.StopTimer()
		host := fmt.Sprintf("change-%d.bench.test", i)
		writeChange(b, dir, host)
		timedLoad(b, r, p, host)
	}
}

// The benchmarks' set-up, at a small size, as a test: the folder loads, a replaced file is
// picked up by the next load, and the previous routes keep being served (so the benchmarks
// cannot rot unnoticed between the runs that use them).
func TestScaleFolderReload(t *testing.T) {
	dir := t.TempDir()
	writeScaleFolder(t, dir, testutil.FreePort(t), 2_000, 50)
	r, p := newScaleRunner(t, dir)
	if err := r.Load(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		host := fmt.Sprintf("change-%d.bench.test", i)
		writeChange(t, dir, host)
		if err := r.Load(); err != nil {
			t.Fatal(err)
		}
		port := p.Snapshot().Ports[0]
		for _, name := range []string{host, "h1999.scale.test", "x.w49.wild.test"} {
			if _, rt := port.Lookup([]byte(name)); rt == nil {
				t.Fatalf("after change %d: %s is not served", i, name)
			}
		}
		if i > 0 {
			if _, rt := port.Lookup([]byte(fmt.Sprintf("change-%d.bench.test", i-1))); rt != nil {
				t.Fatalf("after change %d: the replaced route is still served", i)
			}
		}
	}
}

// BenchmarkScaleEditBigFile is a reload after one hostname changed inside the 100 000-name
// file itself (not a file of its own): the file is read again, but only the edited document
// is decoded.
func BenchmarkScaleEditBigFile(b *testing.B) {
	dir := b.TempDir()
	writeScaleFolder(b, dir, testutil.FreePort(b), scaleExact, scaleWild)
	r, p := newScaleRunner(b, dir)
	if err := r.Load(); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "routes.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		host := fmt.Sprintf("edit-%d.scale.test", i)
		data := bytes.Replace(orig, []byte(`"h50000.scale.test"`), []byte(strconv.Quote(host)), 1)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
		timedLoad(b, r, p, host)
	}
}
