package relay

import "time"

// A loop that has just worked and finds its epoll set empty may ask it again without
// waiting, for a short time (WithSpin, 10 µs by default), before it sleeps: a spin.
//
// Why: under many busy connections (a database's clients sending small requests) the
// events come from the clients and backends a few microseconds apart. A loop that sleeps
// between them is woken for each by the kernel of the CPU that made the event ready, and
// that CPU pays for it: the wake-up is an interprocessor interrupt, which on a virtual
// machine costs the sender an exit to the hypervisor. When that CPU is the busy one it is
// what bounds the rate. Measured (bench's ab rr test, 50 connections, proxy on CPU 1,
// clients and backend on CPU 0, a slow phase of the benchmark machine): sleeping, snigate
// made CPU 0 send 1.28 interrupts and spend 48.9-51.8 µs per request, where HAProxy and
// sniproxy, busier per request, rarely slept (0.12-0.17 interrupts, 38 µs); snigate served
// ×0.74-0.78 of their requests per second. With spins of 10 µs: CPU 0 39.3 µs per request,
// ×1.30 the requests per second (×0.97-1.00 of the peers'), at the peers' CPU per request.
//
// Over 84 interleaved runs of five shapes (4 rounds each, against the loop without
// spins): many connections ×1.018 the requests/s by the median, ×1.13-1.38 in the 8 runs
// where the machine was slow and the loop without spins fell to ×0.70-0.82 of the best
// peer's (with spins ×0.89-0.99); CPU per new connection ×1.001, ×1.002 and ×1.005 (the
// standard, fin and tiny shapes); one connection's ping-pong ×1.04 CPU, p50 ×1.016.
//
// A spin that finds nothing costs its 10 µs of CPU for nothing, and new connections (the
// gaps between their events are 20-100 µs) would pay that on most of theirs. So spins are
// adaptive: a score rises with each spin that found events after asking at least once
// (a sleep and a wake-up saved) and falls by two with each that ran out; the loop spins
// at every wait while the score is high, and otherwise tries one spin in 16 to find out
// when to start. A spin whose first ask finds events tells nothing: a wait would have
// returned at once too.
type spinner struct {
	budget   time.Duration // 0: never spin
	score    int
	sampled  int       // waits since the last spin tried while the score was low
	spinning bool      // asking without waiting since start
	polls    int       // empty asks in this spin
	start    time.Time // of this spin
	now      func() time.Time
}

const (
	spinOnScore     = 8  // spin at every wait from this score up
	spinScoreMax    = 16 // how much good record a run of empty spins has to wear off
	spinFailCost    = 2  // an empty spin costs its budget; a paid one saves about half that
	spinSampleEvery = 16 // with a low score, spin once in this many waits
)

func newSpinner(budget time.Duration) spinner { return spinner{budget: budget, now: time.Now} }

// found tells the spinner that the loop's last ask found events: a spin that needed more
// than one ask to find them paid for itself.
func (s *spinner) found() {
	if s.spinning && s.polls > 0 {
		s.score = min(s.score+1, spinScoreMax)
	}
	s.spinning = false
}

// begin is asked when the loop, after work, would wait: it reports whether to ask without
// waiting instead, starting a spin.
func (s *spinner) begin() bool {
	if s.budget <= 0 {
		return false
	}
	s.sampled++
	if s.score < spinOnScore && s.sampled < spinSampleEvery {
		return false
	}
	s.sampled = 0
	s.spinning, s.polls, s.start = true, 0, s.now()
	return true
}

// empty tells the spinner that an ask without waiting found nothing; it reports whether
// to ask again without waiting (the spin goes on, or one starts).
func (s *spinner) empty() bool {
	if !s.spinning {
		return s.begin()
	}
	s.polls++
	if s.now().Sub(s.start) < s.budget {
		return true
	}
	s.spinning = false
	s.score = max(s.score-spinFailCost, 0)
	return false
}
