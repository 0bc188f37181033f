package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// taskFixture is a workspace with a MEMBER and a project, made with SQL.
type taskFixture struct {
	db        *store.DB
	member    *store.User
	workspace string
	project   string
}

func newTaskFixture(t *testing.T) *taskFixture {
	t.Helper()
	f := &taskFixture{db: storetest.DB(t)}
	seedTaskFixture(t, f)
	return f
}

// Concurrent updates of one task are serialised by the row lock: in the
// chain's order (not (occurredAt, id), docs/api.md "Order"), every
// task.updated event's "from" is the previous event's "to", so no change is
// lost from the log. Without checkParent's ordering lock, transaction ids,
// and so chain positions, could follow another order than the row lock's
// (5 runs in 40 failed).
func TestConcurrentTaskUpdatesChainTheirDiffs(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	task, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "v0"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			title := fmt.Sprintf("v%d", i+1)
			_, err := f.db.UpdateTask(context.Background(), f.member, task.ID, store.TaskPatch{Title: store.Some(&title)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	storetest.Seal(t, f.db)
	rows, err := f.db.Pool.Query(ctx, `SELECT e.metadata->'changes'->'title'->>'from', e.metadata->'changes'->'title'->>'to'
		FROM audit_events e JOIN audit_seals s ON s.event_id = e.id WHERE e.action = 'task.updated' ORDER BY s.position`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	prev, n := "v0", 0
	for rows.Next() {
		var from, to string
		if err := rows.Scan(&from, &to); err != nil {
			t.Fatal(err)
		}
		if from != prev {
			t.Fatalf("event %d: from %q, want %q", n, from, prev)
		}
		prev = to
		n++
	}
	if n != 8 {
		t.Fatalf("%d task.updated events, want 8", n)
	}
	var title string
	if err := f.db.Pool.QueryRow(ctx, `SELECT title FROM tasks WHERE id = $1`, task.ID).Scan(&title); err != nil || title != prev {
		t.Fatalf("title = %q (%v), last event says %q", title, err, prev)
	}
}

// One TaskPages call answers keys with different projects, filters, sizes and
// cursors, each as if it were asked alone.
func TestTaskPagesMixedKeys(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	var otherProject string
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'Q') RETURNING id`,
		f.workspace).Scan(&otherProject); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		status := store.TaskStatusTodo
		if i%2 == 1 {
			status = store.TaskStatusDone
		}
		for _, p := range []string{f.project, otherProject} {
			if _, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: p, Title: fmt.Sprintf("t%d", i), Status: &status}); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := store.TaskStatusDone
	two, three := 2, 3
	k1, _ := store.NewTaskPageKey(f.project, nil, &three, nil)
	k2, _ := store.NewTaskPageKey(otherProject, &done, &two, nil)
	alone, err := f.db.TaskPages(ctx, []store.TaskPageKey{k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	k3, err := store.NewTaskPageKey(f.project, nil, &two, alone[0].PageInfo.EndCursor())
	if err != nil {
		t.Fatal(err)
	}
	k4, err := store.NewTaskPageKey(otherProject, &done, &two, alone[1].PageInfo.EndCursor())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.NewTaskPageKey(f.project, &done, &two, alone[1].PageInfo.EndCursor()); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Fatalf("cursor of another project accepted: %v", err)
	}
	mixed, err := f.db.TaskPages(ctx, []store.TaskPageKey{k3, k1, k4, k2})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []store.TaskPageKey{k3, k1, k4, k2} {
		single, err := f.db.TaskPages(ctx, []store.TaskPageKey{k})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids(single[0])) != fmt.Sprint(ids(mixed[i])) || single[0].PageInfo.HasNextPage != mixed[i].PageInfo.HasNextPage {
			t.Fatalf("key %d: mixed %v, alone %v", i, ids(mixed[i]), ids(single[0]))
		}
		for _, e := range mixed[i].Edges {
			if e.Node.ProjectID != k.ProjectID || (k.Status != "" && e.Node.Status != k.Status) {
				t.Fatalf("key %d: task %+v does not belong", i, e.Node)
			}
		}
	}
	if len(mixed[0].Edges) != 2 || len(mixed[1].Edges) != 3 || len(mixed[2].Edges) != 2 || len(mixed[3].Edges) != 2 {
		t.Fatalf("page sizes %d %d %d %d", len(mixed[0].Edges), len(mixed[1].Edges), len(mixed[2].Edges), len(mixed[3].Edges))
	}
	// k2 and k4 are consecutive pages of DONE tasks of the other project.
	if ids(mixed[3])[1] == ids(mixed[2])[0] {
		t.Fatal("consecutive pages overlap")
	}
}

func ids(c *store.TaskConnection) []string {
	out := make([]string, len(c.Edges))
	for i, e := range c.Edges {
		out[i] = e.Node.ID
	}
	return out
}

// Every exported field of Task and Comment has an audit rule, so snapshots and
// diffs of them never panic or leak an unclassified field.
func TestTaskAndCommentAuditRules(t *testing.T) {
	t.Parallel()
	for _, v := range []any{store.Task{}, store.Comment{}} {
		if err := audit.Check(v); err != nil {
			t.Error(err)
		}
	}
}

// ProjectWithTaskPage answers what ProjectsByIDs and TaskPages answer apart:
// the project and its page for a member, nothing (and no page) for anybody
// else or a malformed id, and TaskPages' error for a bad cursor.
func TestProjectWithTaskPage(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	var ids []string
	for i := range 3 {
		task, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: fmt.Sprintf("t%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]string{task.ID}, ids...) // newest first
	}
	two := 2
	key, err := store.NewTaskPageKey(f.project, nil, &two, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, page, _, err := f.db.ProjectWithTaskPage(ctx, f.member.ID, key, store.TaskPageAlso{})
	if err != nil || p == nil || p.ID != f.project || page == nil {
		t.Fatalf("member: %v %v %v", p, page, err)
	}
	want, err := f.db.TaskPages(ctx, []store.TaskPageKey{key})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Edges) != 2 || page.Edges[0].Node.ID != ids[0] || page.Edges[1].Node.ID != ids[1] ||
		!page.PageInfo.HasNextPage || *page.PageInfo.EndCursor() != *want[0].PageInfo.EndCursor() {
		t.Fatalf("page: %+v, TaskPages gives %+v", page, want[0])
	}

	var stranger string
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('s@example.com', 'S', 'x')
		RETURNING id`).Scan(&stranger); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ viewer, id string }{
		{stranger, f.project},
		{f.member.ID, "00000000-0000-0000-0000-000000000000"},
		{f.member.ID, "not-an-id"},
	} {
		k := key
		k.ProjectID = c.id
		p, page, _, err := f.db.ProjectWithTaskPage(ctx, c.viewer, k, store.TaskPageAlso{})
		if err != nil || p != nil || page != nil {
			t.Errorf("viewer %s, project %s: %v %v %v, want nothing", c.viewer, c.id, p, page, err)
		}
	}

	bad := key
	bad.After = "not-a-cursor"
	if _, _, _, err := f.db.ProjectWithTaskPage(ctx, f.member.ID, bad, store.TaskPageAlso{}); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("bad cursor: %v, want BAD_USER_INPUT", err)
	}
}

// The snapshot Postgres makes of a deleted task, comment, attachment or
// webhook endpoint (the event of its delete, in one round trip) is
// audit.Snapshot's of it, for tasks with and without each optional field, texts that JSON
// escapes, and due dates whose fraction has trailing zeros or none; the
// events are sealed and their chain verifies.
func TestSnapshotsInSQLAreGos(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	desc := "line\n\"quoted\" <b>&</b> é \u2028 ✓"
	assignee := f.member.ID
	var tasks []*store.Task
	for i, due := range []*time.Time{nil,
		ptr(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)),
		ptr(time.Date(2026, 12, 2, 10, 0, 10, 0, time.UTC)),
		ptr(time.Date(2027, 1, 31, 23, 59, 59, 100000000, time.FixedZone("x", -5*3600))),
		ptr(time.Date(2026, 6, 1, 0, 0, 0, 123456000, time.FixedZone("y", 9*3600))),
		ptr(time.Date(2026, 6, 1, 0, 0, 0, 1000, time.UTC)),
		ptr(time.Date(2026, 6, 1, 0, 0, 0, 120000000, time.UTC)),
	} {
		in := store.NewTask{ProjectID: f.project, Title: fmt.Sprintf("task %d \\ \"x\"", i), DueDate: due}
		if i%2 == 1 {
			in.Description, in.AssigneeID = &desc, &assignee
			in.Status, in.Priority = ptr(store.TaskStatusInProgress), ptr(store.TaskPriorityHigh)
		}
		task, err := f.db.CreateTask(ctx, f.member, in)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	// Comments, on a task of their own (a task's delete deletes its comments).
	on, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "comments"})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"plain", desc, "tab\there \\ \"q\""} {
		c, err := f.db.AddComment(ctx, f.member, on.ID, body)
		if err != nil {
			t.Fatal(err)
		}
		assertDeletedAsSnapshot(t, f.db, store.CommentSnapshotSQL, "comments", c, "comment.deleted",
			func() error { return f.db.DeleteComment(ctx, f.member, c.ID) })
	}
	for i, name := range []string{"a.txt", "résumé \"final\".pdf"} {
		a := insertAttachment(t, f.db.Pool, on, f.member.ID, name, int64(i)<<40)
		assertDeletedAsSnapshot(t, f.db, store.AttachmentSnapshotSQL, "attachments", a, "attachment.deleted",
			func() error { return f.db.DeleteAttachment(ctx, f.member, a.ID) })
	}
	hooks := newHookFixture(t) // an OWNER, who may add endpoints
	for i, actions := range [][]string{nil, {"task.*", "comment.created"}} {
		in := store.WebhookEndpointInput{WorkspaceID: hooks.workspace, URL: hookURL, Actions: actions}
		if i == 1 {
			in.Description = &desc
		}
		ep, err := hooks.db.CreateWebhookEndpoint(ctx, hooks.owner, in)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := hooks.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'x'
				WHERE id = $1`, ep.Endpoint.ID); err != nil {
				t.Fatal(err)
			}
		}
		read, err := hooks.db.WebhookEndpoint(ctx, hooks.owner, ep.Endpoint.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertDeletedAsSnapshot(t, hooks.db, store.WebhookSnapshotSQL, "webhook_endpoints", read, "webhook.deleted",
			func() error { return hooks.db.DeleteWebhookEndpoint(ctx, hooks.owner, read.ID) })
	}
	for _, task := range tasks {
		read, err := f.db.Task(ctx, f.member, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertDeletedAsSnapshot(t, f.db, store.TaskSnapshotSQL, "tasks", read, "task.deleted",
			func() error { return f.db.DeleteTask(ctx, f.member, task.ID) })
	}
	storetest.Seal(t, f.db)
	if v, err := f.db.VerifyChain(ctx, f.workspace); err != nil || !v.Valid || v.UnsealedEvents != 0 || v.SealedEvents != 2*len(tasks)+1+2*3+2 {
		t.Fatalf("verification: %+v %v", v, err)
	}
}

// The deletes of a task, a comment, an attachment and a webhook endpoint are
// one round trip each: BEGIN, the check that locks the row, the delete with
// its event, COMMIT. A refused one (a viewer's; another member's delete of a
// comment or an attachment; a member's of an endpoint) is refused by its check,
// in its first round trip (then rolled back), and deletes nothing.
func TestDeletesAreOneRoundTrip(t *testing.T) {
	t.Parallel()
	f := newRoundTripFixture(t)
	db, pool, rec, ctx := f.db, f.pool, f.rec, t.Context()
	member, other, viewer, admin := f.member, f.other, f.viewer, f.admin
	task, comment, ws := f.task, f.comment, f.ws
	att := insertAttachment(t, pool, task, member.ID, "f.txt", 1)
	ep, err := db.CreateWebhookEndpoint(ctx, admin, store.WebhookEndpointInput{WorkspaceID: ws, URL: hookURL})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		table   string
		del     func(actor *store.User) error
		refused []*store.User // other: not its author or uploader; member: not an ADMIN
		by      *store.User
		action  string
	}{
		{"attachments", func(a *store.User) error { return db.DeleteAttachment(ctx, a, att.ID) }, []*store.User{viewer, other}, member, "attachment.deleted"},
		{"comments", func(a *store.User) error { return db.DeleteComment(ctx, a, comment.ID) }, []*store.User{viewer, other}, member, "comment.deleted"},
		{"tasks", func(a *store.User) error { return db.DeleteTask(ctx, a, task.ID) }, []*store.User{viewer}, member, "task.deleted"},
		{"webhook_endpoints", func(a *store.User) error { return db.DeleteWebhookEndpoint(ctx, a, ep.Endpoint.ID) },
			[]*store.User{viewer, member}, admin, "webhook.deleted"},
	} {
		rec.take()
		assertRefusedByCheck(t, rec, c.table, orderedCheck, c.refused, c.del)
		if err := c.del(c.by); err != nil {
			t.Fatal(err)
		}
		trips := rec.take()
		if len(trips) != 1 || !strings.HasPrefix(trips[0], orderedCheck) ||
			!strings.Contains(trips[0], "delete from "+c.table) || !strings.HasSuffix(trips[0], "; commit") {
			t.Fatalf("%s: round trips %q: want one, BEGIN, the check, the delete with its event and COMMIT", c.table, trips)
		}
		var rows, events int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+c.table+`), (SELECT count(*) FROM audit_events WHERE action = $1)`,
			c.action).Scan(&rows, &events); err != nil || rows != 0 || events != 1 {
			t.Fatalf("%s: %d rows and %d events after the delete (%v), want 0 and 1", c.table, rows, events, err)
		}
	}
}

// assertDeletedAsSnapshot checks that snapshot (an SQL expression over a row
// of table as d) of the row of v is audit.Snapshot(v), then deletes it with
// del and checks that its event (action) holds that snapshot.
func assertDeletedAsSnapshot(t *testing.T, db *store.DB, snapshot, table string, v any, action string, del func() error) {
	t.Helper()
	ctx := t.Context()
	want, err := audit.NormalizeMetadata(audit.Snapshot(v))
	if err != nil {
		t.Fatal(err)
	}
	id := want["id"]
	var text []byte
	if err := db.Pool.QueryRow(ctx, `SELECT (`+snapshot+`)::text FROM `+table+` d WHERE d.id = $1`, id).Scan(&text); err != nil {
		t.Fatal(err)
	}
	// DeepEqual, not %#v: a json.Number and a string print alike.
	if got, err := audit.DecodeMetadata(text); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("%s %s:\n SQL %s (%v)\n  Go %#v", table, id, text, err, want)
	}
	if err := del(); err != nil {
		t.Fatal(err)
	}
	var stored []byte
	if err := db.Pool.QueryRow(ctx, `SELECT metadata::text FROM audit_events WHERE action = $1 AND entity_id = $2`,
		action, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if m, err := audit.DecodeMetadata(stored); err != nil || !reflect.DeepEqual(m, want) {
		t.Errorf("%s of %s: %s (%v), want %#v", action, id, stored, err, want)
	}
}

// insertAttachment adds an attachment of task uploaded by uploader, and its
// blob, as rows only (no bytes: nothing here reads them).
func insertAttachment(t *testing.T, pool *pgxpool.Pool, task *store.Task, uploader, name string, size int64) *store.Attachment {
	t.Helper()
	sum := fmt.Sprintf("%064x", rand.Uint64())
	a := &store.Attachment{TaskID: task.ID, WorkspaceID: task.WorkspaceID, Filename: name, ContentType: "text/plain",
		Size: size, SHA256: sum, UploaderID: uploader}
	if _, err := pool.Exec(t.Context(), `INSERT INTO attachment_blobs (workspace_id, sha256, key, size, content_type)
		VALUES ($1, $2, $2, $3, 'text/plain')`, a.WorkspaceID, sum, size); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(t.Context(), `INSERT INTO attachments (task_id, workspace_id, sha256, filename, content_type, size, uploader_id)
		VALUES ($1, $2, $3, $4, 'text/plain', $5, $6) RETURNING id, created_at`, a.TaskID, a.WorkspaceID, sum, name, size, uploader).
		Scan(&a.ID, &a.CreatedAt); err != nil {
		t.Fatal(err)
	}
	return a
}

// Pages and searches (taskScanner, which writes a row's ids and title into
// one string and reads the status and priority as known values) read every
// task as Task (pgx's own scan) reads it: ids, a NULL and a set assignee, a
// status and a priority other than the defaults, and the other columns.
func TestPagedTasksAreReadAsOneTaskIs(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	desc, due := "words", time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)
	done, urgent := store.TaskStatusDone, store.TaskPriorityUrgent
	// The oracle is the task CreateTask built in Go, not one read back: every
	// read below goes through taskScanner.
	created := map[string]*store.Task{}
	for i, in := range []store.NewTask{
		{ProjectID: f.project, Title: "alpha unassigned"},
		{ProjectID: f.project, Title: "alpha assigned", AssigneeID: &f.member.ID, Description: &desc, DueDate: &due},
		{ProjectID: f.project, Title: "alpha ünïcode ✓ done", Status: &done, Priority: &urgent},
	} {
		task, err := f.db.CreateTask(ctx, f.member, in)
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		created[task.ID] = task
	}
	key, err := store.NewTaskPageKey(f.project, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := f.db.TaskPages(ctx, []store.TaskPageKey{key})
	if err != nil {
		t.Fatal(err)
	}
	found, err := f.db.SearchTasks(ctx, f.member, f.workspace, "alpha", nil, nil, store.AllTaskFields, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A search of ListedTaskFields reads the same tasks, in the same order
	// with the same cursors, with only those fields set.
	listed, err := f.db.SearchTasks(ctx, f.member, f.workspace, "alpha", nil, nil, store.ListedTaskFields, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// So does a page of ListedTaskFields, read alone; read in one batch with
	// a key of AllTaskFields, its tasks are whole.
	listedKey := key
	listedKey.Fields = store.ListedTaskFields
	listedPages, err := f.db.TaskPages(ctx, []store.TaskPageKey{listedKey})
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := f.db.TaskPages(ctx, []store.TaskPageKey{listedKey, key})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string][2]*store.TaskConnection{"search": {listed, found}, "page": {listedPages[0], pages[0]}} {
		listed, found := c[0], c[1]
		if len(listed.Edges) != len(found.Edges) || listed.PageInfo.HasNextPage != found.PageInfo.HasNextPage ||
			*listed.PageInfo.EndCursor() != *found.PageInfo.EndCursor() {
			t.Fatalf("listed %s: %d tasks, %+v; whole: %d, %+v", name, len(listed.Edges), listed.PageInfo, len(found.Edges), found.PageInfo)
		}
		for i, e := range listed.Edges {
			whole := found.Edges[i]
			want := store.Task{ID: whole.Node.ID, Title: whole.Node.Title, Status: whole.Node.Status,
				Priority: whole.Node.Priority, CreatedAt: whole.Node.CreatedAt}
			if !reflect.DeepEqual(*e.Node, want) || e.Cursor() != whole.Cursor() {
				t.Errorf("listed %s read\n%+v (%s)\nwant\n%+v (%s)", name, *e.Node, e.Cursor(), want, whole.Cursor())
			}
		}
	}
	for name, c := range map[string]*store.TaskConnection{"page": pages[0], "search": found,
		"listed page batched with a whole one": mixed[0], "whole page batched with a listed one": mixed[1]} {
		if len(c.Edges) != 3 {
			t.Fatalf("%s: %d tasks, want 3", name, len(c.Edges))
		}
		for _, e := range c.Edges {
			one, err := f.db.Task(ctx, f.member, e.Node.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(e.Node, one) {
				t.Errorf("%s read\n%+v\nTask reads\n%+v", name, *e.Node, *one)
			}
			if want := created[e.Node.ID]; want == nil || !reflect.DeepEqual(inUTC(one), inUTC(want)) {
				t.Errorf("Task read\n%+v\nCreateTask made\n%+v", *one, want)
			}
			byID, err := f.db.TasksByID(ctx, []string{e.Node.ID})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(byID[0], one) {
				t.Errorf("TasksByID read\n%+v\nTask reads\n%+v", byID[0], *one)
			}
			// TaskWithAssignee (task(id)) reads it as Task does, with its
			// assignee as UsersByIDs does.
			with, assignee, err := f.db.TaskWithAssignee(ctx, f.member, e.Node.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(with, one) {
				t.Errorf("TaskWithAssignee read\n%+v\nTask reads\n%+v", *with, *one)
			}
			var want *store.User
			if one.AssigneeID != nil {
				users, err := f.db.UsersByIDs(ctx, []string{*one.AssigneeID})
				if err != nil || users[*one.AssigneeID] == nil {
					t.Fatal(users, err)
				}
				want = users[*one.AssigneeID]
			}
			if !reflect.DeepEqual(assignee, want) {
				t.Errorf("TaskWithAssignee's assignee %+v, want %+v", assignee, want)
			}
		}
	}
}

// inUTC returns a copy of t with its times in UTC, as CreateTask makes them
// (pgx reads them in the local time zone).
func inUTC(t *store.Task) store.Task {
	c := *t
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	if c.DueDate != nil {
		d := c.DueDate.UTC()
		c.DueDate = &d
	}
	return c
}
