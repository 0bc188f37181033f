package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// messages returns the "msg" of every JSON line in b.
func messages(t *testing.T, b []byte) []string {
	t.Helper()
	var msgs []string
	for line := range strings.Lines(string(b)) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		msgs = append(msgs, rec["msg"].(string))
	}
	return msgs
}

// Access lines wait in the batch; any other line is written at once, after
// the access lines logged before it; Close writes what is left. (The batch's
// own flushes, an hour apart here, never write: the buffer has one writer.)
func TestProcessLogsKeepOrder(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	logs := newProcessLogs(&w, slog.LevelInfo, time.Hour)
	logs.access.Info("request 1")
	logs.access.Info("request 2")
	if got := messages(t, w.Bytes()); len(got) != 0 {
		t.Fatalf("access lines written before a flush: %q", got)
	}
	logs.log.Warn("something else")
	logs.access.Info("request 3")
	logs.log.Debug("below the level")
	want := []string{"request 1", "request 2", "something else"}
	if got := messages(t, w.Bytes()); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("after a line at once: %q, want %q", got, want)
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	want = append(want, "request 3")
	if got := messages(t, w.Bytes()); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("after Close: %q, want %q", got, want)
	}
}

// A batched access line reaches the stream by itself, at the next flush,
// with nothing else logged after it (the test's deadline fails a batch that
// is never written).
func TestProcessLogsFlushBatches(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	logs := newProcessLogs(w, slog.LevelInfo, 10*time.Millisecond)
	t.Cleanup(func() {
		r.Close() // a flush blocked on the pipe returns
		_ = logs.Close()
	})
	logs.access.Info("request")
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	if got := messages(t, line); len(got) != 1 || got[0] != "request" {
		t.Fatalf("flushed %q", got)
	}
}
