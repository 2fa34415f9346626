package access

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The client table: per policy and client, the connections open and the rate (a GCRA's
// theoretical arrival time), in a table of fixed capacity, so that a flood from millions of
// addresses costs bounded memory (16 bytes an entry: 4 MiB at DefaultClients).
//
// Layout: buckets of one cache line, four entries each; a client may live in either of two
// buckets its hash names (two choices keep the table usable near full). An entry is two
// words: the client's fingerprint (a 64-bit keyed hash of the policy's id and the address;
// 0: empty) and its state, packed in one word so that a connection is counted by a single
// compare-and-swap, with no lock:
//
//	bit 63      busy: the entry is changing hands (see claim)
//	bits 60–62  generation: changes with each new owner, so a swap prepared for the old
//	            owner fails even if the new one's state happens to equal it
//	bits 44–59  connections open (at most maxClientConns)
//	bits 0–43   the rate's theoretical arrival time, in ticks of 16 µs since the
//	            Limiter's epoch, modulo 2^44 (8.9 years; compared modulo, see gcra)
//
// Finding a client touches one or two cache lines and takes one atomic instruction; giving a
// connection back (Release) one atomic add on the entry, found by its slot: an entry with
// connections open never changes hands. Only a client not found takes a lock (one of
// insertLocks, by its hash, so two goroutines never insert the same client twice), to
// claim an entry: an empty one, else the one of its eight candidates with no connection
// open that carries the least information (its rate refilled soonest). What an eviction
// loses is at most a client's partly spent rate: it starts again with a full bucket, as a
// client does after a quiet minute. When all eight candidates hold connections the client
// is refused (fail closed, counted as client_connection_limit): with the table far larger
// than the clients that can hold connections (a process's file descriptors), that takes
// more clients holding connections than the table has buckets.
//
// Two clients share an entry only if their 64-bit fingerprints are equal: the hash is keyed
// by a random seed per table (math/rand/v2's, from the operating system's entropy), so this
// cannot be aimed at, and by chance it is one in 2^61 per lookup.
//
// Why by hand: rate limiters (golang.org/x/time/rate) are one object per client, and an
// unbounded map of them is what a flood fills; HAProxy's stick tables are the model here
// (fixed size, eviction). The check must stay under 100 ns per connection with 100 000
// clients tracked (BenchmarkAdmit): a Go map, or a locked table of 48-byte entries behind an
// index, is two dependent cache misses and four locked instructions, measured at 215–300 ns
// on the benchmark machine, where a random read beyond its 4 MiB cache costs ~120 ns.

// tick is the client table's unit of time: 2^44 of them are 8.9 years, and a rate of one
// connection a tick (62 500 a second from one client) is the fastest it tells apart.
const tick = 16 * time.Microsecond

const (
	ways          = 4
	stateTATBits  = 44
	stateTATMask  = 1<<stateTATBits - 1
	stateConnsOne = 1 << stateTATBits
	// maxClientConns is the most connections one client can have counted open per policy
	// (New clamps PerClient.MaxConnections to it; one client address can hardly open more
	// to one address and port).
	maxClientConns = 1<<16 - 1
	stateConnsMask = maxClientConns << stateTATBits
	stateGenOne    = 1 << 60
	stateGenMask   = 7 << 60
	stateBusy      = 1 << 63
	// maxAhead bounds how far ahead a theoretical arrival time may legitimately be (New
	// clamps the burst's tolerance to it): one further ahead is a time from before the clock
	// wrapped, i.e. long past.
	maxAhead = 1 << (stateTATBits - 2) // ticks: 2.2 years
	// fresh is how far before now a new entry's arrival time is put: past for any accept
	// time near now, and years short of reading as ahead after the clock wraps.
	fresh = 1 << 40 // ticks: 203 days
	// insertLocks stripes the locks of inserting clients.
	insertLocks = 64
)

func conns(s uint64) int32 { return int32(s & stateConnsMask >> stateTATBits) }

type bucket struct {
	fp [ways]atomic.Uint64
	st [ways]atomic.Uint64
}

type clientTable struct {
	buckets []bucket
	mask    uint64
	seed    [4]uint64 // hash's key
	locks   [insertLocks]struct {
		sync.Mutex
		_ [56]byte // one cache line each
	}
	tracked   atomic.Int64
	evictions atomic.Uint64
}

func (t *clientTable) init(capacity int) {
	n := max(2, 1<<bits.Len(uint((capacity+ways-1)/ways-1)))
	t.buckets = make([]bucket, n)
	t.mask = uint64(n - 1)
	for i := range t.seed {
		// Odd, so that no product is all zeros for a zero key.
		t.seed[i] = rand.Uint64() | 1
	}
}

func (t *clientTable) capacity() int { return len(t.buckets) * ways }
func (t *clientTable) len() int      { return int(t.tracked.Load()) }

// hash is the fingerprint of policy state id's client a, an IPv6 address cut to v6bits
// (never 0: 0 marks an empty entry). It is wyhash's mixing (a 128-bit product folded) keyed
// by the table's random seed: hash/maphash would do, but at 30 ns a call it was a tenth of
// the check.
func (t *clientTable) hash(id uint64, a netip.Addr, v6bits int) uint64 {
	a16 := a.As16()
	hi, lo := binary.BigEndian.Uint64(a16[:8]), binary.BigEndian.Uint64(a16[8:])
	if a.Is6() && v6bits < 128 {
		if v6bits <= 64 {
			hi &= ^uint64(0) << (64 - v6bits)
			lo = 0
		} else {
			lo &= ^uint64(0) << (128 - v6bits)
		}
	}
	h := mix(hi^t.seed[0], lo^t.seed[1])
	return mix(h^id^t.seed[2], t.seed[3]) | 1
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// candidates are the indexes of fp's two buckets (different ones).
func (t *clientTable) candidates(fp uint64) [2]uint64 {
	b1 := fp >> 1 & t.mask
	b2 := (bits.RotateLeft64(fp, 32) * 0x9e3779b97f4a7c15 >> 1) & t.mask
	if b2 == b1 {
		b2 ^= 1
	}
	return [2]uint64{b1, b2}
}

func (t *clientTable) entry(slot int32) (*atomic.Uint64, *atomic.Uint64) {
	b := &t.buckets[slot/ways]
	return &b.fp[slot%ways], &b.st[slot%ways]
}

// find returns the state word of fp's entry and the state read from it (not busy), or nil.
// A busy entry (changing hands) is waited for.
func (t *clientTable) find(fp uint64) (*atomic.Uint64, uint64, int32) {
	cs := t.candidates(fp)
	for spin := 0; ; spin++ {
		busy := false
		for _, bi := range cs {
			b := &t.buckets[bi]
			for w := range ways {
				// The state is read before the fingerprint: an entry changes hands by
				// setting busy, then the fingerprint, then the new state; a state read not
				// busy, an own fingerprint read after it, and a swap from that state that
				// succeeds mean the entry was the client's all along (the generation
				// tells a new owner's equal state apart).
				s := b.st[w].Load()
				if b.fp[w].Load() != fp {
					continue
				}
				if s&stateBusy != 0 {
					busy = true
					continue
				}
				return &b.st[w], s, int32(bi)*ways + int32(w)
			}
		}
		if !busy {
			return nil, 0, -1
		}
		if spin > 16 {
			runtime.Gosched()
		}
	}
}

// admit counts a connection of client fp: at most maxConns open (0: no cap), and one
// every interval ticks with tolerance to spare (interval 0: no rate), at now (ticks).
// On Admitted it notes in e the slot and what it counted.
func (t *clientTable) admit(e *held, fp uint64, maxConns int32, interval, tolerance, now int64) Verdict {
	for {
		st, s, slot := t.find(fp)
		if st == nil {
			if st, s, slot = t.insert(fp, now); st == nil {
				return ClientLimit
			}
		}
		n := s
		if maxConns > 0 {
			if conns(s) >= maxConns {
				return ClientLimit
			}
			n += stateConnsOne
		}
		if interval > 0 {
			tat, ok := gcra(s&stateTATMask, interval, tolerance, now)
			if !ok {
				return RateLimited
			}
			n = n&^stateTATMask | tat
		}
		if n == s || st.CompareAndSwap(s, n) {
			e.slot = slot
			if maxConns > 0 {
				e.flags |= heldClient
			}
			if interval > 0 {
				e.flags |= heldRate
			}
			return Admitted
		}
		// Another connection of the client (or a Release) changed the entry: again.
	}
}

// gcra is the generic cell rate algorithm on a theoretical arrival time tat kept modulo
// 2^44 ticks: the connection at now conforms when tat is at most tolerance ahead of now, and
// then the next tat is returned. A tat further ahead than any tolerance is from before the
// clock wrapped (a client not seen for years): long past.
func gcra(tat uint64, interval, tolerance, now int64) (uint64, bool) {
	ahead := aheadOf(tat, now)
	if ahead > tolerance {
		return 0, false
	}
	return (uint64(now+ahead+interval) & stateTATMask), true
}

// aheadOf is how far (ticks) a theoretical arrival time tat is ahead of now, both modulo
// 2^44: 0 when it is past, or so far ahead that it must be from before the clock wrapped.
func aheadOf(tat uint64, now int64) int64 {
	ahead := int64((tat-uint64(now))<<(64-stateTATBits)) >> (64 - stateTATBits)
	if ahead < 0 || ahead > maxAhead {
		return 0
	}
	return ahead
}

// insert gives fp an entry (under its insert lock), ready for admit's swap: an empty one of
// its candidates if there is one, else the one with no connection open whose rate refills
// soonest; nil when every candidate has connections open.
func (t *clientTable) insert(fp uint64, now int64) (*atomic.Uint64, uint64, int32) {
	mu := &t.locks[fp>>58&(insertLocks-1)]
	mu.Lock()
	defer mu.Unlock()
	for {
		// Inserted meanwhile by a goroutine that held the lock?
		if st, s, slot := t.find(fp); st != nil {
			return st, s, slot
		}
		// Two choices, balanced: the bucket with fewer entries holding connections (which
		// cannot be evicted: what would refuse a client later), then with fewer entries in
		// use; in it, an empty entry, else the one whose rate refills soonest.
		var victim *bucket
		vi, vw, vs := uint64(0), 0, uint64(0)
		bestHeld, bestUsed := ways+1, ways+1
		for _, bi := range t.candidates(fp) {
			b := &t.buckets[bi]
			held, used, w0, s0, ahead0 := 0, 0, -1, uint64(0), int64(0)
			for w := range ways {
				s := b.st[w].Load()
				if s&(stateBusy|stateConnsMask) != 0 {
					held++ // changing hands, or connections open: not evictable
					used++
					continue
				}
				if b.fp[w].Load() == 0 {
					if w0 < 0 || ahead0 >= 0 {
						w0, s0, ahead0 = w, s, -1 // empty: better than any eviction
					}
					continue
				}
				used++
				if ahead := aheadOf(s&stateTATMask, now); w0 < 0 || (ahead0 >= 0 && ahead < ahead0) {
					w0, s0, ahead0 = w, s, ahead
				}
			}
			if w0 >= 0 && (held < bestHeld || held == bestHeld && used < bestUsed) {
				victim, vi, vw, vs, bestHeld, bestUsed = b, bi, w0, s0, held, used
			}
		}
		if victim == nil {
			return nil, 0, -1
		}
		st := &victim.st[vw]
		if !st.CompareAndSwap(vs, stateBusy|vs&stateGenMask) {
			continue // a connection of its client came meanwhile: choose again
		}
		old := victim.fp[vw].Swap(fp)
		// No connection, and the rate full: an arrival time long before now (0 would read as
		// ahead of a clock about to wrap, and now itself as ahead of another goroutine's
		// slightly earlier accept time).
		s := (vs+stateGenOne)&stateGenMask | uint64(now-fresh)&stateTATMask
		st.Store(s)
		if old == 0 {
			t.tracked.Add(1)
		} else {
			t.evictions.Add(1)
		}
		return st, s, int32(vi)*ways + int32(vw)
	}
}

// release takes back the connection e counted: an entry with connections open never
// changes hands, so its slot is still the client's.
func (t *clientTable) release(e *held) {
	_, st := t.entry(e.slot)
	st.Add(^uint64(stateConnsOne - 1))
}

// refund takes back the rate e spent (its connection was refused by a later policy), if the
// entry is still fp's.
func (t *clientTable) refund(e *held, fp uint64, interval int64) {
	fpw, st := t.entry(e.slot)
	for {
		s := st.Load()
		if s&stateBusy != 0 || fpw.Load() != fp {
			return
		}
		n := s&^stateTATMask | (s-uint64(interval))&stateTATMask
		if st.CompareAndSwap(s, n) {
			return
		}
	}
}
