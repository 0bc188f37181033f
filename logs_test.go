package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the batch's flushing goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// messages returns the "msg" of every line written so far.
func (b *lockedBuffer) messages(t *testing.T) []string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(b.b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		msgs = append(msgs, rec["msg"].(string))
	}
	return msgs
}

// Access lines wait in the batch; any other line is written at once, after
// the access lines logged before it; Close writes what is left.
func TestProcessLogsKeepOrder(t *testing.T) {
	t.Parallel()
	var w lockedBuffer
	logs := newProcessLogs(&w, slog.LevelInfo, time.Hour)
	logs.access.Info("request 1")
	logs.access.Info("request 2")
	if got := w.messages(t); len(got) != 0 {
		t.Fatalf("access lines written before a flush: %q", got)
	}
	logs.log.Warn("something else")
	logs.access.Info("request 3")
	logs.log.Debug("below the level")
	want := []string{"request 1", "request 2", "something else"}
	if got := w.messages(t); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("after a line at once: %q, want %q", got, want)
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	want = append(want, "request 3")
	if got := w.messages(t); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("after Close: %q, want %q", got, want)
	}
}

// A batched access line reaches the stream by itself, within the flush
// interval, with nothing else logged after it.
func TestProcessLogsFlushBatches(t *testing.T) {
	t.Parallel()
	var w lockedBuffer
	logs := newProcessLogs(&w, slog.LevelInfo, 10*time.Millisecond)
	t.Cleanup(func() { _ = logs.Close() })
	logs.access.Info("request")
	for len(w.messages(t)) == 0 {
		time.Sleep(5 * time.Millisecond) // the test's deadline fails a batch never written
	}
	if got := w.messages(t); len(got) != 1 || got[0] != "request" {
		t.Fatalf("flushed %q", got)
	}
}
