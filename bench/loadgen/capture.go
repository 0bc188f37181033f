package loadgen

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statement is one SQL statement the server sent to Postgres, with its
// arguments and the command tag it completed with; Batch holds the statements
// of one pgx batch instead.
type Statement struct {
	SQL   string
	Args  []any
	Tag   pgconn.CommandTag
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

// TraceQueryEnd records the command tag of the statement TraceQueryStart
// recorded.
func (r *Recorder) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on && r.batch[conn] == nil && len(r.stmts) > 0 {
		r.stmts[len(r.stmts)-1].Tag = d.CommandTag
	}
}

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
		b.Batch = append(b.Batch, Statement{SQL: d.SQL, Args: append([]any(nil), d.Args...), Tag: d.CommandTag})
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

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// replayer runs a captured statement list on one pooled connection, the way
// the server ran it (transactions included: BEGIN and COMMIT are statements
// too). With fresh set, every UUID in a string argument that is not a fixture
// id (new rows' ids, the idempotency key and the name of its lock, the request
// id) is replaced by a new UUID of its version for each run, consistently
// within the run, so that inserts do not collide and locks are not shared. A
// run fails when a statement reads or writes another number of rows than it
// did for the server (sameRows): a replay that skipped the server's writes,
// or read nothing, would measure less than its work.
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
			br := conn.SendBatch(ctx, b)
			var err error
			for _, q := range st.Batch {
				var tag pgconn.CommandTag
				if tag, err = br.Exec(); err == nil {
					err = sameRows(q, tag)
				}
				if err != nil {
					break
				}
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
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
			if err = rows.Err(); err == nil {
				err = sameRows(st, rows.CommandTag())
			}
		}
		if err != nil {
			return p.fail(ctx, conn, inTx, fmt.Errorf("%.60s: %w", st.SQL, err))
		}
	}
	return nil
}

// sameRows returns an error when st's replay completed with another command
// tag (tag) than the server's statement did: another number of rows read or
// written, or a ROLLBACK for a COMMIT. The fixtures do not change while a
// scenario's contenders take turns, so a replay that does the server's work
// gets the server's counts.
func sameRows(st Statement, tag pgconn.CommandTag) error {
	if tag.String() != st.Tag.String() {
		return fmt.Errorf("replay: %.60s: %q, the server's %q", oneLine(st.SQL), tag, st.Tag)
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
	return uuidRE.ReplaceAllStringFunc(s, func(id string) string {
		if p.known[id] {
			return id
		}
		if n, ok := remap[id]; ok {
			return n
		}
		// Of the same version: a time-ordered id (7) lands on the rightmost
		// page of its index, a random one (4) anywhere, and that costs
		// Postgres differently.
		n := uuid.NewString()
		if id[14] == '7' {
			n = uuid.Must(uuid.NewV7()).String()
		}
		remap[id] = n
		return n
	})
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
		out = append(out, oneLine(st.SQL))
	}
	return out
}

// oneLine returns sql on one line, its runs of white space made one space.
func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }
