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
	n     atomic.Int64
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
