package storetest

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Statements is a pgx QueryTracer (pgxpool.Config.ConnConfig.Tracer) that
// counts the statements started on a pool: those whose SQL Match accepts, or
// all of them when Match is nil.
type Statements struct {
	// Match selects the statements counted; nil counts every one.
	Match func(sql string) bool
	// Batches counts the statements sent in batches too (pgx traces them
	// apart, as their results are read).
	Batches bool
	n       atomic.Int64
}

// TraceQueryStart counts the statement when Match accepts it.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if s.Match == nil || s.Match(d.SQL) {
		s.n.Add(1)
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (*Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Count returns the number of statements counted so far.
func (s *Statements) Count() int64 { return s.n.Load() }

// TraceBatchStart does nothing: a batch's statements are counted one by one.
func (*Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery counts a statement of a batch when Batches is set and
// Match accepts it.
func (s *Statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if s.Batches && (s.Match == nil || s.Match(d.SQL)) {
		s.n.Add(1)
	}
}

// TraceBatchEnd does nothing.
func (*Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
