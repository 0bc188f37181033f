package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
	"taskflow/store/storetest"
)

// A one-key load (project(id), a task's assignee, project(id) { tasks },
// workspace(id) { membersConnection }, me { workspacesConnection }) keeps
// one generic plan of its statement, instead of being planned again at every
// call as a statement with an array parameter is (80-200 µs of Postgres CPU a
// call: docs/decisions/2026-12-01-one-key-one-plan.md). Read from
// pg_prepared_statements on the one connection that ran them all.
func TestOneKeyLoadsKeepAGenericPlan(t *testing.T) {
	t.Parallel()
	pool := storetest.PoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	db := store.New(pool, nil)
	ctx := context.Background()
	alice := mkUser(t, db, "plans@example.com")
	ws, err := db.CreateWorkspace(ctx, alice, "W")
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, alice, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	task, err := db.CreateTask(ctx, alice, store.NewTask{ProjectID: p.ID, Title: "t", AssigneeID: &alice.ID})
	if err != nil {
		t.Fatal(err)
	}
	key, err := store.NewTaskPageKey(p.ID, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	members, err := store.NewPage(nil, 20, nil, store.MembersScope(ws.ID))
	if err != nil {
		t.Fatal(err)
	}
	workspaces, err := store.NewPage(nil, 20, nil, store.WorkspacesScope(alice.ID))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if m, err := db.UsersByIDs(ctx, []string{alice.ID}); err != nil || m[alice.ID] == nil {
			t.Fatalf("UsersByIDs = %v, %v", m, err)
		}
		if m, err := db.ProjectsByIDs(ctx, alice.ID, []string{p.ID}); err != nil || m[p.ID] == nil {
			t.Fatalf("ProjectsByIDs = %v, %v", m, err)
		}
		if m, err := db.WorkspacesByIDs(ctx, alice.ID, []string{ws.ID}); err != nil || m[ws.ID] == nil {
			t.Fatalf("WorkspacesByIDs = %v, %v", m, err)
		}
		if pages, err := db.TaskPages(ctx, []store.TaskPageKey{key}); err != nil || len(pages[0].Nodes()) != 1 {
			t.Fatalf("TaskPages = %v, %v", pages, err)
		}
		if pages, err := db.MemberLists(ctx, alice.ID, []store.MemberList{{WorkspaceID: ws.ID, Page: members}}); err != nil || len(pages[0].Nodes()) != 1 {
			t.Fatalf("MemberLists = %v, %v", pages, err)
		}
		if pages, err := db.WorkspaceLists(ctx, alice.ID, []store.WorkspaceList{{UserID: alice.ID, Page: workspaces}}); err != nil || len(pages[0].Nodes()) != 1 {
			t.Fatalf("WorkspaceLists = %v, %v", pages, err)
		}
		got, assignee, err := db.TaskWithAssignee(ctx, alice, task.ID)
		if err != nil || got.ID != task.ID || assignee == nil || assignee.ID != alice.ID || assignee.Email != alice.Email {
			t.Fatalf("TaskWithAssignee = %+v, %+v, %v", got, assignee, err)
		}
	}
	plans := map[string][2]int{} // the statement's distinctive text: generic plans, custom plans
	for _, s := range []string{"FROM users u WHERE", "FROM projects p", "FROM workspaces w", "ORDER BY t.created_at DESC", "LEFT JOIN users u",
		"FROM members v", "(w.created_at, w.id) <"} {
		var generic, custom int
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE strpos(statement, $1) > 0`, s).Scan(&generic, &custom); err != nil {
			t.Fatal(err)
		}
		plans[s] = [2]int{generic, custom}
		// Postgres tries five custom plans before it compares them with the
		// generic one.
		if generic < 5 || custom > 5 {
			t.Errorf("%q: %d generic and %d custom plans in 10 calls, want the generic plan kept", s, generic, custom)
		}
	}
	t.Logf("generic, custom plans: %v", plans)
}
