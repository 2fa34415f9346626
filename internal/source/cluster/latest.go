package cluster

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// latest is the hand-over between the reconciler and a leader-only writer (the status
// writer, the tenant applier): the reconciler publishes each new value without ever
// blocking, and the writer's loop processes only the newest one, trying a failed pass again
// after retryAfter, or sooner when a newer value arrives.
type latest[T any] struct {
	mu     sync.Mutex
	v      *T
	kick   chan struct{} // capacity 1: "v changed"
	passes atomic.Int64  // passes finished, successful or not (tests)
}

func newLatest[T any]() latest[T] { return latest[T]{kick: make(chan struct{}, 1)} }

// publish replaces the value to process.
func (l *latest[T]) publish(v *T) {
	l.mu.Lock()
	l.v = v
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// again makes the writer process the current value once more (something else it reads
// changed, such as a certificate probe's verdict).
func (l *latest[T]) again() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run calls pass with the newest value whenever it changes, until ctx is done.
func (l *latest[T]) run(ctx context.Context, retryAfter time.Duration, log *slog.Logger, what string, pass func(context.Context, *T) error) error {
	var retryC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-retryC:
		}
		retryC = nil
		l.mu.Lock()
		v := l.v
		l.mu.Unlock()
		if v == nil {
			continue
		}
		err := pass(ctx, v)
		l.passes.Add(1)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn(what+" failed; will retry", "error", err)
			retryC = time.After(retryAfter)
		}
	}
}
