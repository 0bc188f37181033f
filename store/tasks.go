package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"taskflow/audit"
	"taskflow/errs"
)

// MaxTitleLength is the longest task title accepted, in characters.
const MaxTitleLength = 200

// MaxTaskDescriptionLength is the longest task description accepted, in characters.
const MaxTaskDescriptionLength = 10000

// DefaultTaskPageSize is the page size of task lists when first is not given.
const DefaultTaskPageSize = 20

// Optional is an input field that may be absent, present and null, or present with
// a value: Set says whether it was given, Value is nil for an explicit null.
type Optional[T any] struct {
	Set   bool
	Value *T
}

// Some returns an Optional given with v (nil means an explicit null).
func Some[T any](v *T) Optional[T] { return Optional[T]{Set: true, Value: v} }

// NewTask is the input of CreateTask. Nil Status and Priority mean the defaults
// (TODO, MEDIUM).
type NewTask struct {
	ProjectID   string
	Title       string
	Description *string
	Status      *TaskStatus
	Priority    *TaskPriority
	AssigneeID  *string
	DueDate     *time.Time
}

// TaskPatch is the input of UpdateTask: only the fields that are Set change. An
// explicit null clears Description, AssigneeID and DueDate; it is refused for
// Title, Status and Priority.
type TaskPatch struct {
	Title       Optional[string]
	Description Optional[string]
	Status      Optional[TaskStatus]
	Priority    Optional[TaskPriority]
	AssigneeID  Optional[string]
	DueDate     Optional[time.Time]
}

// taskColumns is the column list scanned by scanTask (table alias t).
const taskColumns = `t.id, t.project_id, t.workspace_id, t.title, t.description, t.status, t.priority,
	t.assignee_id, t.due_date, t.created_by, t.created_at, t.updated_at`

// TaskFields says which fields of the Tasks a read returns are set.
type TaskFields int

const (
	// AllTaskFields sets every field.
	AllTaskFields TaskFields = iota
	// ListedTaskFields sets ID, Title, Status, Priority and CreatedAt only:
	// what a list of tasks shows. Such Tasks must not be taken for whole
	// ones (a loader's cache of tasks by id). A search that reads only these
	// columns costs Postgres about 17 µs less, a sixth of the statement
	// (docs/decisions/2026-12-03-listed-search-columns.md).
	ListedTaskFields
)

// listedTaskColumns are the columns of ListedTaskFields, as taskScanner's
// scanListed reads them.
const listedTaskColumns = `t.id, t.title, t.status, t.priority, t.created_at`

// columns returns the columns (table alias t) that set f's fields, as
// taskScanner.scanOf(f) reads them.
func (f TaskFields) columns() string {
	if f == ListedTaskFields {
		return listedTaskColumns
	}
	return taskColumns
}

// scanTask scans the columns of taskColumns, followed by up to five extra
// destinations, as taskScanner.scanRow does (with a scanner of its own).
func scanTask(row pgx.Row, extra ...any) (*Task, error) {
	var s taskScanner
	return s.scanRow(row, nil, extra...)
}

// cleanTitle trims a title and checks it is non-empty and not too long.
func cleanTitle(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errs.Errorf(errs.CodeBadUserInput, "title must not be empty")
	}
	if utf8.RuneCountInString(s) > MaxTitleLength {
		return "", errs.Errorf(errs.CodeBadUserInput, "title must be at most %d characters", MaxTitleLength)
	}
	return s, nil
}

// checkDescription refuses a description that is too long.
func checkDescription(s *string) error {
	if s != nil && utf8.RuneCountInString(*s) > MaxTaskDescriptionLength {
		return errs.Errorf(errs.CodeBadUserInput, "description must be at most %d characters", MaxTaskDescriptionLength)
	}
	return nil
}

// checkAssignee refuses an assignee id that is not an id at all (one that is
// well-formed but not a member is refused by tasks_assignee_member_fkey).
func checkAssignee(id *string) error {
	if id != nil && !validID(*id) {
		return errs.Errorf(errs.CodeBadUserInput, "the assignee must be a member of the workspace")
	}
	return nil
}

// CreateTask creates a task in a project as actor (MEMBER or more) and records
// task.created. Status and priority default to TODO and MEDIUM; the title is
// trimmed. It returns a NOT_FOUND error if the project does not exist or is in a
// workspace actor is not a member of, FORBIDDEN for a VIEWER, CONFLICT if the
// project is archived (an archived project takes no new tasks), and
// BAD_USER_INPUT for an empty or too long title, a too long description, an
// invalid status or priority, or an assignee who is not a member of the workspace.
func (db *DB) CreateTask(ctx context.Context, actor *User, in NewTask) (*Task, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	title, err := cleanTitle(in.Title)
	if err != nil {
		return nil, err
	}
	if err := checkDescription(in.Description); err != nil {
		return nil, err
	}
	status, priority := TaskStatusTodo, TaskPriorityMedium
	if in.Status != nil {
		status = *in.Status
	}
	if in.Priority != nil {
		priority = *in.Priority
	}
	if !status.IsValid() || !priority.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "invalid status or priority")
	}
	if err := checkAssignee(in.AssigneeID); err != nil {
		return nil, err
	}
	assignee, err := canonicalPtr(in.AssigneeID)
	if err != nil {
		return nil, err
	}
	var task *Task
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		ws, err := db.workspaceOf(ctx, tx, parentProject, in.ProjectID)
		if err != nil {
			return err
		}
		now := stamp(time.Now())
		task = &Task{ID: newID(), ProjectID: mustCanonical(in.ProjectID), WorkspaceID: ws, Title: title,
			Description: in.Description, Status: status, Priority: priority, AssigneeID: assignee,
			DueDate: stampPtr(in.DueDate), CreatedByID: actor.ID, CreatedAt: now, UpdatedAt: now}
		u := unitOfWorkFrom(ctx)
		u.checkParent(parentProject, task.ProjectID, actor, RoleMember, "create tasks",
			`CASE WHEN r.archived_at IS NOT NULL THEN 'archived' END`,
			refusals{"archived": errs.Errorf(errs.CodeConflict, "the project is archived and takes no new tasks")})
		u.write("insert task", `INSERT INTO tasks (id, project_id, workspace_id, title, description, status,
				priority, assignee_id, due_date, created_by, created_at, updated_at)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 WHERE taskflow_ok()`,
			[]any{task.ID, task.ProjectID, task.WorkspaceID, task.Title, task.Description, task.Status, task.Priority,
				task.AssigneeID, task.DueDate, task.CreatedByID, task.CreatedAt, task.UpdatedAt}, 1)
		return db.appendAudit(ctx, tx, audit.Event{
			WorkspaceID: &task.WorkspaceID, ActorID: &actor.ID, Action: "task.created",
			EntityID: task.ID, Metadata: audit.Snapshot(task),
		})
	})
	if err != nil {
		return nil, err
	}
	return task, nil
}

// tasksTable is the tasks table for the write helpers.
var tasksTable = table[Task]{kind: "task", name: "tasks", alias: "t", columns: taskColumns, lock: "FOR UPDATE",
	scan: scanTask, event: func(t *Task) (string, string) { return t.WorkspaceID, t.ID },
	withID: func(id string) *Task { return &Task{ID: id} }, json: taskSnapshotSQL + ` || ` + timesSQL}

// apply returns the task with the patch applied, or a BAD_USER_INPUT error.
func (p TaskPatch) apply(t Task) (Task, error) {
	if p.Title.Set {
		if p.Title.Value == nil {
			return t, errs.Errorf(errs.CodeBadUserInput, "title cannot be null")
		}
		title, err := cleanTitle(*p.Title.Value)
		if err != nil {
			return t, err
		}
		t.Title = title
	}
	if p.Description.Set {
		if err := checkDescription(p.Description.Value); err != nil {
			return t, err
		}
		t.Description = p.Description.Value
	}
	if p.Status.Set {
		if p.Status.Value == nil || !p.Status.Value.IsValid() {
			return t, errs.Errorf(errs.CodeBadUserInput, "status cannot be null")
		}
		t.Status = *p.Status.Value
	}
	if p.Priority.Set {
		if p.Priority.Value == nil || !p.Priority.Value.IsValid() {
			return t, errs.Errorf(errs.CodeBadUserInput, "priority cannot be null")
		}
		t.Priority = *p.Priority.Value
	}
	if p.AssigneeID.Set {
		if err := checkAssignee(p.AssigneeID.Value); err != nil {
			return t, err
		}
		assignee, err := canonicalPtr(p.AssigneeID.Value)
		if err != nil {
			return t, err
		}
		t.AssigneeID = assignee
	}
	if p.DueDate.Set {
		t.DueDate = stampPtr(p.DueDate.Value)
	}
	return t, nil
}

// UpdateTask changes the given fields of a task as actor (MEMBER or more) and
// records task.updated with the changed fields, in one round trip with the
// commit. A patch that changes nothing writes nothing and records no event. It
// returns UNAUTHENTICATED for no actor, a NOT_FOUND error if the task does not
// exist or is in a workspace actor is not a member of, FORBIDDEN for a
// VIEWER, and BAD_USER_INPUT for a null title, status or priority, an empty
// or too long title, or an assignee who is not a member of the workspace;
// within a unit of work of the caller's, the errors that depend on the task
// come when it commits, and the task returned is filled in then (see
// updateRecorded).
func (db *DB) UpdateTask(ctx context.Context, actor *User, id string, patch TaskPatch) (*Task, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	v, err := patch.apply(Task{}) // the patched fields' values, checked
	if err != nil {
		return nil, err
	}
	var sets []assign
	for _, f := range []struct {
		set                    bool
		column, field, sqlType string
		v                      any
	}{
		{patch.Title.Set, "title", "title", "text", v.Title},
		{patch.Description.Set, "description", "description", "text", v.Description},
		{patch.Status.Set, "status", "status", "text", v.Status},
		{patch.Priority.Set, "priority", "priority", "text", v.Priority},
		{patch.AssigneeID.Set, "assignee_id", "assigneeId", "uuid", v.AssigneeID},
		{patch.DueDate.Set, "due_date", "dueDate", "timestamptz", v.DueDate},
	} {
		if f.set {
			sets = append(sets, setTo(f.column, f.field, f.sqlType, f.v))
		}
	}
	return updateRecorded(ctx, db, tasksTable, actor, id, RoleMember, "edit tasks", "task.updated", sets, "", nil)
}

// DeleteTask deletes a task and its comments as actor (MEMBER or more) and
// records task.deleted with the task's fields, in one round trip with the
// commit. It returns UNAUTHENTICATED for no actor, a NOT_FOUND error if the
// task does not exist or is in a workspace actor is not a member of, and
// FORBIDDEN for a VIEWER.
func (db *DB) DeleteTask(ctx context.Context, actor *User, id string) error {
	return deleteRecorded(ctx, db, tasksTable, actor, id, RoleMember, "delete tasks", "task.deleted", taskSnapshotSQL, "", nil)
}

// taskSnapshotSQL is audit.Snapshot of a Task as Postgres makes it from a
// tasks row d (TestSnapshotsInSQLAreGos compares them).
var taskSnapshotSQL = `jsonb_build_object('id', d.id, 'projectId', d.project_id, 'workspaceId', d.workspace_id,
	'title', d.title, 'description', d.description, 'status', d.status, 'priority', d.priority,
	'assigneeId', d.assignee_id, 'dueDate', ` + rfc3339SQL("d.due_date") + `, 'createdById', d.created_by)`

// Task returns a task that viewer can see. It returns a NOT_FOUND error if the
// task does not exist, the id is malformed, or the task is in a workspace viewer
// is not a member of.
func (db *DB) Task(ctx context.Context, viewer *User, id string) (*Task, error) {
	t, _, err := db.TaskWithAssignee(ctx, viewer, id)
	return t, err
}

// TaskWithAssignee is Task with the task's assignee (nil for none) read in the
// same statement: task(id) { assignee { ... } }, the commonest read, is then one
// round trip. It returns what Task returns.
func (db *DB) TaskWithAssignee(ctx context.Context, viewer *User, id string) (*Task, *User, error) {
	if viewer == nil {
		return nil, nil, errs.ErrUnauthenticated
	}
	if !validID(id) {
		return nil, nil, notFound("task")
	}
	var a struct {
		email, name, hash *string
		createdAt         *time.Time
	}
	var t *Task
	var sc taskScanner
	err := db.read(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT `+taskColumns+`, `+userColumns+` FROM tasks t
			JOIN members m ON m.workspace_id = t.workspace_id AND m.user_id = $2
			LEFT JOIN users u ON u.id = t.assignee_id
			WHERE t.id = $1`, id, viewer.ID)
	}, func(br pgx.BatchResults) (err error) {
		// The assignee's id is the task's assignee_id: its column is skipped.
		t, err = sc.scanRow(br.QueryRow(), nil, nil, &a.email, &a.name, &a.hash, &a.createdAt)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, notFound("task")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("task: %w", err)
	}
	if t.AssigneeID == nil || a.email == nil {
		return t, nil, nil
	}
	return t, &User{ID: *t.AssigneeID, Email: *a.email, Name: *a.name, PasswordHash: *a.hash, CreatedAt: *a.createdAt}, nil
}

// TasksByID returns the tasks with the given ids, in the order of ids, with nil
// for an id that does not exist. It checks no access: callers load tasks
// reachable from things the viewer can already see (a comment's task).
func (db *DB) TasksByID(ctx context.Context, ids []string) ([]*Task, error) {
	cond, arg, n := anyID("t.id", 1, ids)
	rows, err := db.q(ctx).Query(ctx, `SELECT `+taskColumns+` FROM tasks t WHERE `+cond, arg)
	if err != nil {
		return nil, fmt.Errorf("tasks by id: %w", err)
	}
	defer rows.Close()
	byID := make(map[string]*Task, n)
	var sc taskScanner
	for rows.Next() {
		t, err := sc.scanRow(rows, nil)
		if err != nil {
			return nil, fmt.Errorf("tasks by id: %w", err)
		}
		byID[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks by id: %w", err)
	}
	out := make([]*Task, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// TaskPageKey names one page of a project's tasks: the project, an optional
// status filter ("" for all), the page size, the opaque cursor ("" for the
// first page) and the fields its tasks need set (AllTaskFields, the zero
// value, unless the caller knows less will do). It is comparable, so loaders
// batch and cache by it.
type TaskPageKey struct {
	ProjectID string
	Status    TaskStatus
	First     int
	After     string
	Fields    TaskFields
}

// taskPageScope is the cursor scope of a project's task list with a filter.
func taskPageScope(projectID string, status TaskStatus) string {
	return "tasks:" + projectID + ":" + string(status)
}

// NewTaskPageKey validates a page request for a project's tasks (first nil means
// DefaultTaskPageSize) and returns its key. It returns a BAD_USER_INPUT error for
// first out of 1..100, an invalid status, or a cursor that is malformed or comes
// from another project or filter.
func NewTaskPageKey(projectID string, status *TaskStatus, first *int, after *string) (TaskPageKey, error) {
	k := TaskPageKey{ProjectID: projectID}
	if status != nil {
		if !status.IsValid() {
			return k, errs.Errorf(errs.CodeBadUserInput, "invalid status")
		}
		k.Status = *status
	}
	p, err := NewPage(first, DefaultTaskPageSize, after, taskPageScope(projectID, k.Status))
	if err != nil {
		return k, err
	}
	k.First = p.First
	if after != nil {
		k.After = *after
	}
	return k, nil
}

// TaskPages returns one page of tasks, newest first by (created_at, id), for each
// key, in the order of keys, with one query for all of them. Its tasks have
// ListedTaskFields when every key asks for no more, else AllTaskFields. It checks no access:
// callers pass projects the viewer can see. It returns a BAD_USER_INPUT error for
// a key whose cursor is invalid (keys made by NewTaskPageKey never are).
func (db *DB) TaskPages(ctx context.Context, keys []TaskPageKey) ([]*TaskConnection, error) {
	q, err := newTaskPagesQuery(keys)
	if err != nil {
		return nil, err
	}
	rows, err := db.q(ctx).Query(ctx, q.sql, q.args...)
	if err != nil {
		return nil, fmt.Errorf("task pages: %w", err)
	}
	return q.read(rows)
}

// taskPagesQuery is the statement of TaskPages for its keys, and how to read
// its rows back into pages.
type taskPagesQuery struct {
	keys   []TaskPageKey
	pages  []taskPage
	fields TaskFields
	sql    string
	args   []any
}

// taskPage is a page request of TaskPages with the cursor scope of its list.
type taskPage struct {
	Page
	scope string
}

// newTaskPagesQuery returns the statement reading the pages of keys, or a
// BAD_USER_INPUT error for a key whose cursor is invalid.
func newTaskPagesQuery(keys []TaskPageKey) (*taskPagesQuery, error) {
	pages := make([]taskPage, len(keys))
	projects := make([]string, len(keys))
	statuses := make([]*string, len(keys))
	ats := make([]*time.Time, len(keys))
	afterIDs := make([]*string, len(keys))
	limits := make([]int32, len(keys))
	fields := ListedTaskFields
	for i, k := range keys {
		if k.Fields != ListedTaskFields {
			fields = AllTaskFields
		}
		after := &k.After
		scope := taskPageScope(k.ProjectID, k.Status)
		p, err := NewPage(&k.First, DefaultTaskPageSize, after, scope)
		if err != nil {
			return nil, err
		}
		pages[i] = taskPage{p, scope}
		projects[i] = k.ProjectID
		if !validID(k.ProjectID) {
			projects[i] = "00000000-0000-0000-0000-000000000000"
		}
		if k.Status != "" {
			s := string(k.Status)
			statuses[i] = &s
		}
		if p.After != nil {
			ats[i], afterIDs[i] = &p.After.At, &p.After.ID
		}
		limits[i] = int32(p.First + 1)
	}
	q := &taskPagesQuery{keys: keys, pages: pages, fields: fields}
	columns := fields.columns()
	if len(keys) == 1 {
		// One page (project(id) { tasks }): scalar parameters, which Postgres
		// plans once (anyID says why the arrays below are planned every time).
		q.sql = `SELECT 1::bigint, ` + columns + ` FROM tasks t` + onePageWhere + `
			ORDER BY t.created_at DESC, t.id DESC
			LIMIT $5::int`
		q.args = []any{projects[0], statuses[0], ats[0], afterIDs[0], limits[0]}
		return q, nil
	}
	q.sql = `SELECT k.ord, ` + columns + `
			FROM unnest($1::text[]::uuid[], $2::text[], $3::timestamptz[], $4::text[]::uuid[], $5::int[])
				WITH ORDINALITY AS k(project_id, status, at, id, lim, ord)
			CROSS JOIN LATERAL (
				SELECT * FROM tasks t
				WHERE t.project_id = k.project_id
					AND (k.status IS NULL OR t.status = k.status)
					AND (k.at IS NULL OR (t.created_at, t.id) < (k.at, k.id))
				ORDER BY t.created_at DESC, t.id DESC
				LIMIT k.lim) t
			ORDER BY k.ord, t.created_at DESC, t.id DESC`
	q.args = []any{projects, statuses, ats, afterIDs, limits}
	return q, nil
}

// read returns the pages of q's keys from rows, which it closes.
func (q *taskPagesQuery) read(rows pgx.Rows) ([]*TaskConnection, error) {
	defer rows.Close()
	items := make([][]*Task, len(q.keys))
	var sc taskScanner
	scan := sc.scanOf(q.fields)
	var ord int64
	for rows.Next() {
		t, err := scan(rows, &ord)
		if err != nil {
			return nil, fmt.Errorf("task pages: %w", err)
		}
		if items[ord-1] == nil {
			items[ord-1] = make([]*Task, 0, q.pages[ord-1].First+1) // a page has at most its limit of rows
		}
		items[ord-1] = append(items[ord-1], t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("task pages: %w", err)
	}
	out := make([]*TaskConnection, len(q.keys))
	for i, p := range q.pages {
		out[i] = connection(items[i], p.Page, p.scope, taskKey)
	}
	return out, nil
}

// onePageWhere selects the tasks of one page request (the statement of
// TaskPages for one key, and the reads of ProjectWithTaskPage that take their
// tasks from the page): $1 project, $2 status or null, $3 and $4 the cursor's
// position or null.
const onePageWhere = `
			WHERE t.project_id = $1::text::uuid
				AND ($2::text IS NULL OR t.status = $2::text)
				AND ($3::timestamptz IS NULL OR (t.created_at, t.id) < ($3::timestamptz, $4::text::uuid))`

// TaskPageAlso names what ProjectWithTaskPage also reads of the tasks of the
// page, in the same round trip (the zero value: nothing).
type TaskPageAlso struct {
	// Assignees asks for the users the tasks are assigned to.
	Assignees bool
	// Comments, when not nil, asks for the first page of each task's comments.
	Comments *CommentsAlso
}

// CommentsAlso is the page of comments TaskPageAlso asks for: each task's
// first First comments (newest first), with their authors when Authors.
type CommentsAlso struct {
	First   int
	Authors bool
}

// TaskPageExtras is what ProjectWithTaskPage read for its TaskPageAlso.
type TaskPageExtras struct {
	// Users are the assignees and comment authors read, by id.
	Users map[string]*User
	// Comments are the comment pages read, by the key Task.comments makes
	// (NewCommentPageKey with CommentsAlso.First and no cursor), for every
	// task of the page as the statement saw it, with or without comments.
	Comments map[CommentPageKey]*CommentConnection
}

// ProjectWithTaskPage returns the project of key as ProjectsByIDs would (nil
// when viewerID may not see it) and, for such a project, the page of its
// tasks that key names, in one round trip: project(id) { tasks { ... } }, the
// commonest list, then needs no second one. The two statements are those of
// ProjectsByIDs and TaskPages, so they keep their plans; the page is read
// before the project is known to be visible, and dropped when it is not.
// What also asks for is read in the same round trip, by statements that
// select the page's tasks again (each statement has its own snapshot: a task
// added between them may miss its extras, which are then read as usual). It
// returns TaskPages' errors for key, and BAD_USER_INPUT for a comment page
// size out of 1..100.
func (db *DB) ProjectWithTaskPage(ctx context.Context, viewerID string, key TaskPageKey, also TaskPageAlso) (*Project, *TaskConnection, *TaskPageExtras, error) {
	id := key.ProjectID
	if !validID(id) || !validID(viewerID) {
		return nil, nil, nil, nil // no such project, as ProjectsByIDs answers
	}
	q, err := newTaskPagesQuery([]TaskPageKey{key})
	if err != nil {
		return nil, nil, nil, err
	}
	var commentPage Page
	if also.Comments != nil {
		if commentPage, err = NewPage(&also.Comments.First, DefaultCommentPageSize, nil, ""); err != nil {
			return nil, nil, nil, err
		}
	}
	// The tasks shown: the page's rows but the one that tells of a next page.
	shown := `SELECT t.id, t.assignee_id, t.created_at FROM tasks t` + onePageWhere + `
			ORDER BY t.created_at DESC, t.id DESC LIMIT $5::int - 1`
	var (
		p      *Project
		page   *TaskConnection
		extras *TaskPageExtras
	)
	err = db.read(ctx, func(b *pgx.Batch) {
		b.Queue(projectsByIDsSQL("p.id = $2::uuid"), viewerID, id)
		b.Queue(q.sql, q.args...)
		if also.Assignees {
			b.Queue(`SELECT `+userColumns+` FROM users u WHERE u.id IN (SELECT assignee_id FROM (`+shown+`) k)`, q.args...)
		}
		if also.Comments != nil {
			cols, join := commentColumns, ""
			if also.Comments.Authors {
				cols, join = commentColumns+", "+userColumns, " LEFT JOIN users u ON u.id = c.author_id"
			}
			// A task without comments is a row of NULLs but its id: its page
			// is read too (empty).
			b.Queue(`SELECT `+cols+`, k.id::text FROM (`+shown+`) k
				LEFT JOIN LATERAL (SELECT * FROM comments c WHERE c.task_id = k.id
					ORDER BY c.created_at DESC, c.id DESC LIMIT $6::int) c ON true`+join+`
				ORDER BY k.created_at DESC, k.id DESC, c.created_at DESC, c.id DESC`,
				append(q.args, int32(commentPage.First+1))...)
		}
	}, func(br pgx.BatchResults) error {
		p, page, extras = nil, nil, nil
		rows, err := br.Query()
		if err == nil {
			p, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (*Project, error) { return scanProject(row) })
			if errors.Is(err, pgx.ErrNoRows) {
				p, err = nil, nil
			}
		}
		if err != nil {
			return fmt.Errorf("project: %w", err)
		}
		rows, err = br.Query()
		if err != nil {
			return fmt.Errorf("task pages: %w", err)
		}
		pages, err := q.read(rows)
		if err != nil || p == nil {
			return err
		}
		page = pages[0]
		extras = &TaskPageExtras{Users: map[string]*User{}}
		if also.Assignees {
			rows, err := br.Query()
			if err == nil {
				err = readUsers(rows, extras.Users)
			}
			if err != nil {
				return fmt.Errorf("assignees: %w", err)
			}
		}
		if also.Comments != nil {
			rows, err := br.Query()
			if err == nil {
				extras.Comments, err = readCommentsAlso(rows, *also.Comments, commentPage, extras.Users)
			}
			if err != nil {
				return fmt.Errorf("comments: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return p, page, extras, nil
}

// readUsers reads rows of userColumns into users, by id.
func readUsers(rows pgx.Rows, users map[string]*User) error {
	defer rows.Close()
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return err
		}
		users[u.ID] = u
	}
	return rows.Err()
}

// readCommentsAlso reads the comments statement of ProjectWithTaskPage: rows
// of commentColumns (and userColumns with authors, into users), then the
// task's id; the comment columns are NULL for a task without comments.
func readCommentsAlso(rows pgx.Rows, also CommentsAlso, page Page, users map[string]*User) (map[CommentPageKey]*CommentConnection, error) {
	defer rows.Close()
	items := map[string][]*Comment{} // every task's, with or without comments
	for rows.Next() {
		raw := rows.RawValues()
		taskID := string(raw[len(raw)-1])
		if raw[0] == nil {
			items[taskID] = nil
			continue // no comments
		}
		var ignored string // the task's id, read above
		var c *Comment
		var err error
		if also.Authors {
			c, err = scanCommentAuthor(rows, users, &ignored)
		} else {
			c, err = scanComment(rows, &ignored)
		}
		if err != nil {
			return nil, err
		}
		items[taskID] = append(items[taskID], c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make(map[CommentPageKey]*CommentConnection, len(items))
	for taskID, cs := range items {
		out[CommentPageKey{TaskID: taskID, First: page.First}] = connection(cs, page, commentList.scope(taskID), commentList.key)
	}
	return out, nil
}

// taskScanner scans rows of taskColumns (after a leading column, and before
// up to five more: scanRow) or of listedTaskColumns (scanListed) into new
// Tasks. It keeps the list of destinations rows.Scan takes, which
// would otherwise be allocated for every row, and reads a row's five ids as
// UUIDs, writing their text and the title into one string that the Task's
// ids and title are slices of: pgx writes each into a string of its own
// (BenchmarkProjectTasksPage, 2026-12-03: the ids' strings were 16% of a
// page's allocations, the title's 20 of 543). A Task and its assignee's id
// are one allocation (taskRow).
type taskScanner struct {
	// dest has room for a leading column, taskColumns and five more.
	dest [18]any
	// ids are the id, project_id, workspace_id, assignee_id and created_by
	// of the row.
	ids   [5]pgtype.UUID
	title rawText
	// text is the buffer the row's ids and title are written to, at first
	// textBuf (which holds five ids and a title of up to 76 bytes without
	// growing; a title's own buffer is titleBuf).
	text     []byte
	textBuf  [5*36 + 76]byte
	titleBuf [76]byte
}

// scan reads the current row of rows: the leading column into first, the
// others into a new Task.
func (s *taskScanner) scan(rows pgx.Rows, first any) (*Task, error) {
	return s.scanRow(rows, first)
}

// scanRow reads row: the leading column into lead (none when lead is nil),
// then the columns of taskColumns into a new Task, then up to five more into
// extra (a nil one skips its column).
func (s *taskScanner) scanRow(r pgx.Row, lead any, extra ...any) (*Task, error) {
	row := new(taskRow)
	t := &row.Task
	s.useBuffers()
	dest := s.dest[:0]
	if lead != nil {
		dest = append(dest, lead)
	}
	dest = append(dest, &s.ids[0], &s.ids[1], &s.ids[2], &s.title, &t.Description, &t.Status,
		&t.Priority, &s.ids[3], &t.DueDate, &s.ids[4], &t.CreatedAt, &t.UpdatedAt)
	dest = append(dest, extra...)
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	if s.title.null {
		return nil, errors.New("task: its title is NULL")
	}
	text := s.text[:0]
	for i, id := range s.ids {
		switch {
		case id.Valid:
			text = appendUUID(text, id.Bytes)
		case i != 3: // only assignee_id may be NULL
			return nil, fmt.Errorf("task: column %d of taskColumns is NULL", i)
		}
	}
	text = append(text, s.title.b...)
	s.text = text
	all := string(text)
	t.Title = all[len(all)-len(s.title.b):]
	next := func() string {
		id := all[:36]
		all = all[36:]
		return id
	}
	t.ID, t.ProjectID, t.WorkspaceID = next(), next(), next()
	if s.ids[3].Valid {
		row.assignee = next()
		t.AssigneeID = &row.assignee
	}
	t.CreatedByID = next()
	return t, nil
}

// scanListed reads the current row of rows, of a leading column and then
// listedTaskColumns: the leading column into first, the others into a new
// Task of ListedTaskFields, whose id and title share one string.
func (s *taskScanner) scanListed(rows pgx.Rows, first any) (*Task, error) {
	t := new(Task)
	s.useBuffers()
	dest := s.dest[:6]
	dest[0], dest[1], dest[2], dest[3], dest[4], dest[5] = first, &s.ids[0], &s.title, &t.Status, &t.Priority, &t.CreatedAt
	if err := rows.Scan(dest...); err != nil {
		return nil, err
	}
	if !s.ids[0].Valid || s.title.null {
		return nil, errors.New("task: its id or title is NULL")
	}
	s.text = append(appendUUID(s.text[:0], s.ids[0].Bytes), s.title.b...)
	all := string(s.text)
	t.ID, t.Title = all[:36], all[36:]
	return t, nil
}

// scanOf returns the scan of s that reads the columns of f.columns().
func (s *taskScanner) scanOf(f TaskFields) func(rows pgx.Rows, first any) (*Task, error) {
	if f == ListedTaskFields {
		return s.scanListed
	}
	return s.scan
}

// useBuffers points the row's text and title at the scanner's own arrays the
// first time.
func (s *taskScanner) useBuffers() {
	if s.text == nil {
		s.text, s.title.b = s.textBuf[:0], s.titleBuf[:0]
	}
}

// taskRow is a Task read by taskScanner, with room for its assignee's id.
type taskRow struct {
	Task
	assignee string
}

// rawText is a scan destination that keeps a copy of a text column's bytes in
// a buffer of its own, reused from row to row.
type rawText struct {
	b    []byte
	null bool
}

// ScanBytes copies v (pgx's buffer, valid only during the call); nil is NULL.
func (r *rawText) ScanBytes(v []byte) error {
	r.b, r.null = append(r.b[:0], v...), v == nil
	return nil
}

// appendUUID appends u's text: lower-case hexadecimal in groups of 8, 4, 4,
// 4 and 12 digits joined by hyphens, as Postgres and pgx write a uuid.
func appendUUID(dst []byte, u [16]byte) []byte {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	hex.Encode(b[9:13], u[4:6])
	hex.Encode(b[14:18], u[6:8])
	hex.Encode(b[19:23], u[8:10])
	hex.Encode(b[24:36], u[10:16])
	b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
	return append(dst, b[:]...)
}

// taskKey returns a task's position in newest-first lists.
func taskKey(t *Task) (time.Time, string) { return t.CreatedAt, t.ID }
