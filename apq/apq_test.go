package apq_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"taskflow/apq"
	"taskflow/ratelimit/ratelimittest"
)

func TestValidHash(t *testing.T) {
	t.Parallel()
	ok := strings.Repeat("0123456789abcdef", 4)
	for h, want := range map[string]bool{
		ok:                            true,
		strings.ToUpper(ok):           false,
		ok[:63]:                       false,
		ok + "0":                      false,
		strings.Repeat("g", 64):       false,
		"":                            false,
		"../" + ok[3:]:                false,
		strings.Repeat("f", 64):       true,
		strings.Repeat("0", 63) + " ": false,
	} {
		if got := apq.ValidHash(h); got != want {
			t.Errorf("ValidHash(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestRedisCache(t *testing.T) {
	t.Parallel()
	rdb := ratelimittest.Redis(t)
	prefix := ratelimittest.Prefix()
	c := apq.NewRedisCache(rdb, prefix, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := strings.Repeat("ab", 32)
	if _, ok := c.Get(t.Context(), h); ok {
		t.Fatal("hit in an empty cache")
	}
	c.Add(t.Context(), h, "{ me { id } }")
	if q, ok := c.Get(t.Context(), h); !ok || q != "{ me { id } }" {
		t.Fatalf("Get = %q %v", q, ok)
	}
	// A hit renews the TTL.
	if err := rdb.Expire(t.Context(), prefix+"apq:"+h, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c.Get(t.Context(), h)
	if ttl := rdb.TTL(t.Context(), prefix+"apq:"+h).Val(); ttl <= time.Minute {
		t.Fatalf("TTL after a hit = %v, want renewed to about an hour", ttl)
	}
	// Keys that are not hashes are neither stored nor looked up.
	c.Add(t.Context(), "x", "{ me { id } }")
	if n := rdb.Exists(t.Context(), prefix+"apq:x").Val(); n != 0 {
		t.Fatal("stored under a key that is not a hash")
	}
	// Another prefix is another cache.
	if _, ok := apq.NewRedisCache(rdb, ratelimittest.Prefix(), 0, nil).Get(t.Context(), h); ok {
		t.Fatal("prefixes share entries")
	}
}

func TestMemoryCacheIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	c := apq.NewMemoryCache(maxBytes)
	text := strings.Repeat("x", 1000)
	var hashes []string
	for i := range 200 { // 200 KB of texts into a cache of 64 KiB
		h := fmt.Sprintf("%064x", i)
		hashes = append(hashes, h)
		c.Add(t.Context(), h, text)
	}
	kept := 0
	for _, h := range hashes {
		if q, ok := c.Get(t.Context(), h); ok {
			if q != text {
				t.Fatalf("Get = %q", q)
			}
			kept++
		}
	}
	if kept*len(text) > maxBytes || kept < 10 {
		t.Fatalf("kept %d texts of %d bytes in a cache of %d bytes", kept, len(text), maxBytes)
	}
}
