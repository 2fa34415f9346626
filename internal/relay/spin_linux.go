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
// adaptive: a spin that found events after asking at least once saved a sleep and a
// wake-up, taken to be worth half the budget, and cost the time it spun; one that ran out
// saved nothing and cost its budget. The score sums what spins saved less what they cost
// (between 0 and spinScoreMax halves of the budget); the loop spins at every wait while it
// is high, and otherwise tries one spin in 16 waits to find out when to start, twice as
// seldom after each try that did not pay (down to one in 1024). A spin whose first ask
// finds events tells nothing: a wait would have returned at once too. A spin during which
// the loop was off its CPU (preempted) saved no context switch, whatever it found.
//
// Why the score counts time and off-CPU spins: where a new connection costs little (the
// Intel benchmark machine), spins that paid late cost nearly their budget, and with the
// proxy on its clients' CPU a spin finds events only once preempted, holding the CPU its
// clients need; counting a paid spin as a whole saving there cost new connections ×1.10
// the CPU of the loop without spins and ping-pong p99 ×1.3. Measurements of the rule,
// and what it leaves unmeasured (the AMD guests' slow-phase gain), are in
// bench/results/notes.md ("spins that count their time").
type spinner struct {
	budget   time.Duration // 0: never spin
	score    time.Duration // what spins saved less what they cost, in [0, spinScoreMax halves of budget]
	sampled  int           // waits since the last spin tried while the score was low
	every    int           // with a low score, spin once in this many waits
	spinning bool          // asking without waiting since start
	polls    int           // empty asks in this spin
	start    time.Time     // of this spin
	last     time.Time     // of this spin's last ask
	off      bool          // this spin was off its CPU: a gap between asks (asked)
	now      func() time.Time
}

// The score's bounds, in halves of the budget: what a spin that finds events at once after
// its first ask saves.
const (
	spinOnScore     = 8    // spin at every wait from this score up
	spinScoreMax    = 16   // how much good record a run of empty spins has to wear off
	spinSampleEvery = 16   // with a low score, spin once in this many waits at first,
	spinSampleMax   = 1024 // twice as seldom after each spin that did not pay, up to this
)

// A gap between two asks of a spin longer than its budget over spinOffCPU, and than
// spinOffCPUMin, means the loop's thread was off its CPU. An ask costs 0.2-1.5 µs: the floor
// keeps a short budget's asks from counting as preemptions.
const (
	spinOffCPU    = 4
	spinOffCPUMin = 2 * time.Microsecond
)

func newSpinner(budget time.Duration) spinner {
	return spinner{budget: budget, every: spinSampleEvery, now: time.Now}
}

// saving is what a sleep and a wake-up cost, which a paid spin saves: half the budget.
func (s *spinner) saving() time.Duration { return s.budget / 2 }

// low reports whether the score is below the one from which the loop spins at every wait.
func (s *spinner) low() bool { return s.score < spinOnScore*s.saving() }

// asked notes the time of an ask in a spin, and whether the loop was off its CPU since the
// one before.
func (s *spinner) asked() time.Time {
	now := s.now()
	s.off = s.off || now.Sub(s.last) > max(s.budget/spinOffCPU, spinOffCPUMin)
	s.last = now
	return now
}

// settle ends a spin that found events (paid) or ran out at now: the score gains what it
// saved less the time it spun.
func (s *spinner) settle(paid bool, now time.Time) {
	d := -now.Sub(s.start)
	if paid {
		d += s.saving()
	}
	s.score = min(max(s.score+d, 0), spinScoreMax*s.saving())
	s.spinning = false
	switch {
	case d > 0:
		s.every = spinSampleEvery
	case s.low():
		s.every = min(2*s.every, spinSampleMax)
	}
}

// found tells the spinner that the loop's last ask found events: a spin that needed more
// than one ask to find them saved a sleep and a wake-up, unless the loop was off its CPU
// meanwhile. That is a context switch anyway, and where it happens the events' senders
// share the loop's CPU: they could only run, and make the events, once the spin was
// preempted, so the spin delayed them and saved nothing.
func (s *spinner) found() {
	if s.spinning && s.polls > 0 {
		now := s.asked()
		s.settle(!s.off, now)
	}
	s.spinning = false // a spin whose first ask found events ends without a verdict
}

// begin is asked when the loop, after work, would wait: it reports whether to ask without
// waiting instead, starting a spin.
func (s *spinner) begin() bool {
	if s.budget <= 0 {
		return false
	}
	s.sampled++
	if s.low() && s.sampled < s.every {
		return false
	}
	s.sampled = 0
	s.spinning, s.polls, s.off, s.start = true, 0, false, s.now()
	s.last = s.start
	return true
}

// empty tells the spinner that an ask without waiting found nothing; it reports whether
// to ask again without waiting (the spin goes on, or one starts).
func (s *spinner) empty() bool {
	if !s.spinning {
		return s.begin()
	}
	s.polls++
	now := s.asked()
	if now.Sub(s.start) < s.budget {
		return true
	}
	s.settle(false, now)
	return false
}
