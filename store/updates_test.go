package store_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// An update of a task, a comment or a project is one round trip: BEGIN, the
// check (the row locked, the actor's role and rules), the update with its
// event, COMMIT. A refused one is refused by the check in its first round
// trip, an update that changes nothing is one round trip that records
// nothing, and a keyed update carries its idempotency record in the same
// round trip, whose result is the row returned.
func TestUpdatesAreOneRoundTrip(t *testing.T) {
	t.Parallel()
	f := newRoundTripFixture(t)
	db, pool, rec, ctx := f.db, f.pool, f.rec, t.Context()
	member, other, viewer, admin := f.member, f.other, f.viewer, f.admin
	task, comment, project := f.task, f.comment, f.project
	title, body, name := "t2", "c2", "P2"
	for _, c := range []struct {
		table   string
		update  func(actor *store.User) error
		refused []*store.User // other: not the comment's author; member: not an ADMIN
		by      *store.User
		action  string
	}{
		{"tasks", func(a *store.User) error {
			_, err := db.UpdateTask(ctx, a, task.ID, store.TaskPatch{Title: store.Some(&title)})
			return err
		}, []*store.User{viewer}, member, "task.updated"},
		{"comments", func(a *store.User) error { _, err := db.UpdateComment(ctx, a, comment.ID, body); return err },
			[]*store.User{viewer, other}, member, "comment.updated"},
		{"projects", func(a *store.User) error {
			_, err := db.UpdateProject(ctx, a, project, store.ProjectPatch{Name: &name})
			return err
		}, []*store.User{viewer}, member, "project.updated"},
		{"projects", func(a *store.User) error { _, err := db.ArchiveProject(ctx, a, project); return err },
			[]*store.User{viewer, member}, admin, "project.archived"},
	} {
		rec.take()
		assertRefusedByCheck(t, rec, c.action, orderedCheck, c.refused, c.update)
		for i := range 2 { // the second changes nothing
			if err := c.update(c.by); err != nil {
				t.Fatal(err)
			}
			trips := rec.take()
			if len(trips) != 1 || !strings.HasPrefix(trips[0], orderedCheck) ||
				!strings.Contains(trips[0], "update "+c.table) || !strings.HasSuffix(trips[0], "; commit") {
				t.Fatalf("%s %d: round trips %q: want one, BEGIN, the check, the update with its event and COMMIT", c.action, i, trips)
			}
			var events int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = $1`, c.action).Scan(&events); err != nil || events != 1 {
				t.Fatalf("%s %d: %d events (%v), want 1", c.action, i, events, err)
			}
			rec.take()
		}
	}

	// With a key claimed ahead, as the idempotency middleware does.
	keyed := "keyed"
	var got *store.Task
	err := db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := db.ClaimIdempotencyKeyAhead(ctx, member.ID, "k", "updateTask", []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		var err error
		if got, err = db.UpdateTask(ctx, member, task.ID, store.TaskPatch{Title: store.Some(&keyed)}); err != nil {
			return err
		}
		if got.ID != task.ID || got.Title != "" {
			t.Errorf("the task before the commit: %+v, want its id only", got)
		}
		return db.SaveIdempotencyValue(ctx, member.ID, "k", got)
	})
	if err != nil {
		t.Fatal(err)
	}
	trips := rec.take()
	if len(trips) != 1 || !strings.HasPrefix(trips[0], "begin ; select l.locked, r.field") ||
		!strings.Contains(trips[0], "update tasks") || !strings.Contains(trips[0], "insert into idempotency_keys") ||
		!strings.HasSuffix(trips[0], "; commit") {
		t.Fatalf("keyed update: round trips %q, want one: the claim, the check, the update, the record, COMMIT", trips)
	}
	if got.Title != keyed {
		t.Fatalf("keyed update returned %+v", got)
	}
	assertRecordIs(t, db, member.ID, "k", got)

	// A result that holds the row without being it (a payload) is
	// marshalled once the row is filled in: one round trip more, never an
	// empty row in the record.
	var wrapped *taskPayload
	again := "wrapped"
	rec.take()
	err = db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := db.ClaimIdempotencyKeyAhead(ctx, member.ID, "k2", "updateTask", []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		got, err := db.UpdateTask(ctx, member, task.ID, store.TaskPatch{Title: store.Some(&again)})
		if err != nil {
			return err
		}
		wrapped = &taskPayload{}
		if err := db.SaveIdempotencyValue(ctx, member.ID, "k2", &copyOnSave{got, wrapped}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if trips := rec.take(); len(trips) != 2 {
		t.Fatalf("keyed update with a payload: round trips %q, want two (the update sent before the payload is marshalled)", trips)
	}
	if wrapped.Task.Title != again {
		t.Fatalf("payload record: %+v", wrapped)
	}
	assertRecordIs(t, db, member.ID, "k2", wrapped)
}

// copyOnSave copies task into its payload when it is marshalled, as a
// resolver's payload built around an update's row would hold it then.
type copyOnSave struct {
	task *store.Task
	into *taskPayload
}

// taskPayload is a resolver's payload around a task.
type taskPayload struct{ Task store.Task }

func (c *copyOnSave) MarshalJSON() ([]byte, error) {
	c.into.Task = *c.task
	return json.Marshal(c.into)
}

// roundTripFixture is a workspace, on a traced pool (tracedDB), with a
// MEMBER, another MEMBER, a VIEWER and an ADMIN, a project, a task and a
// comment of the first MEMBER's.
type roundTripFixture struct {
	db                           *store.DB
	pool                         *pgxpool.Pool
	rec                          *roundTrips
	member, other, viewer, admin *store.User
	ws, project                  string
	task                         *store.Task
	comment                      *store.Comment
}

func newRoundTripFixture(t *testing.T) *roundTripFixture {
	t.Helper()
	db, pool, rec := tracedDB(t)
	ctx := t.Context()
	f := &roundTripFixture{db: db, pool: pool, rec: rec,
		member: mkUser(t, db, "member@example.com"), other: mkUser(t, db, "other@example.com"),
		viewer: mkUser(t, db, "viewer@example.com"), admin: mkUser(t, db, "admin@example.com")}
	if err := pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('W') RETURNING id`).Scan(&f.ws); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER'), ($1, $3, 'MEMBER'),
		($1, $4, 'VIEWER'), ($1, $5, 'ADMIN')`, f.ws, f.member.ID, f.other.ID, f.viewer.ID, f.admin.ID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'P') RETURNING id`, f.ws).Scan(&f.project); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.task, err = db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "t"}); err != nil {
		t.Fatal(err)
	}
	if f.comment, err = db.AddComment(ctx, f.member, f.task.ID, "c"); err != nil {
		t.Fatal(err)
	}
	return f
}

// orderedCheck begins the first round trip of a change of a row: the row's
// ordering lock (checkParent), then its check.
const orderedCheck = "begin ; select pg_advisory_xact_lock(hashtextextended($1, 0)) ; select taskflow_check("

// plainCheck begins the first round trip of the other checked writes.
const plainCheck = "begin ; select taskflow_check("

// assertRefusedByCheck checks that change by each of actors is FORBIDDEN,
// refused by a check in its first round trip (then rolled back), which
// begins with first (orderedCheck or plainCheck).
func assertRefusedByCheck(t *testing.T, rec *roundTrips, what, first string, actors []*store.User, change func(actor *store.User) error) {
	t.Helper()
	for _, u := range actors {
		if err := change(u); errs.CodeOf(err) != errs.CodeForbidden {
			t.Fatalf("%s: %s's change: %v", what, u.Email, err)
		}
		if trips := rec.take(); len(trips) == 0 || !strings.HasPrefix(trips[0], first) {
			t.Fatalf("%s: %s's refused change: round trips %q, want the check in the first", what, u.Email, trips)
		}
	}
}

// assertRecordIs checks that the result of the idempotency record of
// (userID, key) decodes to what v's JSON decodes to.
func assertRecordIs[T any](t *testing.T, db *store.DB, userID, key string, v *T) {
	t.Helper()
	var stored []byte
	if err := db.Pool.QueryRow(t.Context(), `SELECT result::text FROM idempotency_keys WHERE user_id = $1 AND key = $2`,
		userID, key).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	goJSON, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var fromSQL, fromGo T
	if err := json.Unmarshal(stored, &fromSQL); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(goJSON, &fromGo); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromSQL, fromGo) {
		t.Errorf("record of %s:\n SQL %s\n  Go %s", key, stored, goJSON)
	}
}

// The changes Postgres records for an update are audit.Changes of the row
// before and the row returned, which is the row committed; an update that
// changes nothing records nothing and returns the row as it was; and a keyed
// update's idempotency record decodes to the row returned. Every field a
// patch can set is covered, with texts to escape, times with and without
// trailing zeros in their fraction, and an id in upper case.
func TestUpdatesInSQLAreGos(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	other := mkUser(t, f.db, "other@example.com")
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`,
		f.workspace, other.ID); err != nil {
		t.Fatal(err)
	}
	task, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	comment, err := f.db.AddComment(ctx, f.member, task.ID, "c")
	if err != nil {
		t.Fatal(err)
	}
	s := func(v string) *string { return &v }
	due := func(ns int) *time.Time { d := time.Date(2027, 1, 2, 3, 4, 5, ns, time.UTC); return &d }
	status, priority := store.TaskStatus("DONE"), store.TaskPriority("URGENT")
	status2 := store.TaskStatus("IN_PROGRESS")
	upper := strings.ToUpper(other.ID)
	for i, p := range []store.TaskPatch{
		{Title: store.Some(s("  renamed  "))},
		{Title: store.Some(s("renamed"))}, // the same, trimmed
		{Description: store.Some(s("quote \" back \\ slash ü <b>\n\ttab"))},
		{Description: store.Some[string](nil)},
		{Description: store.Some[string](nil)}, // null again
		{Status: store.Some(&status), Priority: store.Some(&priority)},
		{AssigneeID: store.Some(&other.ID)},
		{AssigneeID: store.Some(&upper)}, // the same
		{DueDate: store.Some(due(120000000))},
		{DueDate: store.Some(due(123456000))},
		{DueDate: store.Some(due(123456000))}, // the same
		{DueDate: store.Some(due(0))},
		{DueDate: store.Some[time.Time](nil)},
		{},
		{Title: store.Some(s("all")), Description: store.Some(s("d")), Status: store.Some(&status2),
			Priority: store.Some(&priority), AssigneeID: store.Some[string](nil), DueDate: store.Some(due(500))},
	} {
		assertUpdateRecorded(t, f.db, "task.updated", task.ID, func() (*store.Task, error) { return f.db.Task(ctx, f.member, task.ID) },
			func(ctx context.Context) (*store.Task, error) { return f.db.UpdateTask(ctx, f.member, task.ID, p) }, i)
	}
	for i, body := range []string{"c", "  changed ", "changed", "ü \"\\"} {
		assertUpdateRecorded(t, f.db, "comment.updated", comment.ID, func() (*store.Comment, error) {
			return f.db.LiveComment(ctx, f.member, comment.ID)
		}, func(ctx context.Context) (*store.Comment, error) {
			return f.db.UpdateComment(ctx, other, comment.ID, body)
		}, i)
	}
	project := func() (*store.Project, error) {
		ps, err := f.db.ProjectsByIDs(ctx, f.member.ID, []string{f.project})
		return ps[f.project], err
	}
	for i, p := range []store.ProjectPatch{
		{Name: s("P")}, {Name: s(" Q ")}, {SetDescription: true, Description: s("x\ny")}, {SetDescription: true},
		{Name: s("R"), SetDescription: true, Description: s("z")},
	} {
		assertUpdateRecorded(t, f.db, "project.updated", f.project, project,
			func(ctx context.Context) (*store.Project, error) {
				return f.db.UpdateProject(ctx, f.member, f.project, p)
			}, i)
	}
	for i := range 2 { // the second changes nothing
		assertUpdateRecorded(t, f.db, "project.archived", f.project, project,
			func(ctx context.Context) (*store.Project, error) { return f.db.ArchiveProject(ctx, other, f.project) }, i)
	}
	storetest.Seal(t, f.db)
	if r, err := f.db.VerifyAuditLog(ctx, other, f.workspace, nil, nil, nil); err != nil || !r.Valid {
		t.Fatalf("verify: %+v %v", r, err)
	}
}

// assertUpdateRecorded runs update (case i) in a unit of work with a key
// claimed ahead and checks, against read (the row as stored) before and
// after, that it returned the row committed, that its event (action, of the
// row id) holds audit.Changes of the rows before and after, or that there is
// none and the row is as it was when that is empty, and that the key's
// record decodes to the row returned.
func assertUpdateRecorded[T any](t *testing.T, db *store.DB, action, id string, read func() (*T, error),
	update func(context.Context) (*T, error), i int) {
	t.Helper()
	ctx := t.Context()
	before, err := read()
	if err != nil {
		t.Fatal(err)
	}
	events := func() (n int, last []byte) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT count(*), (array_agg(metadata::text ORDER BY seq DESC))[1]
			FROM audit_events WHERE action = $1 AND entity_id = $2`, action, id).Scan(&n, &last); err != nil {
			t.Fatal(err)
		}
		return n, last
	}
	n, _ := events()
	var after *T
	key := action + string(rune('a'+i))
	user := "00000000-0000-0000-0000-00000000000a" // a key's user needs no row
	err = db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := db.ClaimIdempotencyKeyAhead(ctx, user, key, action, []byte("fp"), time.Hour, time.Second); err != nil {
			return err
		}
		var err error
		if after, err = update(ctx); err != nil {
			return err
		}
		return db.SaveIdempotencyValue(ctx, user, key, after)
	})
	if err != nil {
		t.Fatalf("%s %d: %v", action, i, err)
	}
	stored, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, stored) {
		t.Errorf("%s %d: returned %+v, stored %+v", action, i, after, stored)
	}
	want := audit.Changes(before, after)
	m, last := events()
	if len(want) == 0 {
		if m != n || !reflect.DeepEqual(after, before) {
			t.Errorf("%s %d changed nothing: %d events after, %d before; row %+v, was %+v", action, i, m, n, after, before)
		}
	} else {
		norm, err := audit.NormalizeMetadata(map[string]any{"changes": want})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := audit.DecodeMetadata(last); m != n+1 || err != nil || !reflect.DeepEqual(got, norm) {
			t.Errorf("%s %d: %d events after %d; the last:\n SQL %s (%v)\n  Go %#v", action, i, m, n, last, err, norm)
		}
	}
	assertRecordIs(t, db, user, key, after)
}

// A member's role change or removal is one round trip: BEGIN, the
// workspace's lock, the rules, the change with its event, COMMIT. The event
// is what Go's audit would record (the role's change; the member's snapshot
// with the number of tasks the removal unassigns), a role change to the same
// role records nothing, and a keyed role change's record decodes to the
// member returned, which is the member stored.
func TestMemberChangesInSQLAreGos(t *testing.T) {
	t.Parallel()
	db, pool, rec := tracedDB(t)
	ctx := t.Context()
	owner, member, viewer := mkUser(t, db, "owner@example.com"), mkUser(t, db, "member@example.com"), mkUser(t, db, "viewer@example.com")
	var ws, project string
	if err := pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('W') RETURNING id`).Scan(&ws); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER'), ($1, $3, 'MEMBER'),
		($1, $4, 'VIEWER')`, ws, owner.ID, member.ID, viewer.ID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'P') RETURNING id`, ws).Scan(&project); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := db.CreateTask(ctx, owner, store.NewTask{ProjectID: project, Title: "t", AssigneeID: &member.ID}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (*store.Member, error) {
		ms, err := db.MembersByWorkspaces(ctx, owner.ID, []string{ws})
		for _, m := range ms[ws] {
			if m.UserID == member.ID {
				return m, err
			}
		}
		return nil, err
	}
	oneTrip := func(what, write string) {
		t.Helper()
		trips := rec.take()
		if len(trips) != 1 || !strings.HasPrefix(trips[0], plainCheck) ||
			!strings.Contains(trips[0], write) || !strings.HasSuffix(trips[0], "; commit") {
			t.Fatalf("%s: round trips %q, want one: BEGIN, the checks, the change with its event, COMMIT", what, trips)
		}
	}
	rec.take()
	assertRefusedByCheck(t, rec, "member.removed", plainCheck, []*store.User{viewer},
		func(a *store.User) error { return db.RemoveMember(ctx, a, ws, member.ID) })
	for i, role := range []store.Role{store.RoleViewer, store.RoleViewer, store.RoleAdmin} {
		rec.take()
		assertUpdateRecorded(t, db, "member.role_changed", member.ID, read, func(ctx context.Context) (*store.Member, error) {
			return db.UpdateMemberRole(ctx, owner, ws, strings.ToUpper(member.ID), role)
		}, i)
		// assertUpdateRecorded's reads went through the traced pool too: the
		// round trip of the change is the one with the update.
		var trips []string
		for _, tr := range rec.take() {
			if strings.HasPrefix(tr, "begin ; select l.locked, r.field") {
				trips = append(trips, tr)
			}
		}
		if len(trips) != 1 || !strings.Contains(trips[0], "update members") || !strings.HasSuffix(trips[0], "; commit") {
			t.Fatalf("role change %d: round trips %q, want one with the claim, the update and COMMIT", i, trips)
		}
	}
	before, err := read()
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	if err := db.RemoveMember(ctx, owner, ws, member.ID); err != nil {
		t.Fatal(err)
	}
	oneTrip("removal", "delete from members")
	want := audit.Snapshot(before)
	want["unassignedTasks"] = 2
	norm, err := audit.NormalizeMetadata(want)
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	var assigned int
	if err := pool.QueryRow(ctx, `SELECT (SELECT metadata::text FROM audit_events WHERE action = 'member.removed' AND entity_id = $1),
		(SELECT count(*) FROM tasks WHERE assignee_id::text = $1)`, member.ID).Scan(&stored, &assigned); err != nil {
		t.Fatal(err)
	}
	if got, err := audit.DecodeMetadata(stored); err != nil || !reflect.DeepEqual(got, norm) || assigned != 0 {
		t.Errorf("member.removed:\n SQL %s (%v)\n  Go %#v\n%d tasks still assigned", stored, err, norm, assigned)
	}
}
