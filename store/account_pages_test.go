package store_test

import (
	"reflect"
	"testing"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// memberPage reads one page of ws's members as viewer through MemberLists
// with a single list (its one-key statement).
func memberPage(t *testing.T, db *store.DB, viewer, ws string, first int, after *string) *store.MemberConnection {
	t.Helper()
	p, err := store.NewPage(&first, first, after, store.MembersScope(ws))
	if err != nil {
		t.Fatal(err)
	}
	pages, err := db.MemberLists(t.Context(), viewer, []store.MemberList{{WorkspaceID: ws, Page: p}})
	if err != nil {
		t.Fatal(err)
	}
	return pages[0]
}

// memberIDs returns the user ids of members, in order.
func memberIDs(ms []*store.Member) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.UserID
	}
	return ids
}

// Paging through a workspace's members with MemberLists visits every member
// once, in the order of MembersByWorkspaces (newest joined first, then user
// id, here with 250 members that joined in one statement and so at one
// time), and the last page says there is no next one. Several lists in one
// call (the unnest form) answer what each alone answers; a workspace the
// viewer is not in, or a malformed id, gets no page; a cursor of one
// workspace's members is refused by another's.
func TestMemberListsPageInOrder(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	owner, stranger := mkUser(t, db, "owner@example.com"), mkUser(t, db, "stranger@example.com")
	big, err := db.CreateWorkspace(ctx, owner, "Big")
	if err != nil {
		t.Fatal(err)
	}
	small, err := db.CreateWorkspace(ctx, owner, "Small")
	if err != nil {
		t.Fatal(err)
	}
	fillMembers(t, db, big.ID, 250)
	fillMembers(t, db, small.ID, 3)
	all, err := db.MembersByWorkspaces(ctx, owner.ID, []string{big.ID})
	if err != nil || len(all[big.ID]) != 251 {
		t.Fatalf("MembersByWorkspaces = %d members, %v", len(all[big.ID]), err)
	}

	var seen []*store.Member
	var after *string
	pages := 0
	for {
		page := memberPage(t, db, owner.ID, big.ID, 100, after)
		pages++
		seen = append(seen, page.Nodes()...)
		if !page.PageInfo.HasNextPage {
			if len(page.Edges) == 0 {
				t.Fatal("an empty last page")
			}
			break
		}
		if pages > 3 {
			t.Fatal("more than 3 pages of 100 for 251 members")
		}
		after = page.PageInfo.EndCursor()
	}
	if pages != 3 || !reflect.DeepEqual(memberIDs(seen), memberIDs(all[big.ID])) {
		t.Fatalf("%d pages, %d members, not the members of MembersByWorkspaces in order", pages, len(seen))
	}
	for i, m := range seen {
		if !reflect.DeepEqual(m, all[big.ID][i]) {
			t.Fatalf("member %d = %+v, want %+v", i, m, all[big.ID][i])
		}
	}

	// Several lists in one statement; the viewer's page past the end is empty.
	first2, _ := store.NewPage(nil, 2, nil, store.MembersScope(big.ID))
	firstSmall, _ := store.NewPage(nil, 20, nil, store.MembersScope(small.ID))
	last := memberPage(t, db, owner.ID, big.ID, 100, after)
	past := last.Edges[len(last.Edges)-1].Cursor()
	end, err := store.NewPage(nil, 20, &past, store.MembersScope(big.ID))
	if err != nil {
		t.Fatal(err)
	}
	lists, err := db.MemberLists(ctx, owner.ID, []store.MemberList{{WorkspaceID: big.ID, Page: first2},
		{WorkspaceID: "junk", Page: first2}, {WorkspaceID: small.ID, Page: firstSmall}, {WorkspaceID: big.ID, Page: end}})
	if err != nil {
		t.Fatal(err)
	}
	if lists[0] == nil || !reflect.DeepEqual(memberIDs(lists[0].Nodes()), memberIDs(all[big.ID][:2])) || !lists[0].PageInfo.HasNextPage {
		t.Fatalf("first list = %+v", lists[0])
	}
	if lists[1] != nil {
		t.Fatalf("a malformed workspace id got a page: %+v", lists[1])
	}
	if lists[2] == nil || len(lists[2].Edges) != 4 || lists[2].PageInfo.HasNextPage || lists[2].Nodes()[0].WorkspaceID != small.ID {
		t.Fatalf("small workspace's list = %+v", lists[2])
	}
	if lists[3] == nil || len(lists[3].Edges) != 0 || lists[3].PageInfo.HasNextPage || lists[3].PageInfo.EndCursor() != nil {
		t.Fatalf("page past the end = %+v", lists[3])
	}

	// A stranger gets no page, alone or beside others.
	if page := memberPage(t, db, stranger.ID, big.ID, 20, nil); page != nil {
		t.Fatalf("a stranger's page = %+v", page)
	}
	lists, err = db.MemberLists(ctx, stranger.ID, []store.MemberList{{WorkspaceID: big.ID, Page: first2}, {WorkspaceID: small.ID, Page: firstSmall}})
	if err != nil || lists[0] != nil || lists[1] != nil {
		t.Fatalf("a stranger's lists = %v, %v", lists, err)
	}

	// A cursor belongs to its workspace's list.
	c := firstPageCursor(t, db, owner.ID, big.ID)
	if _, err := store.NewPage(nil, 20, &c, store.MembersScope(small.ID)); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Fatalf("another workspace's cursor: %v, want BAD_USER_INPUT", err)
	}
	if _, err := store.NewPage(nil, 20, &c, store.ProjectsScope(big.ID, false)); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Fatalf("a member cursor for projects: %v, want BAD_USER_INPUT", err)
	}
}

// firstPageCursor returns the end cursor of the first page of 2 of ws's members.
func firstPageCursor(t *testing.T, db *store.DB, viewer, ws string) string {
	t.Helper()
	return *memberPage(t, db, viewer, ws, 2, nil).PageInfo.EndCursor()
}

// workspacePages pages through userID's workspaces as viewer, first at a
// time, with single lists, and returns them.
func workspacePages(t *testing.T, db *store.DB, viewer, userID string, first int) []*store.Workspace {
	t.Helper()
	var out []*store.Workspace
	var after *string
	for range 100 {
		p, err := store.NewPage(&first, first, after, store.WorkspacesScope(userID))
		if err != nil {
			t.Fatal(err)
		}
		pages, err := db.WorkspaceLists(t.Context(), viewer, []store.WorkspaceList{{UserID: userID, Page: p}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pages[0].Nodes()...)
		if !pages[0].PageInfo.HasNextPage {
			return out
		}
		after = pages[0].PageInfo.EndCursor()
	}
	t.Fatal("no last page")
	return nil
}

// WorkspaceLists pages exactly what WorkspacesOfUsers lists, in its order
// (newest first, then id; here workspaces made in one statement, so at one
// time), with the viewer's role: all of one's own workspaces on oneself,
// the shared ones on someone else, none to a stranger or on a malformed id;
// several lists in one call answer what each alone answers.
func TestWorkspaceListsFollowWorkspacesOfUsers(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	ann, bob, stranger := mkUser(t, db, "ann@example.com"), mkUser(t, db, "bob@example.com"), mkUser(t, db, "stranger@example.com")
	// Ann owns 45 workspaces, Bob is a VIEWER in 12 of them and owns 3 more.
	if _, err := db.Pool.Exec(ctx, `WITH w AS (INSERT INTO workspaces (name) SELECT 'w' || g FROM generate_series(1, 48) g RETURNING id, name),
		a AS (INSERT INTO members (workspace_id, user_id, role) SELECT id, $1, 'OWNER' FROM w WHERE substr(name, 2)::int <= 45)
		INSERT INTO members (workspace_id, user_id, role)
		SELECT id, $2, CASE WHEN substr(name, 2)::int > 45 THEN 'OWNER' ELSE 'VIEWER' END FROM w WHERE substr(name, 2)::int > 33`,
		ann.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateWorkspace(ctx, ann, "Newest"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		viewer, user *store.User
		want         int
	}{
		{"ann on herself", ann, ann, 46},
		{"bob on ann", bob, ann, 12},
		{"ann on bob", ann, bob, 12},
		{"bob on himself", bob, bob, 15},
		{"a stranger on ann", stranger, ann, 0},
	} {
		want, err := db.WorkspacesOfUsers(ctx, c.viewer.ID, []string{c.user.ID})
		if err != nil {
			t.Fatal(err)
		}
		got := workspacePages(t, db, c.viewer.ID, c.user.ID, 5)
		if len(got) != c.want || (c.want > 0 && !reflect.DeepEqual(got, want[c.user.ID])) {
			t.Errorf("%s: %d workspaces, want the %d of WorkspacesOfUsers in order", c.name, len(got), len(want[c.user.ID]))
		}
	}

	p, _ := store.NewPage(nil, 20, nil, "")
	lists := []store.WorkspaceList{{UserID: ann.ID}, {UserID: "junk"}, {UserID: bob.ID}, {UserID: stranger.ID}}
	for i := range lists {
		lists[i].Page, _ = store.NewPage(nil, 10, nil, store.WorkspacesScope(lists[i].UserID))
	}
	pages, err := db.WorkspaceLists(ctx, bob.ID, lists)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lists {
		alone, err := db.WorkspaceLists(ctx, bob.ID, []store.WorkspaceList{l})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pages[i].Nodes(), alone[0].Nodes()) || pages[i].PageInfo.HasNextPage != alone[0].PageInfo.HasNextPage {
			t.Errorf("list %d in a batch = %d workspaces, alone %d", i, len(pages[i].Edges), len(alone[0].Edges))
		}
	}
	if len(pages[0].Edges) != 10 || !pages[0].PageInfo.HasNextPage || len(pages[1].Edges) != 0 || len(pages[3].Edges) != 0 {
		t.Errorf("batch = %d, %d, %d, %d workspaces", len(pages[0].Edges), len(pages[1].Edges), len(pages[2].Edges), len(pages[3].Edges))
	}
	// No viewer: empty pages, no statement to fail.
	pages, err = db.WorkspaceLists(ctx, "", []store.WorkspaceList{{UserID: ann.ID, Page: p}})
	if err != nil || len(pages[0].Edges) != 0 {
		t.Fatalf("no viewer: %v, %v", pages, err)
	}
}
