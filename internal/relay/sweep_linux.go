package relay

import (
	"time"
)

// watch makes sure the sweeper runs often enough for a timeout of d (idle or dial): four
// checks per timeout, so a pair ends between d and 1.25 d after its last byte.
func (r *Relay) watch(d time.Duration) {
	each := min(max(d/4, 5*time.Millisecond), time.Second)
	if cur := r.sweepSet.Load(); cur != 0 && time.Duration(cur) <= each {
		return // the common case: every connection's dial asks for the same timeout
	}
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	if r.sweepEach != 0 && r.sweepEach <= each {
		return
	}
	first := r.sweepEach == 0
	r.sweepEach = each
	r.sweepSet.Store(int64(each))
	if first {
		go r.sweep()
	} else {
		select {
		case r.sweepWake <- struct{}{}:
		default:
		}
	}
}

func (r *Relay) sweep() {
	r.sweepMu.Lock()
	t := time.NewTicker(r.sweepEach)
	r.sweepMu.Unlock()
	defer t.Stop()
	var idle, timedOut, keep []*Pair
	for {
		select {
		case <-r.stop:
			return
		case <-r.sweepWake:
			r.sweepMu.Lock()
			t.Reset(r.sweepEach)
			r.sweepMu.Unlock()
			continue
		case <-t.C:
		}
		now := time.Now().UnixNano()
		for _, l := range r.loops {
			idle = idle[:0]
			l.mu.Lock()
			for _, p := range l.pairs {
				if p == nil {
					continue
				}
				// Taken, so the next sweep does not ask again; a new connect meanwhile
				// (an adopted client's next endpoint) sets a new time and is asked for later.
				if ka := p.keepAt.Load(); ka != 0 && now >= ka && p.keepAt.CompareAndSwap(ka, 0) {
					keep = append(keep, p)
				}
				if dl := p.dialDeadline.Load(); dl != 0 && now >= dl {
					timedOut = append(timedOut, p)
				} else if it := p.idle.Load(); it > 0 && p.started.Load() && now-p.lastActive.Load() >= it {
					idle = append(idle, p)
				}
			}
			l.mu.Unlock()
			for _, p := range idle {
				p.Stop(OutcomeIdle)
			}
			for _, p := range timedOut {
				// A flag, not Stop: should the connect succeed meanwhile, the pair lives on.
				p.dialTimedOut.Store(true)
				p.poke()
			}
			timedOut = timedOut[:0]
			if len(keep) > 0 {
				ps := keep // the task owns this batch; the next one starts a new slice
				l.post(func() {
					for _, p := range ps {
						p.keepAliveNow()
					}
				})
				keep = nil
			}
		}
	}
}
