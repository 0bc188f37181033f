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
// "inbox" project that createTask fills, and the audit events all of that
// wrote; and more workspaces, each with an inbox, for createTaskSpread.
type Fixtures struct {
	Users []FixtureUser
	// Searchers are the users searchTasks is spread over, enough that none
	// reaches the endpoint limit of searchTasks in a run (see searchers).
	Searchers   []FixtureUser
	WorkspaceID string
	BoardID     string // project read by the page scenario
	InboxID     string // project createTask writes to
	TaskIDs     []string
	// Spread are the workspaces of createTaskSpread, one per client; every
	// user is an ADMIN of each.
	Spread []SpreadWorkspace
	// Known holds every fixture id, so raw replays know which UUIDs to keep.
	Known map[string]bool
}

// SpreadWorkspace is a workspace of createTaskSpread and its inbox project.
type SpreadWorkspace struct {
	WorkspaceID, InboxID string
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
	// Spread is the number of createTaskSpread's workspaces.
	Spread int
	// Searchers is the number of users searchTasks is spread over.
	Searchers int
}

// signedUp creates n users with tokens by SQL (no argon2 on the way), e-mail
// <prefix><i>@example.com and name "<name> <i>", in one statement.
func signedUp(ctx context.Context, db *store.DB, prefix, name string, n int) ([]FixtureUser, error) {
	emails, names, hashes, tokens := make([]string, n), make([]string, n), make([][]byte, n), make([]string, n)
	for i := range n {
		emails[i], names[i] = fmt.Sprintf("%s%d@example.com", prefix, i), fmt.Sprintf("%s %d", name, i)
		tokens[i] = auth.NewToken()
		hashes[i] = auth.HashToken(tokens[i])
	}
	rows, err := db.Pool.Query(ctx, `WITH u AS (
			INSERT INTO users (email, name, password_hash) SELECT e, n, 'x' FROM unnest($1::text[], $2::text[]) AS x(e, n)
			RETURNING id, email)
		INSERT INTO tokens (token_hash, user_id, expires_at)
			SELECT t.h, u.id, now() + interval '1 day' FROM u JOIN unnest($1::text[], $3::bytea[]) AS t(e, h) ON t.e = u.email
		RETURNING user_id, token_hash`, emails, names, hashes)
	if err != nil {
		return nil, fmt.Errorf("fixture users: %w", err)
	}
	byHash := map[string]string{}
	for rows.Next() {
		var id string
		var hash []byte
		if err := rows.Scan(&id, &hash); err != nil {
			rows.Close()
			return nil, fmt.Errorf("fixture users: %w", err)
		}
		byHash[string(hash)] = id
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fixture users: %w", err)
	}
	out := make([]FixtureUser, n)
	for i := range n {
		out[i] = FixtureUser{ID: byHash[string(hashes[i])], Token: tokens[i]}
	}
	return out, nil
}

// Prepare writes the fixtures into the migrated database of db: users and tokens
// by SQL (no argon2 on the way), the workspace, projects, tasks and comments
// through the store, so they come with their audit events.
func Prepare(ctx context.Context, db *store.DB, sz FixtureSizes) (*Fixtures, error) {
	f := &Fixtures{Known: map[string]bool{}}
	var err error
	if f.Users, err = signedUp(ctx, db, "load", "Load User", sz.Users); err != nil {
		return nil, err
	}
	for _, u := range f.Users {
		f.Known[u.ID] = true
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
	if f.Searchers, err = signedUp(ctx, db, "search", "Searcher", sz.Searchers); err != nil {
		return nil, err
	}
	for _, u := range f.Searchers {
		ids = append(ids, u.ID)
	}
	if err := admins(ctx, db, ws.ID, ids); err != nil {
		return nil, err
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
	for i := range sz.Spread {
		ws, err := db.CreateWorkspace(ctx, owner, fmt.Sprintf("Spread %d", i))
		if err != nil {
			return nil, fmt.Errorf("fixture workspace: %w", err)
		}
		if err := admins(ctx, db, ws.ID, ids); err != nil {
			return nil, err
		}
		inbox, err := db.CreateProject(ctx, owner, ws.ID, "Inbox", nil)
		if err != nil {
			return nil, fmt.Errorf("fixture project: %w", err)
		}
		f.Spread = append(f.Spread, SpreadWorkspace{WorkspaceID: ws.ID, InboxID: inbox.ID})
		f.Known[ws.ID], f.Known[inbox.ID] = true, true
	}

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

// admins makes users ADMIN members of workspace ws.
func admins(ctx context.Context, db *store.DB, ws string, users []string) error {
	if _, err := db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) SELECT $1, unnest($2::uuid[]), 'ADMIN'`, ws, users); err != nil {
		return fmt.Errorf("fixture members: %w", err)
	}
	return nil
}
