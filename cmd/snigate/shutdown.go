package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/snigate/snigate/internal/admin"
)

// shutdown is how a data plane told to stop (SIGTERM, SIGINT) stops without refusing
// anyone. First its readiness fails while it still accepts connections, for grace: a load
// balancer, and the endpoints of the Service in front of a Pod, take that long to stop
// sending to it; a listener closed at once would refuse what they still send. Then the
// caller stops its source and drains the open connections to --drain-timeout. A second
// signal cuts the grace short.
type shutdown struct {
	grace    time.Duration
	draining atomic.Bool
	log      *slog.Logger
}

// shutdownGraceFlag registers --shutdown-grace.
func shutdownGraceFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("shutdown-grace", 0, "on SIGTERM, how long /readyz fails while connections are still accepted, before the drain (behind a Service or load balancer: as long as they take to stop sending)")
}

// state is f with readiness failing once the process is stopping.
func (s *shutdown) state(f func() admin.State) func() admin.State {
	return func() admin.State {
		st := f()
		if s.draining.Load() {
			st.Ready, st.Draining = false, true
		}
		return st
	}
}

// context ends grace after the first SIGTERM or SIGINT (at once on a second), or when
// stop is called.
func (s *shutdown) context() (ctx context.Context, stop func()) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		var got os.Signal
		select {
		case got = <-sig:
		case <-ctx.Done():
			return
		}
		s.draining.Store(true)
		if s.grace > 0 {
			s.log.Info("stopping: readiness fails, connections still accepted", "signal", got.String(), "grace", s.grace)
			select {
			case <-time.After(s.grace):
			case again := <-sig:
				s.log.Info("second signal: grace cut short", "signal", again.String())
			case <-ctx.Done():
			}
		}
		cancel()
	}()
	return ctx, func() { signal.Stop(sig); cancel() }
}
