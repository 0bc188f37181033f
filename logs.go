package main

import (
	"io"
	"log/slog"
	"time"

	"go.uber.org/zap/zapcore"

	"taskflow/httpapi"
)

// accessLogFlush and accessLogBuffer bound the batches of the access log: a
// line reaches stderr at most accessLogFlush after it was logged, and a batch
// is written whenever it reaches accessLogBuffer bytes
// (docs/decisions/2026-12-03-batched-access-log.md).
const (
	accessLogFlush  = 200 * time.Millisecond
	accessLogBuffer = 32 << 10
)

// processLogs are the process's two loggers on one stream: log writes each
// line at once, access (one line a request) in batches. A line of log is
// written after the access lines logged before it, so the stream keeps the
// order in which lines were logged.
type processLogs struct {
	log, access *slog.Logger
	batch       *zapcore.BufferedWriteSyncer
}

// newProcessLogs returns the loggers of the process on w, JSON at level; the
// access lines are written at least every flush. Close writes what is batched.
func newProcessLogs(w io.Writer, level slog.Leveler, flush time.Duration) *processLogs {
	// w's own Sync (fsync on a file, an error on a pipe) is not wanted: Sync
	// here means "write what is batched".
	batch := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(struct{ io.Writer }{w}),
		Size: accessLogBuffer, FlushInterval: flush}
	opts := &slog.HandlerOptions{Level: level}
	return &processLogs{
		log:    slog.New(httpapi.LogHandler(slog.NewJSONHandler(atOnce{batch}, opts))),
		access: slog.New(httpapi.LogHandler(slog.NewJSONHandler(batch, opts))),
		batch:  batch,
	}
}

// Close writes the access lines still batched and stops the batching.
func (l *processLogs) Close() error { return l.batch.Stop() }

// atOnce writes through a batching writer and then writes out its batch, so
// that a line is on the stream when Write returns, after the lines before it.
type atOnce struct{ b *zapcore.BufferedWriteSyncer }

// Write writes p and what was batched before it.
func (w atOnce) Write(p []byte) (int, error) {
	n, err := w.b.Write(p)
	if err != nil {
		return n, err
	}
	return n, w.b.Sync()
}
