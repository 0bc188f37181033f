package idempotency

import "sync"

// recentKeysPerGeneration bounds what recentKeys remembers: two generations of
// at most this many keys (about a megabyte).
const recentKeysPerGeneration = 4096

// recentKeys remembers, on one instance, keys that have a record: the keys of
// calls it ran or replayed lately. A call with such a key is most likely a
// repeat, and is claimed in a round trip of its own before the resolver is
// called (Middleware.runClaimed): claimed ahead, a repeat would run its
// resolver's first statement and roll it back, which costs a storm of retries
// of one key a fifth of its throughput. It is a hint, never a source of truth:
// a key it forgot, or that another instance ran, is claimed ahead, which is as
// correct and costs a repeat that first statement once.
type recentKeys struct {
	mu        sync.Mutex
	cur, prev map[string]struct{}
}

func newRecentKeys() *recentKeys {
	return &recentKeys{cur: map[string]struct{}{}}
}

// add remembers the user's key; the older generation is forgotten when the
// newer one is full.
func (r *recentKeys) add(userID, key string) {
	k := userID + "\x00" + key
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[k]; ok {
		return
	}
	if len(r.cur) >= recentKeysPerGeneration {
		r.prev, r.cur = r.cur, make(map[string]struct{}, recentKeysPerGeneration)
	}
	r.cur[k] = struct{}{}
}

// has reports whether the user's key is remembered.
func (r *recentKeys) has(userID, key string) bool {
	k := userID + "\x00" + key
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[k]; ok {
		return true
	}
	_, ok := r.prev[k]
	return ok
}
