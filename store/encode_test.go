package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
)

// argsRecorder records the statements and arguments a pool sends, alone or in
// batches.
type argsRecorder struct {
	mu   sync.Mutex
	sqls []string
	args [][]any
}

func (r *argsRecorder) add(sql string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sqls, r.args = append(r.sqls, sql), append(r.args, args)
}

func (r *argsRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args)
	return ctx
}
func (r *argsRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *argsRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *argsRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL, d.Args)
}
func (r *argsRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Every argument of the units of work of a create, an update and a delete
// (the task, its audit events, the checks) encodes in the format pgx tries first for it: text for a string or
// *string, else the column type's preferred format. An argument that does not
// (an audit event's **string workspace id, for a uuid column) makes pgx build
// an error and encode it again in the other format, on every request.
func TestArgumentsEncodeAtTheFirstTry(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	cfg := f.db.Pool.Config().Copy()
	rec := &argsRecorder{}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := store.New(pool, nil)
	var task *store.Task
	for _, work := range []func(ctx context.Context) error{
		func(ctx context.Context) (err error) {
			task, err = db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "x"})
			return err
		},
		func(ctx context.Context) error {
			_, err := db.UpdateTask(ctx, f.member, task.ID, store.TaskPatch{Title: store.Optional[string]{Set: true, Value: ptr("y")},
				AssigneeID: store.Optional[string]{Set: true, Value: &f.member.ID}})
			return err
		},
		func(ctx context.Context) error { return db.DeleteTask(ctx, f.member, task.ID) },
	} {
		if err := db.UnitOfWork(ctx, work); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	m := conn.Conn().TypeMap()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sqls) < 3 {
		t.Fatalf("recorded %d statements, want the create's", len(rec.sqls))
	}
	for i, sql := range rec.sqls {
		sd, err := conn.Conn().Prepare(ctx, "", sql)
		if err != nil {
			t.Fatalf("prepare %q: %v", sql, err)
		}
		for j, a := range rec.args[i] {
			if j >= len(sd.ParamOIDs) {
				break
			}
			format := m.FormatCodeForOID(sd.ParamOIDs[j])
			switch a.(type) {
			case string, *string: // as pgx's ExtendedQueryBuilder chooses
				format = pgx.TextFormatCode
			}
			if _, err := m.Encode(sd.ParamOIDs[j], format, a, nil); err != nil {
				t.Errorf("$%d (%T) of %.80q: %v", j+1, a, sql, err)
			}
		}
	}
}
