// Package standalone runs snigate without a cluster: it loads Gateway API manifests from
// files, hands them to the shared runner (package pipeline: translate, apply to the proxy,
// status and metrics), and reloads when the files change or on request (SIGHUP).
//
//	r := standalone.New(standalone.Config{Paths: []string{"examples/quickstart"}, Proxy: p, ...})
//	if err := r.Load(); err != nil { ... }   // the first load must succeed
//	go r.Watch(ctx)                           // later loads keep the last good config on error
//
// A load that fails — bad YAML, an unknown field, an invalid hostname, a port that cannot be
// bound — changes nothing: the previous snapshot keeps serving, and one error naming the
// file, object and field is logged and shown in the admin /status.
package standalone

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/pipeline"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/translate"
)

// Config configures a Runner.
type Config struct {
	Paths     []string
	Proxy     *proxy.Proxy
	Metrics   *metrics.Metrics
	Logger    *slog.Logger
	Translate translate.Options
	// Debounce groups bursts of file events into one reload (20 ms).
	Debounce time.Duration
	// Apply, when set, receives every snapshot instead of Proxy.Apply: a process taking
	// over from another (a live upgrade) receives its listening sockets there, once the
	// first configuration is known to be valid.
	Apply func(*snapshot.Snapshot) error
	// ProbeInterval is how often each DatabaseExposure's backend certificate is probed
	// again (default 5 minutes; at once on every change). Watch runs the probes.
	ProbeInterval time.Duration
}

// Runner owns the file side of the loop: a file.Loader, whose next load decodes only the
// files that changed, and the watch; translating and applying is the shared pipeline's.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	mu     sync.Mutex // serialises loads: the Loader is for one goroutine at a time
	loader file.Loader
	pipe   *pipeline.Runner
	probes *probe.Runner
}

// New returns a runner; nothing is loaded until Load.
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 20 * time.Millisecond
	}
	// TenantGateways in the files are rendered in memory; without a cluster there is no
	// cert-manager, which their status says.
	pc := pipeline.Config{Metrics: cfg.Metrics, Logger: cfg.Logger, Translate: cfg.Translate, Render: true}
	if cfg.Proxy != nil {
		pc.Apply = cfg.Proxy.Apply
	}
	if cfg.Apply != nil {
		pc.Apply = cfg.Apply
	}
	r := &Runner{cfg: cfg, log: cfg.Logger}
	po := probe.RunnerOptions{Interval: cfg.ProbeInterval, OnChange: func() {
		if err := r.pipe.Refresh(); err != nil {
			r.log.Warn("rendering the certificate probes' verdicts failed", "error", err)
		}
	}}
	if cfg.Metrics != nil {
		po.Expiry, po.Probes = cfg.Metrics.BackendCertificateExpiry, cfg.Metrics.CertificateProbes
	}
	r.probes = probe.NewRunner(po)
	pc.Probes = r.probes
	r.pipe, _ = pipeline.New(pc) // cannot fail: no Gateway filter
	return r
}

// State returns what the admin server shows.
func (r *Runner) State() admin.State { return r.pipe.State() }

// Load reads the files, translates them and applies the result. On error the running
// configuration is unchanged.
func (r *Runner) Load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	res, err := r.loader.Load(r.cfg.Paths...)
	if err != nil {
		return r.pipe.Reject(err)
	}
	return r.pipe.Run(res)
}

// Watch reloads when a watched file changes or when reload receives, and runs the
// certificate probes of the DatabaseExposures, until ctx is done.
func (r *Runner) Watch(ctx context.Context, reload <-chan struct{}) error {
	go r.probes.Run(ctx)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching files: %w", err)
	}
	defer w.Close()
	// Watch folders, not files: editors and kubectl-style tools replace a file by renaming
	// a new one over it, which ends a watch on the file itself.
	watched := map[string]bool{}
	files := map[string]bool{} // explicit file paths
	dirs := map[string]bool{}  // folder paths: every manifest file in them counts
	for _, p := range r.cfg.Paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		dir := abs
		if st, err := os.Stat(abs); err == nil && !st.IsDir() {
			dir = filepath.Dir(abs)
			files[abs] = true
		} else {
			dirs[abs] = true
		}
		if !watched[dir] {
			if err := w.Add(dir); err != nil {
				return fmt.Errorf("watching %s: %w", dir, err)
			}
			watched[dir] = true
		}
	}
	relevant := func(name string) bool {
		abs, _ := filepath.Abs(name)
		if files[abs] {
			return true
		}
		switch filepath.Ext(abs) {
		case ".yaml", ".yml", ".json":
			return dirs[filepath.Dir(abs)]
		}
		return false
	}
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !relevant(ev.Name) {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(r.cfg.Debounce)
			} else {
				timer.Reset(r.cfg.Debounce)
			}
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.log.Warn("file watch error", "error", err)
		case <-fire:
			fire = nil
			r.log.Info("files changed, reloading")
			r.Load()
		case <-reload:
			r.log.Info("reload requested")
			r.Load()
		}
	}
}
