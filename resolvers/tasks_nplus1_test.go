package resolvers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/99designs/gqlgen/client"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/store"
	"taskflow/store/storetest"
)

// statementCounter is a pgx QueryTracer counting the statements sent to Postgres.
type statementCounter struct {
	mu    sync.Mutex
	sqls  []string
	trips int
}

// TraceQueryStart records a statement sent on its own: a round trip.
func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sqls = append(c.sqls, strings.Join(strings.Fields(data.SQL), " "))
	c.trips++
	return ctx
}

// TraceQueryEnd does nothing.
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch, whose statements go in one round trip.
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	return ctx
}

// TraceBatchQuery records a statement of a batch.
func (c *statementCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sqls = append(c.sqls, strings.Join(strings.Fields(data.SQL), " "))
}

// TraceBatchEnd does nothing.
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// roundTrips returns the statements sent alone and the batches sent since the
// last reset.
func (c *statementCounter) roundTrips() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

// reset forgets what was counted.
func (c *statementCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sqls, c.trips = nil, 0
}

// statements returns what was counted since the last reset.
func (c *statementCounter) statements() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sqls...)
}

// countedEnv is an apitest Env whose database pool counts its statements.
func countedEnv(t *testing.T) (*apitest.Env, *statementCounter) {
	t.Helper()
	counter := &statementCounter{}
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), nil)
	bs := apitest.OpenBlobs(t, db, nil)
	counter.reset()
	h := httpapi.NewHandler(httpapi.Options{DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Limiter: apitest.Unlimited(),
		Blobs: bs})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &apitest.Env{DB: db, Blobs: bs, Handler: h, Client: client.New(h), Server: srv}, counter
}

// maxStatements is the bound on the statements of the page query below, whatever
// the number of tasks: token, task, project, task page, users, comment pages,
// comment tasks, with room for a loader batch split in two by scheduling.
const maxStatements = 14

// A page of tasks with their project, assignee, creator and 20 comments with
// their authors and tasks costs a small constant number of statements: the same
// bound for 10 tasks as for 100 (2,000 comments).
func TestTaskPageStatementsDoNotGrow(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	w := newWorld(t, env)
	counts := map[int]int{}
	for _, n := range []int{10, 100} {
		project := newProject(t, env, w.workspace, "P")
		_, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO tasks (project_id, workspace_id, title, assignee_id, created_by)
			SELECT $1, $2, 'task ' || g, (ARRAY[$3, $4, $5]::uuid[])[1 + g % 3], (ARRAY[$3, $6]::uuid[])[1 + g % 2]
			FROM generate_series(1, $7::int) g`,
			project, w.workspace, w.member.ID, w.admin.ID, w.viewer.ID, w.owner.ID, n)
		if err != nil {
			t.Fatal(err)
		}
		_, err = env.DB.Pool.Exec(t.Context(), `INSERT INTO comments (task_id, workspace_id, author_id, body)
			SELECT t.id, t.workspace_id, (ARRAY[$2, $3, $4]::uuid[])[1 + g % 3], 'comment ' || g
			FROM tasks t, generate_series(1, 20) g WHERE t.project_id = $1`,
			project, w.member.ID, w.admin.ID, w.owner.ID)
		if err != nil {
			t.Fatal(err)
		}
		anchor := anyTask(t, env, project)

		counter.reset()
		var out struct {
			Task struct {
				Project struct {
					Tasks struct {
						Nodes []struct {
							ID        string
							Project   struct{ ID, Name string }
							Assignee  *struct{ ID, Name string }
							CreatedBy struct{ ID, Name string }
							Comments  struct {
								Nodes []struct {
									ID     string
									Author struct{ ID, Name string }
									Task   struct{ ID string }
								}
							}
						}
					}
				}
			}
		}
		r := call(t, env, w.viewer, `query($id: ID!, $n: Int!) { task(id: $id) { project { tasks(first: $n) { nodes {
			id project { id name } assignee { id name } createdBy { id name }
			comments(first: 20) { nodes { id author { id name } task { id } } } } } } } }`,
			map[string]any{"id": anchor, "n": n})
		stmts := counter.statements()
		if len(r.Body.Errors) > 0 {
			t.Fatalf("errors: %s", r.Raw)
		}
		if err := json.Unmarshal(r.Body.Data, &out); err != nil {
			t.Fatal(err)
		}
		nodes := out.Task.Project.Tasks.Nodes
		if len(nodes) != n {
			t.Fatalf("%d tasks, want %d", len(nodes), n)
		}
		for _, task := range nodes {
			if task.Project.ID != project || task.Assignee == nil || task.Assignee.Name == "" || task.CreatedBy.Name == "" ||
				len(task.Comments.Nodes) != 20 {
				t.Fatalf("task = %+v", task)
			}
			for _, c := range task.Comments.Nodes {
				if c.Author.Name == "" || c.Task.ID != task.ID {
					t.Fatalf("comment = %+v", c)
				}
			}
		}
		counts[n] = len(stmts)
		checkStatements(t, fmt.Sprintf("%d tasks", n), stmts, maxStatements)
	}
	t.Logf("statements: %v", counts)
}

// anyTask returns the id of a task of the project.
func anyTask(t *testing.T, env *apitest.Env, project string) string {
	t.Helper()
	var id string
	if err := env.DB.Pool.QueryRow(t.Context(), `SELECT id FROM tasks WHERE project_id = $1 LIMIT 1`, project).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// checkStatements fails when what took more than most statements, listing them.
func checkStatements(t *testing.T, what string, stmts []string, most int) {
	t.Helper()
	if len(stmts) <= most {
		return
	}
	for i, s := range stmts {
		stmts[i] = s[:min(len(s), 100)]
	}
	t.Fatalf("%s took %d statements, want at most %d:\n%s", what, len(stmts), most, strings.Join(stmts, "\n"))
}

// task(id) with its assignee, and project(id) with a page of its tasks, are the
// commonest reads: one round trip each beyond the token lookup (which the
// instance remembers, store.SessionTTL). The project and its page are two
// statements sent together (store.ProjectWithTaskPage), whether the page's
// arguments are literals, variables or defaults; a selection the lookahead
// cannot read (two different pages) takes a round trip more, and answers the
// same. A search and the viewer's membership are one round trip too.
func TestLoneReadsAreOneStatement(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	w := newWorld(t, env)
	project := newProject(t, env, w.workspace, "P")
	if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO tasks (project_id, workspace_id, title, assignee_id, created_by)
		VALUES ($1, $2, 'one', $3, $3)`, project, w.workspace, w.member.ID); err != nil {
		t.Fatal(err)
	}
	task := anyTask(t, env, project)
	for _, c := range []struct {
		query       string
		vars        map[string]any
		want        string
		most, trips int
	}{
		{`query($id: ID!) { task(id: $id) { id title assignee { id name } } }`, map[string]any{"id": task}, w.member.ID, 1, 1},
		{`query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title } } } }`, map[string]any{"id": project}, task, 2, 1},
		{`query($id: ID!) { project(id: $id) { name tasks { nodes { id title } } } }`, map[string]any{"id": project}, task, 2, 1},
		{`query($id: ID!, $n: Int, $s: TaskStatus) { project(id: $id) { tasks(first: $n, status: $s) { nodes { id } } } }`,
			map[string]any{"id": project, "n": 5, "s": "TODO"}, task, 2, 1},
		{`query($id: ID!) { project(id: $id) { ...P } } fragment P on Project { tasks(first: 3) { nodes { id } } }`,
			map[string]any{"id": project}, task, 2, 1},
		{`query($id: ID!) { project(id: $id) { a: tasks(first: 2) { nodes { id } } b: tasks(first: 3) { nodes { id } } } }`,
			map[string]any{"id": project}, task, 3, 3},
		{`query($ws: ID!) { searchTasks(workspaceId: $ws, query: "one", first: 20) { nodes { id } } }`,
			map[string]any{"ws": w.workspace}, task, 2, 1},
		// The page's assignees and comments (with their authors) come with it.
		{`query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title assignee { id name }
			comments(first: 5) { nodes { id body author { id name } } } } pageInfo { hasNextPage } } } }`,
			map[string]any{"id": project}, w.member.ID, 4, 1},
		{`query($id: ID!) { project(id: $id) { tasks { edges { node { assignee { id } comments { edges { node { id } } } } } } } }`,
			map[string]any{"id": project}, w.member.ID, 4, 1},
		// Two different pages of comments: read after the page (with its
		// assignees), a statement each.
		{`query($id: ID!) { project(id: $id) { tasks { nodes { assignee { id } a: comments(first: 1) { nodes { id } } b: comments(first: 2) { nodes { id } } } } } }`,
			map[string]any{"id": project}, w.member.ID, 5, 3},
	} {
		counter.reset()
		r := call(t, env, w.viewer, c.query, c.vars)
		if len(r.Body.Errors) > 0 || !strings.Contains(string(r.Body.Data), c.want) {
			t.Fatalf("%s: %s", c.query, r.Raw)
		}
		var stmts []string
		for _, s := range counter.statements() {
			if !strings.Contains(s, "FROM tokens t") {
				stmts = append(stmts, s)
			}
		}
		checkStatements(t, c.query, stmts, c.most)
		trips := counter.roundTrips() - (len(counter.statements()) - len(stmts))
		if trips != c.trips {
			t.Errorf("%s: %d round trips beyond the token's, want %d", c.query, trips, c.trips)
		}
	}
}

// Comments whose authors are asked for are read with their authors: the page
// of tasks, then the comments with their authors, and no read of users after
// them, however the selection asks (nodes, edges, a fragment). Without the
// authors, the comments are read without them.
func TestCommentAuthorsComeWithTheirComments(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	w := newWorld(t, env)
	project := newProject(t, env, w.workspace, "P")
	for i, author := range []apitest.User{w.member, w.admin, w.member} {
		if _, err := env.DB.Pool.Exec(t.Context(), `WITH t AS (INSERT INTO tasks (project_id, workspace_id, title, created_by)
			VALUES ($1, $2, $3, $4) RETURNING id)
			INSERT INTO comments (task_id, workspace_id, author_id, body) SELECT t.id, $2, $4, 'a comment' FROM t`,
			project, w.workspace, fmt.Sprintf("task %d", i), author.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, selection string
		joined          bool
	}{
		{"nodes", `nodes { body author { name } }`, true},
		{"edges", `edges { node { body author { name } } }`, true},
		{"fragment", `nodes { ...C }`, true},
		{"no authors", `nodes { body }`, false},
	} {
		query := `query($id: ID!) { project(id: $id) { tasks(first: 10) { nodes { comments(first: 5) { ` + c.selection + ` } } } } }`
		if strings.Contains(c.selection, "...C") {
			query += ` fragment C on Comment { body author { name } }`
		}
		counter.reset()
		r := call(t, env, w.viewer, query, map[string]any{"id": project})
		if len(r.Body.Errors) > 0 {
			t.Fatalf("%s: %s", c.name, r.Raw)
		}
		if c.joined && (strings.Count(string(r.Body.Data), `"name":"Member"`) != 2 || strings.Count(string(r.Body.Data), `"name":"Admin"`) != 1) {
			t.Fatalf("%s: authors wrong: %s", c.name, r.Body.Data)
		}
		var users, joins int
		for _, s := range counter.statements() {
			if strings.Contains(s, "FROM users u WHERE") {
				users++
			}
			if strings.Contains(s, "JOIN users u ON u.id = c.author_id") {
				joins++
			}
		}
		if users != 0 {
			t.Errorf("%s: %d reads of users after the comments, want 0:\n%s", c.name, users, strings.Join(counter.statements(), "\n"))
		}
		if want := map[bool]int{true: 1, false: 0}[c.joined]; joins != want {
			t.Errorf("%s: %d comment reads joined with their authors, want %d", c.name, joins, want)
		}
	}
}

// What project(id) reads with its page of tasks (assignees, first pages of
// comments, their authors) answers exactly what the loaders answer for the
// same page reached another way (task(id) { project { tasks } }, which has no
// lookahead): the tasks, their assignees (and none), their comments (none,
// fewer than the page, more than the page) with authors, cursors and pageInfo;
// a task beyond the page has no effect.
func TestTaskPageExtrasAnswerAsTheLoaders(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	w := newWorld(t, env)
	project := newProject(t, env, w.workspace, "P")
	// Oldest first: the page of 3 shows the last three, newest first.
	for i, c := range []struct {
		assignee *apitest.User
		comments []apitest.User
	}{
		{&w.admin, []apitest.User{w.member}}, // beyond the page
		{&w.member, []apitest.User{w.member, w.admin, w.owner, w.member}},
		{nil, nil},
		{&w.admin, []apitest.User{w.owner}},
	} {
		var assignee *string
		if c.assignee != nil {
			assignee = &c.assignee.ID
		}
		var task string
		if err := env.DB.Pool.QueryRow(t.Context(), `INSERT INTO tasks (project_id, workspace_id, title, assignee_id, created_by, created_at)
			VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 second') RETURNING id`,
			project, w.workspace, fmt.Sprintf("task %d", i), assignee, w.owner.ID, i).Scan(&task); err != nil {
			t.Fatal(err)
		}
		for j, author := range c.comments {
			if _, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO comments (task_id, workspace_id, author_id, body, created_at)
				VALUES ($1, $2, $3, $4, now() + $5 * interval '1 second')`, task, w.workspace, author.ID, fmt.Sprintf("c%d", j), j); err != nil {
				t.Fatal(err)
			}
		}
	}
	anchor := anyTask(t, env, project)
	for _, sel := range []string{
		`id title assignee { id name } comments(first: 2) { nodes { id body author { id name } } pageInfo { hasNextPage endCursor } }`,
		`assignee { email } comments(first: 3) { edges { cursor node { body author { name } } } }`,
		`comments { nodes { body } pageInfo { hasNextPage } }`,
		`assignee { id }`,
	} {
		page := `tasks(first: 3) { nodes { ` + sel + ` } pageInfo { hasNextPage endCursor } }`
		counter.reset()
		folded := call(t, env, w.viewer, `query($id: ID!) { project(id: $id) { `+page+` } }`, map[string]any{"id": project})
		trips := counter.roundTrips() - strings.Count(strings.Join(counter.statements(), "\n"), "FROM tokens t")
		loaded := call(t, env, w.viewer, `query($id: ID!) { task(id: $id) { project { `+page+` } } }`, map[string]any{"id": anchor})
		if len(folded.Body.Errors) > 0 || len(loaded.Body.Errors) > 0 {
			t.Fatalf("%s: %s %s", sel, folded.Raw, loaded.Raw)
		}
		var a struct{ Project json.RawMessage }
		var b struct {
			Task struct{ Project json.RawMessage }
		}
		if err := json.Unmarshal(folded.Body.Data, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(loaded.Body.Data, &b); err != nil {
			t.Fatal(err)
		}
		if string(a.Project) != string(b.Task.Project) {
			t.Errorf("%s:\nwith the page: %s\nby loaders:    %s", sel, a.Project, b.Task.Project)
		}
		if trips != 1 {
			t.Errorf("%s: %d round trips beyond the token's, want 1", sel, trips)
		}
	}
}
