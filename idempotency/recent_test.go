package idempotency

import (
	"strconv"
	"testing"
)

// recentKeys keeps the newest keys and forgets a generation at a time, so its
// memory is bounded whatever the traffic.
func TestRecentKeysForgetOldGenerations(t *testing.T) {
	t.Parallel()
	r := newRecentKeys()
	r.add("u1", "first")
	if !r.has("u1", "first") || r.has("u2", "first") || r.has("u1", "other") {
		t.Fatal("a key is remembered for its user only")
	}
	for i := range recentKeysPerGeneration {
		r.add("u1", strconv.Itoa(i))
	}
	if !r.has("u1", "first") {
		t.Fatal("forgot a key one generation old")
	}
	for i := range recentKeysPerGeneration {
		r.add("u1", "again-"+strconv.Itoa(i))
	}
	if r.has("u1", "first") {
		t.Fatal("still remembers a key two generations old")
	}
	if n := len(r.cur) + len(r.prev); n > 2*recentKeysPerGeneration {
		t.Fatalf("%d keys held", n)
	}
}
