package loadgen

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"taskflow/auth"
	"taskflow/store"
)

// searchWords are the words of fixture task titles; searchTasks looks for one.
var searchWords = []string{"deploy", "invoice", "login", "search", "report", "backup", "billing", "mobile"}

// Fixtures is the data the scenarios read and write: one workspace whose
// members are all ADMIN (so every user may read the audit log), a "board"
// project of tasks with assignees and comments (read by the page scenario), an
// "inbox" project that createTask fills, and the audit events all of that wrote.
type Fixtures struct {
	Users       []FixtureUser
	WorkspaceID string
	BoardID     string // project read by the page scenario
	InboxID     string // project createTask writes to
	TaskIDs     []string
	// Known holds every fixture id, so raw replays know which UUIDs to keep.
	Known map[string]bool
}

// FixtureUser is a signed-in member of the fixture workspace.
type FixtureUser struct {
	ID, Token string
}

// priorKeysPerUser is how many idempotency keys of earlier calls each fixture
// user has (50,000 in all for 200 users: a day of keys at about one keyed
// mutation every two seconds).
const priorKeysPerUser = 250

// EarlierKeys gives every user perUser idempotency keys of earlier calls: a
// server that has been up a while holds a day of them. From an empty table a
// run measures a cold start instead: each pooled connection caches the plan of
// the key's record read made while the table was empty, a sequential scan, and
// keeps it for the whole run as the table grows (autoanalyze, which would
// replace it, comes a minute later). Run ANALYZE after it.
func EarlierKeys(ctx context.Context, db *store.DB, perUser int) error {
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys (user_id, key, field, fingerprint, result, created_at, expires_at)
		SELECT u.id, 'earlier-' || g, 'createTask', sha256(convert_to(g::text, 'UTF8')), '{"id": "earlier"}',
			now() - g * interval '1 second', now() + interval '1 day' - g * interval '1 second'
		FROM users u CROSS JOIN generate_series(1, $1) g`, perUser); err != nil {
		return fmt.Errorf("fixture idempotency keys: %w", err)
	}
	return nil
}

// FixtureSizes are the amounts of fixture data.
type FixtureSizes struct {
	Users, Tasks, CommentsPerTask int
}

// Prepare writes the fixtures into the migrated database of db: users and tokens
// by SQL (no argon2 on the way), the workspace, projects, tasks and comments
// through the store, so they come with their audit events.
func Prepare(ctx context.Context, db *store.DB, sz FixtureSizes) (*Fixtures, error) {
	f := &Fixtures{Known: map[string]bool{}}
	for i := range sz.Users {
		tok := auth.NewToken()
		var id string
		err := db.Pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (email, name, password_hash) VALUES ($1, $2, 'x') RETURNING id)
			INSERT INTO tokens (token_hash, user_id, expires_at) SELECT $3, id, now() + interval '1 day' FROM u RETURNING user_id`,
			fmt.Sprintf("load%d@example.com", i), fmt.Sprintf("Load User %d", i), auth.HashToken(tok)).Scan(&id)
		if err != nil {
			return nil, fmt.Errorf("fixture user: %w", err)
		}
		f.Users = append(f.Users, FixtureUser{ID: id, Token: tok})
		f.Known[id] = true
	}
	if err := EarlierKeys(ctx, db, priorKeysPerUser); err != nil {
		return nil, err
	}
	owner := &store.User{ID: f.Users[0].ID, Name: "Load User 0", Email: "load0@example.com"}
	ws, err := db.CreateWorkspace(ctx, owner, "Load")
	if err != nil {
		return nil, fmt.Errorf("fixture workspace: %w", err)
	}
	f.WorkspaceID = ws.ID
	f.Known[ws.ID] = true
	ids := make([]string, 0, len(f.Users)-1)
	for _, u := range f.Users[1:] {
		ids = append(ids, u.ID)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) SELECT $1, unnest($2::uuid[]), 'ADMIN'`, ws.ID, ids); err != nil {
		return nil, fmt.Errorf("fixture members: %w", err)
	}
	board, err := db.CreateProject(ctx, owner, ws.ID, "Board", nil)
	if err != nil {
		return nil, fmt.Errorf("fixture project: %w", err)
	}
	inbox, err := db.CreateProject(ctx, owner, ws.ID, "Inbox", nil)
	if err != nil {
		return nil, fmt.Errorf("fixture project: %w", err)
	}
	f.BoardID, f.InboxID = board.ID, inbox.ID
	f.Known[board.ID], f.Known[inbox.ID] = true, true

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range sz.Tasks {
		g.Go(func() error {
			assignee := f.Users[i%len(f.Users)].ID
			desc := fmt.Sprintf("Fixture task %d: %s the %s", i, searchWords[(i+3)%len(searchWords)], searchWords[(i+5)%len(searchWords)])
			t, err := db.CreateTask(gctx, owner, store.NewTask{ProjectID: board.ID,
				Title:       fmt.Sprintf("%s %s %d", searchWords[i%len(searchWords)], searchWords[(i+1)%len(searchWords)], i),
				Description: &desc, AssigneeID: &assignee})
			if err != nil {
				return fmt.Errorf("fixture task: %w", err)
			}
			for j := range sz.CommentsPerTask {
				author := &store.User{ID: f.Users[(i+j)%len(f.Users)].ID}
				if _, err := db.AddComment(gctx, author, t.ID, fmt.Sprintf("Comment %d on task %d", j, i)); err != nil {
					return fmt.Errorf("fixture comment: %w", err)
				}
			}
			mu.Lock()
			f.TaskIDs = append(f.TaskIDs, t.ID)
			f.Known[t.ID] = true
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return f, nil
}
