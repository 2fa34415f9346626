package relay

import (
	"testing"
	"time"
)

// fakeClock is a spinner's clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func testSpinner(budget time.Duration) (*spinner, *fakeClock) {
	c := &fakeClock{t: time.Unix(1, 0)}
	s := newSpinner(budget)
	s.now = c.now
	return &s, c
}

// waitsUntilSpin counts the waits the loop makes (begin) until the spinner starts a spin.
func waitsUntilSpin(t *testing.T, s *spinner) int {
	t.Helper()
	return waitsUntilSpinIn(t, s, 2*spinSampleEvery)
}

// waitsUntilSpinIn is waitsUntilSpin failing after most waits instead of 2×spinSampleEvery.
func waitsUntilSpinIn(t *testing.T, s *spinner, most int) int {
	t.Helper()
	for i := 1; i <= most; i++ {
		if s.begin() {
			return i
		}
	}
	t.Fatalf("no spin in %d waits (score %v)", most, s.score)
	return 0
}

// paidSpin runs a spin whose second ask, 2 µs after its start, finds events.
func paidSpin(s *spinner, c *fakeClock) {
	c.add(time.Microsecond)
	s.empty()
	c.add(time.Microsecond)
	s.found()
}

// emptySpin runs a spin that asks every µs until its budget is spent, then waits.
func emptySpin(t *testing.T, s *spinner, c *fakeClock) {
	t.Helper()
	for i := 0; ; i++ {
		c.add(time.Microsecond)
		if !s.empty() {
			return
		}
		if i > 1000 {
			t.Fatal("a spin outlived its budget")
		}
	}
}

func TestSpinnerOff(t *testing.T) {
	s, _ := testSpinner(0)
	for range 100 {
		if s.begin() || s.empty() {
			t.Fatal("a spinner without a budget spun")
		}
	}
}

// With no record, the loop spins once in spinSampleEvery waits; spins that pay make it
// spin at every wait, and spins that find nothing take that back. Each paid spin here saves
// half the 10 µs budget and spins 2 µs: +3 µs; each empty one spins the budget: -10 µs.
func TestSpinnerLearns(t *testing.T) {
	s, c := testSpinner(10 * time.Microsecond)
	paid := 0
	for n := waitsUntilSpin(t, s); n != 1; n = waitsUntilSpin(t, s) {
		if n != spinSampleEvery {
			t.Fatalf("a sampled spin at wait %d with score %v, want %d", n, s.score, spinSampleEvery)
		}
		paidSpin(s, c)
		paid++
	}
	// Every wait spins now, as long as they keep paying.
	if want := 14; paid != want { // 14 × 3 µs ≥ spinOnScore × 5 µs = 40 µs
		t.Fatalf("spinning at every wait after %d paid spins, want %d", paid, want)
	}
	for range 50 {
		paidSpin(s, c)
		if n := waitsUntilSpin(t, s); n != 1 {
			t.Fatalf("spin at wait %d with score %v, want every wait", n, s.score)
		}
	}
	if want := spinScoreMax * 5 * time.Microsecond; s.score != want {
		t.Fatalf("score %v after a long run of paid spins, want the cap %v", s.score, want)
	}
	// From the cap (80 µs), five empty spins take the score below 40 µs.
	fails := 0
	for {
		emptySpin(t, s, c)
		fails++
		if waitsUntilSpin(t, s) != 1 {
			break
		}
		if fails > spinScoreMax {
			t.Fatal("empty spins never stopped the spinning")
		}
	}
	if fails != 5 {
		t.Fatalf("spinning stopped after %d empty spins, want 5", fails)
	}
}

// A spin that finds events late, after more than half its budget, cost more than the wake-up
// it saved: such spins never make the loop spin at every wait, and sampled ones come twice
// as seldom after each, up to one in spinSampleMax waits.
func TestSpinnerLatePaidSpinsLose(t *testing.T) {
	s, c := testSpinner(10 * time.Microsecond)
	want := spinSampleEvery
	for range 12 {
		if n := waitsUntilSpinIn(t, s, 2*spinSampleMax); n != want {
			t.Fatalf("a sampled spin at wait %d (score %v), want %d", n, s.score, want)
		}
		for range 8 { // asks 1 µs apart; the ninth, at 8 µs, finds events
			c.add(time.Microsecond)
			s.empty()
		}
		s.found()
		want = min(2*want, spinSampleMax)
	}
	if s.score != 0 {
		t.Fatalf("score %v after late paid spins, want 0", s.score)
	}
	// One spin that pays early brings sampling back to its first pace.
	if n := waitsUntilSpinIn(t, s, 2*spinSampleMax); n != spinSampleMax {
		t.Fatalf("a sampled spin at wait %d, want %d", n, spinSampleMax)
	}
	paidSpin(s, c)
	if n := waitsUntilSpinIn(t, s, 2*spinSampleMax); n != spinSampleEvery {
		t.Fatalf("after a paid spin, a sampled spin at wait %d, want %d", n, spinSampleEvery)
	}
}

// A spin whose loop was off its CPU between two asks (a gap over budget/spinOffCPU) saved no
// context switch: finding events after it counts as the time spun, not as a saving.
func TestSpinnerOffCPU(t *testing.T) {
	s, c := testSpinner(10 * time.Microsecond)
	s.score = 30 * time.Microsecond
	waitsUntilSpin(t, s)
	c.add(time.Microsecond)
	s.empty()
	c.add(3 * time.Microsecond) // preempted: 3 µs between asks, over 2.5
	s.found()
	if want := 26 * time.Microsecond; s.score != want {
		t.Fatalf("score %v after a spin off its CPU that found events at 4 µs, want %v", s.score, want)
	}
	// The same spin on its CPU all along: asks 1 µs apart.
	waitsUntilSpin(t, s)
	for range 3 {
		c.add(time.Microsecond)
		s.empty()
	}
	c.add(time.Microsecond)
	s.found()
	if want := 27 * time.Microsecond; s.score != want { // 26 + 5 - 4
		t.Fatalf("score %v after a spin that found events at 4 µs, want %v", s.score, want)
	}
}

// With a short budget, a gap between asks as long as one slow ask is not a preemption: the
// off-CPU bound has a floor (spinOffCPUMin).
func TestSpinnerShortBudgetAsks(t *testing.T) {
	s, c := testSpinner(4 * time.Microsecond)
	s.score = 10 * time.Microsecond
	waitsUntilSpin(t, s)
	c.add(1500 * time.Nanosecond) // over budget/spinOffCPU (1 µs), under the floor
	s.empty()
	c.add(1500 * time.Nanosecond)
	s.found()
	if want := 9 * time.Microsecond; s.score != want { // 10 + 2 - 3
		t.Fatalf("score %v after a spin whose asks took 1.5 µs each, want %v", s.score, want)
	}
}

// A spin that ran out of budget has cost its budget, no more: the loop waits after it.
func TestSpinnerBudget(t *testing.T) {
	s, c := testSpinner(10 * time.Microsecond)
	waitsUntilSpin(t, s)
	asks := 0
	for {
		c.add(3 * time.Microsecond)
		asks++
		if !s.empty() {
			break
		}
	}
	if asks != 4 { // asks at 3, 6, 9 µs go on; at 12 µs the spin is over
		t.Fatalf("a 10 µs spin with asks 3 µs apart made %d, want 4", asks)
	}
	if s.spinning {
		t.Fatal("still spinning after its budget")
	}
}

// Events found at the first ask tell nothing (a wait would have returned at once): the
// score does not move.
func TestSpinnerFirstAskFinds(t *testing.T) {
	s, _ := testSpinner(10 * time.Microsecond)
	s.score = 5 * time.Microsecond
	waitsUntilSpin(t, s)
	s.found()
	if s.score != 5*time.Microsecond || s.spinning {
		t.Fatalf("score %v, spinning %v after a spin whose first ask found events; want 5µs, false", s.score, s.spinning)
	}
}

// An ask without waiting that comes back empty outside a spin (a repoll's) is a wait the
// loop is about to make: it may start a spin, counted like any other.
func TestSpinnerAfterRepoll(t *testing.T) {
	s, _ := testSpinner(10 * time.Microsecond)
	for i := 1; i < spinSampleEvery; i++ {
		if s.empty() {
			t.Fatalf("spin after %d empty repolls with no record", i)
		}
	}
	if !s.empty() {
		t.Fatalf("no sampled spin at the %dth wait", spinSampleEvery)
	}
}
