package resolvers_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"taskflow/httpapi/apitest"
)

// bigWorkspace is a workspace with many members: its OWNER, fillers added in
// one SQL statement (so they joined at one time and their order is by user
// id), then latecomers that joined one by one through an invitation.
type bigWorkspace struct {
	env   *apitest.Env
	id    string
	owner apitest.User
	// order is every member's user id in the documented order of
	// membersConnection, straight from SQL: newest joined first, then user id.
	order []string
}

// newBigWorkspace sets up a bigWorkspace of 1 + fillers + latecomers members.
func newBigWorkspace(t *testing.T, env *apitest.Env, fillers, latecomers int) *bigWorkspace {
	t.Helper()
	b := &bigWorkspace{env: env, owner: env.NewUser(t, "Owner")}
	b.id = mkWorkspace(t, env, b.owner)
	if _, err := env.DB.Pool.Exec(t.Context(), `WITH u AS (INSERT INTO users (email, name, password_hash)
			SELECT 'filler-' || g || '-' || gen_random_uuid() || '@example.com', 'Filler ' || g, 'x'
			FROM generate_series(1, $2::int) g RETURNING id)
		INSERT INTO members (workspace_id, user_id, role) SELECT $1, id, 'VIEWER' FROM u`, b.id, fillers); err != nil {
		t.Fatal(err)
	}
	for range latecomers {
		joinWorkspace(t, env, b.owner, b.id, env.NewUser(t, "Late"), "MEMBER")
	}
	rows, err := env.DB.Pool.Query(t.Context(), `SELECT user_id::text FROM members WHERE workspace_id = $1
		ORDER BY joined_at DESC, user_id DESC`, b.id)
	if err != nil {
		t.Fatal(err)
	}
	if b.order, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(b.order) != 1+fillers+latecomers {
		t.Fatalf("%d members (%v)", len(b.order), err)
	}
	return b
}

// memberPage is one page of membersConnection as the API answers it.
type memberPage struct {
	Edges []struct {
		Cursor string
		Node   pagedMember
	}
	Nodes    []pagedMember
	PageInfo struct {
		HasNextPage bool
		EndCursor   *string
	}
}

// pagedMember is a Member with its user.
type pagedMember struct {
	User     struct{ ID, Name string }
	Role     string
	JoinedAt string
}

const membersPageQuery = `query($w: ID!, $first: Int, $after: String) { workspace(id: $w) {
	membersConnection(first: $first, after: $after) {
		edges { cursor node { user { id name } role joinedAt } }
		nodes { user { id name } role joinedAt }
		pageInfo { hasNextPage endCursor } } } }`

// page reads one page of the workspace's members as u.
func (b *bigWorkspace) page(t *testing.T, u apitest.User, first int, after *string) *apitest.Response {
	t.Helper()
	vars := map[string]any{"w": b.id, "first": first}
	if after != nil {
		vars["after"] = *after
	}
	return post(t, b.env, u.Token, membersPageQuery, vars)
}

// Paging through a workspace of 250 members with first: 100 visits every
// member once, in the documented order (newest joined first, then user id:
// here 240 that joined at one time and 9 one by one after them), each edge's
// node being the nodes' item, endCursor the last edge's cursor, and the last
// page says there is no next one. The pages are those of the deprecated
// members list, cut in three.
func TestMembersConnectionVisitsEveryMemberInOrder(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	b := newBigWorkspace(t, env, 240, 9)
	if len(b.order) != 250 {
		t.Fatalf("%d members", len(b.order))
	}
	var seen []string
	var after *string
	pages := 0
	for {
		var d struct {
			Workspace struct{ MembersConnection memberPage }
		}
		mustData(t, b.page(t, b.owner, 100, after), &d)
		p := d.Workspace.MembersConnection
		pages++
		if len(p.Edges) != len(p.Nodes) || len(p.Edges) == 0 {
			t.Fatalf("page %d: %d edges, %d nodes", pages, len(p.Edges), len(p.Nodes))
		}
		for i, e := range p.Edges {
			if e.Node != p.Nodes[i] || e.Cursor == "" || e.Node.User.Name == "" || e.Node.JoinedAt == "" {
				t.Fatalf("page %d, edge %d: %+v, node %+v", pages, i, e, p.Nodes[i])
			}
			seen = append(seen, e.Node.User.ID)
		}
		if p.PageInfo.EndCursor == nil || *p.PageInfo.EndCursor != p.Edges[len(p.Edges)-1].Cursor {
			t.Fatalf("page %d: endCursor %v is not the last edge's cursor", pages, p.PageInfo.EndCursor)
		}
		if !p.PageInfo.HasNextPage {
			break
		}
		if pages == 3 {
			t.Fatal("a fourth page for 250 members")
		}
		after = p.PageInfo.EndCursor
	}
	if pages != 3 || !reflect.DeepEqual(seen, b.order) {
		t.Fatalf("%d pages visited %d members, not every member once in order", pages, len(seen))
	}

	var old struct {
		Workspace struct {
			Members []struct{ User struct{ ID string } }
		}
	}
	mustData(t, post(t, env, b.owner.Token, `query($w: ID!) { workspace(id: $w) { members { user { id } } } }`,
		map[string]any{"w": b.id}), &old)
	for i, m := range old.Workspace.Members {
		if i >= len(seen) || m.User.ID != seen[i] {
			t.Fatalf("members[%d] = %s, the pages' = %v", i, m.User.ID, seen[min(i, len(seen)-1)])
		}
	}
	if len(old.Workspace.Members) != len(seen) {
		t.Fatalf("members lists %d, the pages %d", len(old.Workspace.Members), len(seen))
	}
}

// A bad page of membersConnection is BAD_USER_INPUT, as for every other
// connection: a cursor that is not one, one of projects, invitations or
// another workspace's members, first outside 1..100. A non-member gets what
// non-members get for the workspace (NOT_FOUND, workspace null), whatever
// the page asked; an anonymous caller UNAUTHENTICATED.
func TestMembersConnectionRefusals(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	b := newBigWorkspace(t, env, 5, 0)
	other := newBigWorkspace(t, env, 5, 0)
	mkProject(t, env, b.owner, b.id, "P1")
	mkProject(t, env, b.owner, b.id, "P2")

	endCursor := func(query string, vars map[string]any, pick func(map[string]any) any) string {
		t.Helper()
		var d map[string]any
		mustData(t, post(t, env, b.owner.Token, query, vars), &d)
		c, ok := pick(d).(string)
		if !ok || c == "" {
			t.Fatalf("no end cursor in %v", d)
		}
		return c
	}
	pageInfo := func(d map[string]any, field string) any {
		w := d["workspace"].(map[string]any)
		return w[field].(map[string]any)["pageInfo"].(map[string]any)["endCursor"]
	}
	projects := endCursor(`query($w: ID!) { workspace(id: $w) { projects(first: 1) { pageInfo { endCursor } } } }`,
		map[string]any{"w": b.id}, func(d map[string]any) any { return pageInfo(d, "projects") })
	var otherPage struct {
		Workspace struct{ MembersConnection memberPage }
	}
	mustData(t, other.page(t, other.owner, 2, nil), &otherPage)
	otherMembers := *otherPage.Workspace.MembersConnection.PageInfo.EndCursor

	for _, c := range []struct {
		name  string
		first int
		after string
	}{
		{"not a cursor", 20, "garbage"},
		{"not base64 JSON", 20, "eyJ0IjoxfQ"},
		{"a projects cursor", 20, projects},
		{"another workspace's members cursor", 20, otherMembers},
		{"first 0", 0, ""},
		{"first 101", 101, ""},
		{"first -1", -1, ""},
	} {
		var after *string
		if c.after != "" {
			after = &c.after
		}
		r := b.page(t, b.owner, c.first, after)
		wantErrCode(t, r, "BAD_USER_INPUT")
		// A first out of range is refused whole before anything runs (no
		// data, as a validation error); a bad cursor by the field.
		want := `{"workspace":null}`
		if c.after == "" {
			want = ""
		}
		if string(r.Body.Data) != want {
			t.Errorf("%s: data %s, want %q", c.name, r.Body.Data, want)
		}
	}

	// A stranger: the workspace's own answer to a non-member, with or
	// without a page (a valid cursor of the workspace included).
	stranger := env.NewUser(t, "Stranger")
	var mine struct {
		Workspace struct{ MembersConnection memberPage }
	}
	mustData(t, b.page(t, b.owner, 2, nil), &mine)
	plain := post(t, env, stranger.Token, `query($w: ID!) { workspace(id: $w) { id } }`, map[string]any{"w": b.id})
	wantErrCode(t, plain, "NOT_FOUND")
	for _, after := range []*string{nil, mine.Workspace.MembersConnection.PageInfo.EndCursor} {
		r := b.page(t, stranger, 20, after)
		wantErrCode(t, r, "NOT_FOUND")
		if string(r.Body.Data) != string(plain.Body.Data) || r.Body.Errors[0]["message"] != plain.Body.Errors[0]["message"] {
			t.Errorf("a stranger's page: %s, the workspace alone: %s", r.Raw, plain.Raw)
		}
	}
	wantErrCode(t, b.page(t, apitest.User{}, 20, nil), "UNAUTHENTICATED")
}

// workspaceFields is what the workspace tests compare of each workspace.
const workspaceFields = `id name createdAt viewerRole`

// pagedWorkspace is a Workspace with workspaceFields.
type pagedWorkspace struct{ ID, Name, CreatedAt, ViewerRole string }

// workspacesThrough pages as u through one user's workspacesConnection
// (aliased page, with $first and $after) in query, which dig finds the user
// in, and returns every workspace of the pages and those of the deprecated
// workspaces (aliased all) in the first answer.
func workspacesThrough(t *testing.T, env *apitest.Env, u apitest.User, query string, vars map[string]any, first int,
	dig func(map[string]any) map[string]any) (paged, all []pagedWorkspace) {
	t.Helper()
	var after *string
	for pages := 1; ; pages++ {
		v := map[string]any{"first": first}
		for k, x := range vars {
			v[k] = x
		}
		if after != nil {
			v["after"] = *after
		}
		var d map[string]any
		mustData(t, post(t, env, u.Token, query, v), &d)
		user := dig(d)
		var page struct {
			Nodes    []pagedWorkspace
			Edges    []struct{ Node pagedWorkspace }
			PageInfo struct {
				HasNextPage bool
				EndCursor   *string
			}
		}
		raw, _ := json.Marshal(user["page"])
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatal(err)
		}
		if all == nil {
			raw, _ := json.Marshal(user["all"])
			if err := json.Unmarshal(raw, &all); err != nil {
				t.Fatal(err)
			}
		}
		for i, e := range page.Edges {
			if e.Node != page.Nodes[i] {
				t.Fatalf("edge %d = %+v, node %+v", i, e.Node, page.Nodes[i])
			}
		}
		paged = append(paged, page.Nodes...)
		if !page.PageInfo.HasNextPage {
			return paged, all
		}
		if pages > 100 {
			t.Fatal("no last page")
		}
		after = page.PageInfo.EndCursor
	}
}

// workspacesConnection shows exactly what the deprecated workspaces shows,
// in its order (newest first, then id; here 34 workspaces made at one time
// and one after), with the viewer's role: all of one's own on oneself, the
// shared ones on someone else (reached as a task's assignee), and only the
// one left to share once the other leaves the rest. A cursor of one user's
// list is refused on another's.
func TestWorkspacesConnectionShowsWhatWorkspacesShows(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ann, bob := env.NewUser(t, "Ann"), env.NewUser(t, "Bob")
	// Ann owns 30 workspaces; Bob is a MEMBER of 12 of them and owns 4 more.
	if _, err := env.DB.Pool.Exec(t.Context(), `WITH w AS (INSERT INTO workspaces (name)
			SELECT 'w' || g FROM generate_series(1, 34) g RETURNING id, substr(name, 2)::int AS n),
		a AS (INSERT INTO members (workspace_id, user_id, role) SELECT id, $1, 'OWNER' FROM w WHERE n <= 30)
		INSERT INTO members (workspace_id, user_id, role)
		SELECT id, $2, CASE WHEN n > 30 THEN 'OWNER' ELSE 'MEMBER' END FROM w WHERE n > 18`, ann.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	shared := mkWorkspace(t, env, ann) // the newest: Bob joins it through an invitation
	joinWorkspace(t, env, ann, shared, bob, "VIEWER")
	project := mkProject(t, env, ann, shared, "P")
	var task string
	if err := env.DB.Pool.QueryRow(t.Context(), `INSERT INTO tasks (project_id, workspace_id, title, assignee_id, created_by)
		VALUES ($1, $2, 't', $3, $4) RETURNING id`, project, shared, bob.ID, ann.ID).Scan(&task); err != nil {
		t.Fatal(err)
	}

	me := `query($first: Int, $after: String) { me {
		all: workspaces { ` + workspaceFields + ` }
		page: workspacesConnection(first: $first, after: $after) { nodes { ` + workspaceFields + ` }
			edges { node { ` + workspaceFields + ` } } pageInfo { hasNextPage endCursor } } } }`
	assignee := `query($t: ID!, $first: Int, $after: String) { task(id: $t) { assignee {
		all: workspaces { ` + workspaceFields + ` }
		page: workspacesConnection(first: $first, after: $after) { nodes { ` + workspaceFields + ` }
			edges { node { ` + workspaceFields + ` } } pageInfo { hasNextPage endCursor } } } } }`
	digMe := func(d map[string]any) map[string]any { return d["me"].(map[string]any) }
	digAssignee := func(d map[string]any) map[string]any {
		return d["task"].(map[string]any)["assignee"].(map[string]any)
	}
	for _, c := range []struct {
		name  string
		as    apitest.User
		query string
		vars  map[string]any
		dig   func(map[string]any) map[string]any
		first int
		want  int
	}{
		{"ann on herself", ann, me, nil, digMe, 7, 31},
		{"bob on himself", bob, me, nil, digMe, 100, 17},
		{"ann on bob", ann, assignee, map[string]any{"t": task}, digAssignee, 5, 13},
		{"bob on ann", bob, assignee, map[string]any{"t": task}, digAssignee, 20, 13}, // the assignee is bob: see below
	} {
		if c.name == "bob on ann" {
			if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE tasks SET assignee_id = $1 WHERE id = $2`, ann.ID, task); err != nil {
				t.Fatal(err)
			}
		}
		paged, all := workspacesThrough(t, env, c.as, c.query, c.vars, c.first, c.dig)
		if len(paged) != c.want || !reflect.DeepEqual(paged, all) {
			t.Errorf("%s: the pages show %d workspaces, workspaces %d (want %d, the same in the same order)",
				c.name, len(paged), len(all), c.want)
		}
		if c.name == "ann on bob" {
			for _, w := range paged {
				if w.ViewerRole != "OWNER" {
					t.Errorf("ann on bob: %s with role %s, want ann's role, OWNER", w.Name, w.ViewerRole)
				}
			}
		}
	}

	// Once Bob leaves all but the task's workspace, Ann sees one of his.
	if _, err := env.DB.Pool.Exec(t.Context(), `DELETE FROM members WHERE user_id = $1 AND workspace_id <> $2`, bob.ID, shared); err != nil {
		t.Fatal(err)
	}
	if _, err := env.DB.Pool.Exec(t.Context(), `UPDATE tasks SET assignee_id = $1 WHERE id = $2`, bob.ID, task); err != nil {
		t.Fatal(err)
	}
	paged, all := workspacesThrough(t, env, ann, assignee, map[string]any{"t": task}, 5, digAssignee)
	if len(paged) != 1 || paged[0].ID != shared || !reflect.DeepEqual(paged, all) {
		t.Errorf("after bob left: %+v, workspaces %+v", paged, all)
	}

	// A cursor of one user's list is refused on another's.
	var d struct {
		Me struct {
			Page struct{ PageInfo struct{ EndCursor string } }
		}
	}
	mustData(t, post(t, env, ann.Token, me, map[string]any{"first": 1}), &d)
	r := post(t, env, bob.Token, me, map[string]any{"first": 1, "after": d.Me.Page.PageInfo.EndCursor})
	wantErrCode(t, r, "BAD_USER_INPUT")
	for _, first := range []int{0, 101} {
		wantErrCode(t, post(t, env, ann.Token, me, map[string]any{"first": first}), "BAD_USER_INPUT")
	}
}

// The deprecated lists still answer as before, and introspection marks them
// deprecated with a reason that names their connection; the connections
// are not deprecated, and a plain fields list leaves the deprecated out.
func TestMembersAndWorkspacesAreDeprecated(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner, member := env.NewUser(t, "Owner"), env.NewUser(t, "Member")
	ws := mkWorkspace(t, env, owner)
	joinWorkspace(t, env, owner, ws, member, "MEMBER")
	var d struct {
		Me struct {
			Workspaces []struct {
				ID      string
				Members []struct {
					User struct{ ID string }
					Role string
				}
			}
		}
	}
	mustData(t, post(t, env, owner.Token, `{ me { workspaces { id members { user { id } role } } } }`, nil), &d)
	if len(d.Me.Workspaces) != 1 || d.Me.Workspaces[0].ID != ws || len(d.Me.Workspaces[0].Members) != 2 ||
		d.Me.Workspaces[0].Members[0].User.ID != member.ID || d.Me.Workspaces[0].Members[1].Role != "OWNER" {
		t.Fatalf("deprecated lists: %+v", d.Me)
	}

	type field struct {
		Name              string
		IsDeprecated      bool
		DeprecationReason *string
	}
	var types struct {
		Workspace, User struct {
			All   []field `json:"all"`
			Plain []field `json:"plain"`
		}
	}
	mustData(t, post(t, env, owner.Token, `{
		Workspace: __type(name: "Workspace") { all: fields(includeDeprecated: true) { name isDeprecated deprecationReason }
			plain: fields { name isDeprecated deprecationReason } }
		User: __type(name: "User") { all: fields(includeDeprecated: true) { name isDeprecated deprecationReason }
			plain: fields { name isDeprecated deprecationReason } } }`, nil), &types)
	for _, c := range []struct {
		typ              string
		all, plain       []field
		old, replacement string
	}{
		{"Workspace", types.Workspace.All, types.Workspace.Plain, "members", "membersConnection"},
		{"User", types.User.All, types.User.Plain, "workspaces", "workspacesConnection"},
	} {
		found := map[string]field{}
		for _, f := range c.all {
			found[f.Name] = f
		}
		old, ok := found[c.old]
		if !ok || !old.IsDeprecated || old.DeprecationReason == nil || !strings.HasPrefix(*old.DeprecationReason, "Use "+c.replacement+"(") {
			t.Errorf("%s.%s = %+v, want deprecated for %s", c.typ, c.old, old, c.replacement)
		}
		if f, ok := found[c.replacement]; !ok || f.IsDeprecated {
			t.Errorf("%s.%s = %+v, want a field not deprecated", c.typ, c.replacement, f)
		}
		for _, f := range c.plain {
			if f.Name == c.old {
				t.Errorf("%s's fields without includeDeprecated list %s", c.typ, c.old)
			}
		}
	}
}

// maxAccountPageStatements bounds the statements of the queries below,
// whatever the number of workspaces: token, the viewer's workspaces, the
// member pages, the users, with room for loader batches split by
// scheduling (maxPageSplits); unbatched, 12 workspaces would take over 12.
const maxAccountPageStatements = 9

// maxPageSplits is how many more page statements than one a batch may
// become when its keys straddle the loader's millisecond.
const maxPageSplits = 3

// isMemberPage and isWorkspacePage tell the statements of MemberLists and
// WorkspaceLists (both forms) from the others.
func isMemberPage(s string) bool    { return strings.Contains(s, "m.user_id DESC LIMIT") }
func isWorkspacePage(s string) bool { return strings.Contains(s, "(w.created_at, w.id) <") }

// A page of members under a list of workspaces is one statement for every
// workspace (MemberLists' unnest form), and a page of workspaces under a
// page of members one statement for every member (WorkspaceLists'), for 3
// workspaces as for 12; a page alone is one statement (the scalar form).
func TestAccountPagesAreOneStatement(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	counts := map[string]int{}
	for _, n := range []int{3, 12} {
		viewer := env.NewUser(t, "Viewer")
		// n workspaces of the viewer, each with 6 more members.
		if _, err := env.DB.Pool.Exec(t.Context(), `WITH w AS (INSERT INTO workspaces (name)
				SELECT 'ws ' || g FROM generate_series(1, $1::int) g RETURNING id),
			u AS (INSERT INTO users (email, name, password_hash)
				SELECT 'm-' || gen_random_uuid() || '@example.com', 'M', 'x' FROM generate_series(1, 6) RETURNING id),
			o AS (INSERT INTO members (workspace_id, user_id, role) SELECT id, $2, 'OWNER' FROM w)
			INSERT INTO members (workspace_id, user_id, role) SELECT w.id, u.id, 'MEMBER' FROM w, u`, n, viewer.ID); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, query string
			check       func(data json.RawMessage) error
			pages       func(string) bool
		}{
			{"members under workspaces", `{ me { workspaces { id membersConnection(first: 5) { nodes { user { name } } } } } }`,
				func(data json.RawMessage) error {
					var d struct {
						Me struct {
							Workspaces []struct {
								MembersConnection struct {
									Nodes []struct{ User struct{ Name string } }
								}
							}
						}
					}
					if err := json.Unmarshal(data, &d); err != nil {
						return err
					}
					if len(d.Me.Workspaces) != n {
						return fmt.Errorf("%d workspaces", len(d.Me.Workspaces))
					}
					for _, w := range d.Me.Workspaces {
						if len(w.MembersConnection.Nodes) != 5 || w.MembersConnection.Nodes[0].User.Name == "" {
							return fmt.Errorf("page %+v", w.MembersConnection)
						}
					}
					return nil
				}, isMemberPage},
			{"members under workspaces' pages", `{ me { workspacesConnection(first: 50) { nodes {
					membersConnection(first: 5) { nodes { user { name } } } } } } }`,
				func(data json.RawMessage) error {
					if c := strings.Count(string(data), `"name"`); c != 5*n {
						return fmt.Errorf("%d names", c)
					}
					return nil
				}, isMemberPage},
			{"workspaces under members", `{ me { workspacesConnection(first: 1) { nodes {
					membersConnection(first: 7) { nodes { user { workspacesConnection(first: 2) { nodes { id } } } } } } } } }`,
				func(data json.RawMessage) error {
					if c := strings.Count(string(data), `"id"`); c != 7*2 { // 2 of each of the 7 members
						return fmt.Errorf("%d workspaces", c)
					}
					return nil
				}, isWorkspacePage},
		} {
			counter.reset()
			r := post(t, env, viewer.Token, c.query, nil)
			stmts := counter.statements()
			mustData(t, r, nil)
			if err := c.check(r.Body.Data); err != nil {
				t.Fatalf("%s, %d workspaces: %v: %s", c.name, n, err, r.Raw)
			}
			pages := 0
			for _, s := range stmts {
				if c.pages(s) {
					pages++
				}
			}
			// The workspaces page of the last query is one statement alone
			// (the viewer's page), the members' another.
			want := 1
			if c.name == "workspaces under members" {
				want = 2
			}
			// Up to three more when the loader's batch was split by
			// scheduling (its keys straddled its millisecond under the race
			// detector on a loaded machine: CI runs saw one split, then two):
			// unbatched, 12 workspaces would be 12.
			if pages < want || pages > want+maxPageSplits {
				t.Errorf("%s, %d workspaces: %d page statements, want %d (up to %d if batches split):\n%s",
					c.name, n, pages, want, want+maxPageSplits, strings.Join(stmts, "\n"))
			}
			counts[fmt.Sprintf("%s, %d", c.name, n)] = len(stmts)
			checkStatements(t, fmt.Sprintf("%s, %d workspaces", c.name, n), stmts, maxAccountPageStatements)
		}
	}
	t.Logf("statements: %v", counts)
}
