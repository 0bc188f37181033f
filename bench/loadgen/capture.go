package loadgen

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statement is one SQL statement the server sent to Postgres, with its
// arguments; Batch holds the statements of one pgx batch instead.
type Statement struct {
	SQL   string
	Args  []any
	Batch []Statement
}

// Recorder is a pgx tracer that records the statements of the server's pool
// while it is on (during one request the harness sends alone). The replay
// contender (Config.Replay) runs exactly these statements.
type Recorder struct {
	mu    sync.Mutex
	on    bool
	stmts []Statement
	batch map[*pgx.Conn]*Statement
}

// Start begins recording.
func (r *Recorder) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.stmts, r.batch = true, nil, map[*pgx.Conn]*Statement{}
}

// Stop ends recording and returns the statements in the order they were sent.
func (r *Recorder) Stop() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.stmts
}

// TraceQueryStart records a statement.
func (r *Recorder) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		if b := r.batch[conn]; b != nil {
			return ctx // the batch's own queries arrive through TraceBatchQuery
		}
		r.stmts = append(r.stmts, Statement{SQL: d.SQL, Args: append([]any(nil), d.Args...)})
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart opens a batch.
func (r *Recorder) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.batch[conn] = &Statement{}
	}
	return ctx
}

// TraceBatchQuery records a statement of a batch.
func (r *Recorder) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.batch[conn]; r.on && b != nil {
		b.Batch = append(b.Batch, Statement{SQL: d.SQL, Args: append([]any(nil), d.Args...)})
	}
}

// TraceBatchEnd closes a batch.
func (r *Recorder) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.batch[conn]; r.on && b != nil {
		r.stmts = append(r.stmts, *b)
		delete(r.batch, conn)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// replayer runs a captured statement list on one pooled connection, the way
// the server ran it (transactions included: BEGIN and COMMIT are statements
// too). With fresh set, every UUID argument that is not a fixture id (new
// rows' ids, the idempotency key, the request id) is replaced by a new UUID for
// each run, consistently within the run, so that inserts do not collide.
type replayer struct {
	stmts []Statement
	known map[string]bool
	fresh bool
}

func (p *replayer) run(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var remap map[string]string
	if p.fresh {
		remap = map[string]string{}
	}
	inTx := false
	for _, st := range p.stmts {
		if st.Batch != nil {
			b := &pgx.Batch{}
			for _, q := range st.Batch {
				b.Queue(q.SQL, p.args(q.Args, remap)...)
				// A unit of work begins in the batch of its first statement.
				inTx = txState(q.SQL, inTx)
			}
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				return p.fail(ctx, conn, inTx, err)
			}
			continue
		}
		inTx = txState(st.SQL, inTx)
		rows, err := conn.Query(ctx, st.SQL, p.args(st.Args, remap)...)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			return p.fail(ctx, conn, inTx, fmt.Errorf("%.60s: %w", st.SQL, err))
		}
	}
	return nil
}

// txState returns whether a connection is in a transaction after sql, when it
// was (inTx) before.
func txState(sql string, inTx bool) bool {
	switch strings.ToLower(strings.TrimSpace(sql)) {
	case "begin", "begin isolation level read committed", "begin read only":
		return true
	case "commit", "rollback":
		return false
	}
	return inTx
}

// fail rolls back an open transaction so that the connection goes back clean.
func (p *replayer) fail(ctx context.Context, conn *pgxpool.Conn, inTx bool, err error) error {
	if inTx {
		_, _ = conn.Exec(ctx, "rollback")
	}
	return err
}

func (p *replayer) args(args []any, remap map[string]string) []any {
	if remap == nil {
		return args
	}
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = p.fresher(v, remap)
		case *string:
			if v != nil {
				s := p.fresher(*v, remap)
				out[i] = &s
			} else {
				out[i] = v
			}
		default:
			out[i] = a
		}
	}
	return out
}

func (p *replayer) fresher(s string, remap map[string]string) string {
	if p.known[s] || !uuidRE.MatchString(s) {
		return s
	}
	if n, ok := remap[s]; ok {
		return n
	}
	n := uuid.NewString()
	remap[s] = n
	return n
}

// describeStatements lists the statements, one line each, for the report; a
// batch's follow it, indented.
func describeStatements(stmts []Statement) []string {
	var out []string
	for _, st := range stmts {
		if st.Batch != nil {
			out = append(out, fmt.Sprintf("batch of %d", len(st.Batch)))
			for _, line := range describeStatements(st.Batch) {
				out = append(out, "  "+line)
			}
			continue
		}
		out = append(out, strings.Join(strings.Fields(st.SQL), " "))
	}
	return out
}
