// Package standalone runs snigate without a cluster: it loads Gateway API manifests from
// files, translates them, applies the snapshot to the proxy, and reloads when the files
// change or on request (SIGHUP).
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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/resources"
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
}

// Runner owns the load → translate → apply loop.
type Runner struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex // serialises loads
	generation uint64
	// memo carries translate's work from one load to the next: a change of one route among
	// 100 000 hostnames translates that route only (issue 6).
	memo translate.Memo
	// stateMu guards state alone, so /status and /readyz answer at once while a long load
	// (100 000 routes take about a second) runs.
	stateMu sync.Mutex
	state   admin.State
	snap    *snapshot.Snapshot // serving snapshot, described lazily into table
	table   *snapshot.Description
}

// New returns a runner; nothing is loaded until Load.
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 20 * time.Millisecond
	}
	return &Runner{cfg: cfg, log: cfg.Logger}
}

// State returns what the admin server shows.
func (r *Runner) State() admin.State {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	if r.snap != nil && r.table == nil {
		d := r.snap.Describe()
		r.table = &d
	}
	st := r.state
	if r.table != nil {
		st.Table = r.table
	}
	return st
}

// Load reads the files, translates them and applies the result. On error the running
// configuration is unchanged.
func (r *Runner) Load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.load()
	if err != nil {
		r.cfg.Metrics.Reloads.WithLabelValues("rejected").Inc()
		r.stateMu.Lock()
		r.state.LastError = err.Error()
		ready, gen := r.state.Ready, r.state.Generation
		r.stateMu.Unlock()
		if ready {
			r.log.Error("configuration rejected; still serving the previous one",
				"generation", gen, "error", err)
		}
		return err
	}
	r.cfg.Metrics.Reloads.WithLabelValues("applied").Inc()
	return nil
}

func (r *Runner) load() error {
	res, err := file.Load(r.cfg.Paths...)
	if err != nil {
		return err
	}
	opts := r.cfg.Translate
	opts.Generation = r.generation + 1
	opts.Memo = &r.memo
	out := translate.Translate(res, opts)
	if len(out.Errors) > 0 {
		return errors.Join(out.Errors...)
	}
	if err := r.cfg.Proxy.Apply(out.Snapshot); err != nil {
		var be *proxy.BindError
		if errors.As(err, &be) {
			return bindError(res.Origins, be)
		}
		return err
	}
	r.generation = opts.Generation
	routes := out.Snapshot.RouteHostnames()
	r.cfg.Metrics.Generation.Set(float64(r.generation))
	r.cfg.Metrics.Routes.Set(float64(routes))
	r.stateMu.Lock()
	// The table is described when /status asks for it, not on every load: with 100 000
	// routes the description alone takes about 100 ms.
	r.state = admin.State{Ready: true, Generation: r.generation, Status: out.Status}
	r.snap, r.table = out.Snapshot, nil
	r.stateMu.Unlock()
	r.log.Info("configuration applied", "generation", r.generation, "ports", len(out.Snapshot.Ports),
		"routeHostnames", routes)
	return nil
}

// Watch reloads when a watched file changes or when reload receives, until ctx is done.
func (r *Runner) Watch(ctx context.Context, reload <-chan struct{}) error {
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

// bindError names the file and field of a listener whose port cannot be bound.
func bindError(origins map[string]string, be *proxy.BindError) error {
	parts := strings.SplitN(be.Listener, "/", 3)
	if len(parts) != 3 {
		return be
	}
	where := "Gateway " + parts[0] + "/" + parts[1]
	if o := origins[resources.OriginKey("Gateway", parts[0], parts[1])]; o != "" {
		where = resources.DescribeOrigin(o) + " (" + where + ")"
	}
	return fmt.Errorf("%s: spec.listeners[name=%s].port: cannot bind %s: %w", where, parts[2], be.Address, be.Err)
}
