package access

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
)

// The client table: per policy and client, the connections open and the rate (a GCRA's
// theoretical arrival time), in a table of fixed capacity, so that a flood from millions of
// addresses costs bounded memory (DefaultClients entries of 48 bytes and their index:
// under 16 MiB when full). It is sharded by the key's hash; each shard has a mutex, at most
// capacity/numShards entries in chunks made as clients come, and an index into them (open
// addressing with linear probing, at most half full).
//
// A full shard makes room with CLOCK (second chance): the hand passes over the entries,
// skipping every one with connections open (never evicted: its count must come back on
// Release, which finds it by its slot) and clearing the mark of recently used ones; the
// first entry that is unmarked, or that carries no information (no connection open, its
// rate fully refilled), goes. What an eviction loses is at most a client's partly spent
// rate: it starts again with a full bucket, as a client does after a quiet minute. So the
// per-client connection cap is exact as long as fewer clients hold connections than a shard
// holds entries (a process's file descriptors are far fewer).
//
// Why by hand: rate limiters (golang.org/x/time/rate) are one object per client, and an
// unbounded map of them is what a flood fills; HAProxy's stick tables are the model here
// (fixed size, eviction of the least recently used). A Go map keyed by the 24-byte key
// was measured at twice the cost of this index (its generic key comparison), and the
// check must stay under 100 ns per connection (BenchmarkAdmit).

const (
	shardBits = 6
	numShards = 1 << shardBits
)

// clientKey names one client of one policy's counters: the state's id, and the client's
// address in 16 bytes (IPv4 in its IPv4-mapped form), an IPv6 one cut to the policy's
// prefix length.
type clientKey struct {
	id     uint64
	hi, lo uint64
}

func clientKeyOf(id uint64, a netip.Addr, v6bits int) clientKey {
	b := a.As16()
	k := clientKey{id: id, hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
	if a.Is6() && v6bits < 128 {
		if v6bits <= 64 {
			k.hi &= ^uint64(0) << (64 - v6bits)
			k.lo = 0
		} else {
			k.lo &= ^uint64(0) << (128 - v6bits)
		}
	}
	return k
}

// hash mixes the key (multiplicative: the address's low bits are the ones that vary
// between clients). The top shardBits pick the shard, the low bits the index position.
func (k clientKey) hash() uint64 {
	h := (k.lo ^ k.hi*0x9e3779b97f4a7c15 ^ k.id*0xff51afd7ed558ccd) * 0xc4ceb9fe1a85ec53
	return h ^ h>>29
}

type entry struct {
	key clientKey
	tat int64 // the GCRA's theoretical arrival time (ns since the Limiter's epoch)
	// conns is the connections open: taken under the shard's lock, given back without it
	// (Release), so it is atomic.
	conns atomic.Int32
	hash  uint32 // the key's hash's low bits (the index position it wants)
	ref   bool   // used since the clock hand last passed
}

// chunkBits sizes the chunks the entries live in: an entry never moves once placed, so a
// Release finds it by its slot without the shard's lock.
const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
)

type shard struct {
	mu sync.Mutex
	// index holds slot+1 of each entry at its hash's position or after (0: empty).
	index  []int32
	chunks []*[chunkSize]entry // made as the shard fills; never moved or freed
	n      int32               // slots in use: 0..n-1
	cap    int32
	hand   int32
	_      [64]byte // keeps the shards' locks off each other's cache lines
}

// at is slot i's entry.
func (s *shard) at(i int32) *entry { return &s.chunks[i>>chunkBits][i&(chunkSize-1)] }

type clientTable struct {
	shards    [numShards]shard
	evictions atomic.Uint64
}

func (t *clientTable) init(capacity int) {
	per := max(int32((capacity+numShards-1)/numShards), 1)
	for i := range t.shards {
		t.shards[i].cap = per
		t.shards[i].chunks = make([]*[chunkSize]entry, (per+chunkSize-1)/chunkSize)
	}
}

func (t *clientTable) capacity() int { return int(t.shards[0].cap) * numShards }

func (t *clientTable) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += int(s.n)
		s.mu.Unlock()
	}
	return n
}

// admit counts a connection of client key: at most maxConns open (0: no cap), and one
// every interval nanoseconds with tolerance to spare (interval 0: no rate), at now. On
// Admitted it notes in e the slot and what it counted.
func (t *clientTable) admit(e *held, key clientKey, maxConns int32, interval, tolerance, now int64) Verdict {
	h := key.hash()
	si := uint16(h >> (64 - shardBits))
	s := &t.shards[si]
	s.mu.Lock()
	i := s.find(key, uint32(h))
	if i < 0 {
		if i = s.insert(key, uint32(h), now, &t.evictions); i < 0 {
			// Every entry of the shard has connections open: more clients hold
			// connections than the table was sized for. Fail closed.
			s.mu.Unlock()
			return ClientLimit
		}
	}
	en := s.at(i)
	en.ref = true
	if maxConns > 0 && en.conns.Load() >= maxConns {
		s.mu.Unlock()
		return ClientLimit
	}
	if interval > 0 {
		tat := max(en.tat, now)
		if tat-now > tolerance {
			s.mu.Unlock()
			return RateLimited
		}
		en.tat = tat + interval
		e.flags |= heldRate
	}
	if maxConns > 0 {
		en.conns.Add(1)
		e.flags |= heldClient
	}
	s.mu.Unlock()
	e.slot, e.shard = i, si
	return Admitted
}

// find returns key's slot, or -1 (s.mu held).
func (s *shard) find(key clientKey, h uint32) int32 {
	if len(s.index) == 0 {
		return -1
	}
	mask := uint32(len(s.index) - 1)
	for pos := h & mask; ; pos = (pos + 1) & mask {
		v := s.index[pos]
		if v == 0 {
			return -1
		}
		if s.at(v-1).key == key {
			return v - 1
		}
	}
}

// insert gives key a slot (s.mu held): a new one while the shard has room, else the one
// the clock hand evicts; -1 when every entry has connections open.
func (s *shard) insert(key clientKey, h uint32, now int64, evictions *atomic.Uint64) int32 {
	if n := s.n; n < s.cap {
		if 2*(int(n)+1) > len(s.index) {
			s.grow()
		}
		if s.chunks[n>>chunkBits] == nil {
			s.chunks[n>>chunkBits] = new([chunkSize]entry)
		}
		s.n++
		en := s.at(n)
		en.key, en.hash = key, h
		s.put(n)
		return n
	}
	n := s.n
	for range 2 * n {
		i := s.hand
		if s.hand++; s.hand == n {
			s.hand = 0
		}
		en := s.at(i)
		if en.conns.Load() > 0 {
			continue
		}
		if en.ref && en.tat > now {
			en.ref = false // a second chance: it was used since the hand last came by
			continue
		}
		s.remove(i)
		en.key, en.hash, en.tat, en.ref = key, h, 0, false
		s.put(i)
		evictions.Add(1)
		return i
	}
	return -1
}

// grow doubles the index (at least 64 positions) and puts every entry in it again: the
// index stays at most half full, so that a miss ends within a few positions.
func (s *shard) grow() {
	s.index = make([]int32, max(64, 2*len(s.index)))
	for i := range s.n {
		s.put(i)
	}
}

// put indexes slot i at the first free position from its hash's.
func (s *shard) put(i int32) {
	mask := uint32(len(s.index) - 1)
	pos := s.at(i).hash & mask
	for s.index[pos] != 0 {
		pos = (pos + 1) & mask
	}
	s.index[pos] = i + 1
}

// remove takes slot i out of the index, shifting back the entries after it that would
// otherwise be cut off from their position (deletion without tombstones).
func (s *shard) remove(i int32) {
	mask := uint32(len(s.index) - 1)
	pos := s.at(i).hash & mask
	for s.index[pos] != i+1 {
		pos = (pos + 1) & mask
	}
	for {
		s.index[pos] = 0
		next := pos
		for {
			next = (next + 1) & mask
			v := s.index[next]
			if v == 0 {
				return
			}
			want := s.at(v-1).hash & mask
			// The entry at next may fill the hole at pos unless its wanted position lies
			// cyclically in (pos, next].
			if (next > pos && (want <= pos || want > next)) || (next < pos && want <= pos && want > next) {
				s.index[pos] = v
				pos = next
				break
			}
		}
	}
}

// release takes back the connection e counted: without the shard's lock, since an entry
// with connections open neither moves nor is evicted.
func (t *clientTable) release(e *held) {
	t.shards[e.shard].at(e.slot).conns.Add(-1)
}

// refund takes back the rate e spent (its connection was refused by a later policy).
func (t *clientTable) refund(e *held, interval int64) {
	s := &t.shards[e.shard]
	s.mu.Lock()
	s.at(e.slot).tat -= interval
	s.mu.Unlock()
}
