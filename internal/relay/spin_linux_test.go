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
	for i := 1; i <= 2*spinSampleEvery; i++ {
		if s.begin() {
			return i
		}
	}
	t.Fatalf("no spin in %d waits (score %d)", 2*spinSampleEvery, s.score)
	return 0
}

// paidSpin runs a spin whose second ask finds events.
func paidSpin(s *spinner, c *fakeClock) {
	c.add(time.Microsecond)
	s.empty()
	c.add(time.Microsecond)
	s.found()
}

// emptySpin runs a spin that asks until its budget is spent, then waits.
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
// spin at every wait, and spins that find nothing take that back.
func TestSpinnerLearns(t *testing.T) {
	s, c := testSpinner(10 * time.Microsecond)
	if n := waitsUntilSpin(t, s); n != spinSampleEvery {
		t.Fatalf("first spin at wait %d, want %d", n, spinSampleEvery)
	}
	paidSpin(s, c)
	for range spinOnScore - 1 {
		if n := waitsUntilSpin(t, s); n != spinSampleEvery {
			t.Fatalf("a sampled spin at wait %d with score %d, want %d", n, s.score, spinSampleEvery)
		}
		paidSpin(s, c)
	}
	// Eight spins paid: every wait spins now, as long as they keep paying.
	for range 50 {
		if n := waitsUntilSpin(t, s); n != 1 {
			t.Fatalf("spin at wait %d with score %d, want every wait", n, s.score)
		}
		paidSpin(s, c)
	}
	if s.score != spinScoreMax {
		t.Fatalf("score %d after a long run of paid spins, want the cap %d", s.score, spinScoreMax)
	}
	// From the cap, (spinScoreMax-spinOnScore)/spinFailCost+1 empty spins stop it.
	fails := 0
	for waitsUntilSpin(t, s) == 1 {
		emptySpin(t, s, c)
		fails++
		if fails > spinScoreMax {
			t.Fatal("empty spins never stopped the spinning")
		}
	}
	if want := (spinScoreMax-spinOnScore)/spinFailCost + 1; fails != want {
		t.Fatalf("spinning stopped after %d empty spins, want %d", fails, want)
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
	s.score = 5
	waitsUntilSpin(t, s)
	s.found()
	if s.score != 5 || s.spinning {
		t.Fatalf("score %d, spinning %v after a spin whose first ask found events; want 5, false", s.score, s.spinning)
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
