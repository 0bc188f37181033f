package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/store"
)

// rawWork is the least SQL a scenario's work needs, written by hand as
// pgbench would run it (not a replay of TaskFlow's own statements): the same
// rows and columns the API answer holds, in one round trip, no
// authentication, no limits.
type rawWork struct {
	// SQL is the statements, as the report lists them.
	SQL []string
	// run does request i of worker w and checks the answer has the rows asked for.
	run func(ctx context.Context, pool *pgxpool.Pool, f *Fixtures, w, i int) error
}

// errNoRows is a read that found nothing: the fixtures are not what the
// scenario expects.
var errNoRows = errors.New("no rows")

// rawQuery is a rawWork of one query with args(f, w, i), whose rows it reads
// and counts (at least one).
func rawQuery(sql string, args func(f *Fixtures, w, i int) []any) rawWork {
	return rawWork{SQL: []string{sql}, run: func(ctx context.Context, pool *pgxpool.Pool, f *Fixtures, w, i int) error {
		rows, err := pool.Query(ctx, sql, args(f, w, i)...)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				rows.Close()
				return err
			}
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return errNoRows
		}
		return nil
	}}
}

var (
	// rawTask is task(id) { id title status priority dueDate assignee { id name } }.
	rawTask = rawQuery(`SELECT t.id, t.title, t.status, t.priority, t.due_date, u.id, u.name
		FROM tasks t LEFT JOIN users u ON u.id = t.assignee_id WHERE t.id = $1`,
		func(f *Fixtures, w, i int) []any { return []any{f.task(i)} })

	// rawTaskList is the first 20 tasks of a project, newest first, the order
	// of TaskFlow's tasks connection.
	rawTaskList = rawQuery(`SELECT id, title, status, priority FROM tasks WHERE project_id = $1
		ORDER BY created_at DESC, id DESC LIMIT 20`,
		func(f *Fixtures, w, i int) []any { return []any{f.BoardID} })

	// rawTaskPage is the nested page: 20 tasks (and whether there are more)
	// with their assignee and their first 5 comments with authors, one row
	// per comment.
	rawTaskPage = rawQuery(`SELECT t.id, t.title, t.status, a.id, a.name, c.id, c.body, cu.id, cu.name
		FROM (SELECT * FROM tasks WHERE project_id = $1 ORDER BY created_at DESC, id DESC LIMIT 21) t
		LEFT JOIN users a ON a.id = t.assignee_id
		LEFT JOIN LATERAL (SELECT id, body, author_id, created_at FROM comments WHERE task_id = t.id
			ORDER BY created_at DESC, id DESC LIMIT 5) c ON true
		LEFT JOIN users cu ON cu.id = c.author_id
		ORDER BY t.created_at DESC, t.id DESC, c.created_at DESC, c.id DESC`,
		func(f *Fixtures, w, i int) []any { return []any{f.BoardID} })

	// rawSearchTasks is store.SearchTasks' query without the cursor: 20 best
	// matches (and whether there are more).
	rawSearchTasks = rawQuery(`SELECT t.id, t.title, t.status
		FROM tasks t, websearch_to_tsquery('english', $2) AS q(q)
		WHERE t.workspace_id = $1 AND t.search @@ q.q
		ORDER BY ts_rank(t.search, q.q) DESC, t.created_at DESC, t.id DESC LIMIT 21`,
		func(f *Fixtures, w, i int) []any { return []any{f.WorkspaceID, searchWords[i%len(searchWords)]} })

	// rawAuditEvents is the newest 50 events of a workspace (and whether
	// there are more).
	rawAuditEvents = rawQuery(`SELECT id, action, entity_type, entity_id, occurred_at, actor_id, metadata
		FROM audit_events WHERE workspace_id = $1 ORDER BY occurred_at DESC, id DESC LIMIT 51`,
		func(f *Fixtures, w, i int) []any { return []any{f.WorkspaceID} })

	// rawReplay is a repeat of a keyed call: the stored answer and the
	// fingerprint it is checked against.
	rawReplay = rawQuery(`SELECT fingerprint, result FROM idempotency_keys WHERE user_id = $1 AND key = $2`,
		func(f *Fixtures, w, i int) []any { return []any{f.Users[0].ID, stormKey} })
)

// The three writes of a keyed createTask.
const (
	rawInsertTask = `INSERT INTO tasks (id, project_id, workspace_id, title, created_by)
		VALUES ($1, $2, $3, $4, $5) RETURNING id, title, status`
	// rawInsertAudit's event has no spine position (tx_id and seq NULL, not
	// their defaults): it is hashed here, and TaskFlow's sealer, running in
	// the server binary during every contender's turn, must not seal it, on
	// the machine's CPU and on TaskFlow's meter (bench/README.md, run 47).
	rawInsertAudit = `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type, entity_id,
		occurred_at, ip, user_agent, request_id, metadata, hash, tx_id, seq)
		VALUES ($1, $2, $3, $4, 'task.created', 'task', $5, now(), '127.0.0.1', '` + userAgent + `', $6, $7, $8, NULL, NULL)`
	rawInsertKey = `INSERT INTO idempotency_keys (user_id, key, field, fingerprint, result, expires_at)
		VALUES ($1, $2, 'createTask', $3, $4, now() + interval '1 day')`
)

// rawCreateTask is a keyed createTask: the task, its audit event (the
// snapshot TaskFlow records, hashed here) and the idempotency key with the
// answer, in one pipelined transaction (one round trip). The audit event is
// not chained (no head row to lock): this is the least the work needs, the
// baseline the chain's cost is measured against. spread: in worker w's
// workspace, else in the main one.
func rawCreateTask(spread bool) rawWork {
	return rawWork{SQL: []string{"BEGIN", rawInsertTask, rawInsertAudit, rawInsertKey, "COMMIT"},
		run: func(ctx context.Context, pool *pgxpool.Pool, f *Fixtures, w, i int) error {
			ws, project := f.WorkspaceID, f.InboxID
			if spread {
				ws, project = f.spread(w).WorkspaceID, f.spread(w).InboxID
			}
			u := f.user(i)
			t := store.Task{ID: uuid.NewString(), ProjectID: project, WorkspaceID: ws, Title: taskTitle(i),
				Status: store.TaskStatusTodo, Priority: store.TaskPriorityMedium, CreatedByID: u.ID}
			snapshot, err := json.Marshal(audit.Snapshot(&t))
			if err != nil {
				return err
			}
			hash := sha256.Sum256(snapshot)
			answer, err := json.Marshal(map[string]any{"id": t.ID, "title": t.Title, "status": t.Status})
			if err != nil {
				return err
			}
			fingerprint := sha256.Sum256([]byte(project + "\x00" + t.Title))

			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue(rawInsertTask, t.ID, project, ws, t.Title, u.ID)
			b.Queue(rawInsertAudit, uuid.Must(uuid.NewV7()).String(), ws, ws, u.ID, t.ID, uuid.NewString(), snapshot, hash[:])
			b.Queue(rawInsertKey, u.ID, uuid.NewString(), fingerprint[:], answer)
			b.Queue("COMMIT")
			br := pool.SendBatch(ctx, b)
			var id, title, status string
			_, err = br.Exec()
			if err == nil {
				err = br.QueryRow().Scan(&id, &title, &status)
			}
			for range 3 {
				if err == nil {
					_, err = br.Exec()
				}
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err == nil && (id != t.ID || title != t.Title || status != "TODO") {
				err = fmt.Errorf("created %s %q %s, want %s %q TODO", id, title, status, t.ID, t.Title)
			}
			return err
		}}
}
