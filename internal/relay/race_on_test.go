//go:build race

package relay

// raceEnabled: the race detector's sync.Pool drops a share of what is put back on purpose,
// so allocation budgets do not hold under it.
const raceEnabled = true
