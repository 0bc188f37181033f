package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/errs"
	"taskflow/reqinfo"
	"taskflow/store"
)

// filterWorld is a workspace with a varied log and the events as appended.
type filterWorld struct {
	f      *auditFixture
	owner  *store.User
	admin  *store.User
	ws     string
	events []*store.AuditEvent // newest first, as the store reads them
}

func newFilterWorld(t *testing.T) *filterWorld {
	f := newAuditFixture(t)
	w := &filterWorld{f: f, owner: f.user("Owner"), admin: f.user("Admin")}
	w.ws = f.workspace(map[*store.User]store.Role{w.owner: store.RoleOwner, w.admin: store.RoleAdmin})
	ctx := context.Background()
	actions := []string{"task.created", "task.updated", "task.deleted", "project.created", "project.updated",
		"comment.created", "member.added", "member.role_changed", "workspace.created", "task_x.created"}
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for i := range 60 {
		actor := w.owner
		if i%3 == 0 {
			actor = w.admin
		}
		action := actions[i%len(actions)]
		at := base.Add(time.Duration(i) * time.Minute)
		f.append(ctx, auditWsEvent(w.ws, actor, action, fmt.Sprintf("ent-%d", i%7), map[string]any{"i": i}), func() time.Time { return at })
	}
	// Another workspace's events never show.
	other := f.workspace(map[*store.User]store.Role{w.owner: store.RoleOwner})
	f.append(ctx, auditWsEvent(other, w.owner, "task.created", "ent-1", nil), nil)
	all, err := f.db.AuditEvents(ctx, w.owner, w.ws, store.AuditFilter{}, auditPtr(100), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.events = all.Nodes()
	if len(w.events) != 60 {
		t.Fatalf("%d events", len(w.events))
	}
	return w
}

// matches is the filter as a predicate, written independently of the SQL.
func auditMatches(e *store.AuditEvent, f store.AuditFilter) bool {
	if len(f.Actions) > 0 {
		ok := false
		for _, a := range f.Actions {
			if p, pre := strings.CutSuffix(a, "*"); pre && strings.HasPrefix(e.Action, p) || a == e.Action {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return (f.ActorID == nil || e.ActorID != nil && *e.ActorID == *f.ActorID) &&
		(f.EntityType == nil || e.EntityType == *f.EntityType) &&
		(f.EntityID == nil || e.EntityID == *f.EntityID) &&
		(f.Since == nil || !e.OccurredAt.Before(*f.Since)) &&
		(f.Until == nil || e.OccurredAt.Before(*f.Until))
}

// pageAll pages through the filter with page size n and returns the ids.
func (w *filterWorld) pageAll(t *testing.T, f store.AuditFilter, n int) []string {
	t.Helper()
	var ids []string
	var after *string
	for range 100 {
		c, err := w.f.db.AuditEvents(context.Background(), w.admin, w.ws, f, &n, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.Edges {
			ids = append(ids, e.Node.ID)
		}
		if len(c.Edges) > n {
			t.Fatalf("page of %d > %d", len(c.Edges), n)
		}
		if !c.PageInfo.HasNextPage {
			return ids
		}
		if c.PageInfo.EndCursor() == nil || *c.PageInfo.EndCursor() != c.Edges[len(c.Edges)-1].Cursor() {
			t.Fatal("endCursor is not the last edge's cursor")
		}
		after = c.PageInfo.EndCursor()
	}
	t.Fatal("pagination does not end")
	return nil
}

// Every filter and combinations of them return exactly the matching events,
// newest first, across pages.
func TestAuditEventsFilters(t *testing.T) {
	t.Parallel()
	w := newFilterWorld(t)
	since, until := w.events[40].OccurredAt, w.events[10].OccurredAt // inclusive, exclusive
	filters := map[string]store.AuditFilter{
		"none":                {},
		"exact action":        {Actions: []string{"task.updated"}},
		"two exact":           {Actions: []string{"task.updated", "member.added"}},
		"prefix":              {Actions: []string{"task.*"}},
		"prefix and exact":    {Actions: []string{"member.*", "workspace.created"}},
		"prefix with dup":     {Actions: []string{"task.*", "task.*", "task.created"}},
		"star":                {Actions: []string{"*"}},
		"no such action":      {Actions: []string{"nope.nope"}},
		"actor":               {ActorID: &w.admin.ID},
		"actor upper-case":    {ActorID: auditPtr(strings.ToUpper(w.admin.ID))},
		"malformed actor":     {ActorID: auditPtr("not-an-id")},
		"entity type":         {EntityType: auditPtr("project")},
		"entity id":           {EntityID: auditPtr("ent-3")},
		"entity type and id":  {EntityType: auditPtr("task"), EntityID: auditPtr("ent-3")},
		"since":               {Since: &since},
		"until":               {Until: &until},
		"since until":         {Since: &since, Until: &until},
		"empty window":        {Since: &since, Until: &since},
		"all at once":         {Actions: []string{"task.*", "project.created"}, ActorID: &w.owner.ID, EntityID: auditPtr("ent-2"), Since: &since, Until: &until},
		"prefix actor window": {Actions: []string{"task.*"}, ActorID: &w.admin.ID, Since: &since},
	}
	for name, f := range filters {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pred := f
			if pred.ActorID != nil {
				pred.ActorID = auditPtr(strings.ToLower(*pred.ActorID))
			}
			if slices.Contains(pred.Actions, "*") {
				pred.Actions = nil
			}
			var want []string
			for _, e := range w.events {
				if auditMatches(e, pred) {
					want = append(want, e.ID)
				}
			}
			for _, n := range []int{100, 7} {
				got := w.pageAll(t, f, n)
				if !slices.Equal(got, want) {
					t.Fatalf("first=%d: got %d events, want %d\n got %v\nwant %v", n, len(got), len(want), got, want)
				}
			}
			if name != "none" && name != "star" && len(want) == len(w.events) {
				t.Fatalf("the filter matches everything: the test proves nothing")
			}
		})
	}
}

// The prefix is a prefix of the action, not a pattern: task.* does not match
// task_x.created, and LIKE wildcards in it are literal.
func TestAuditEventsPrefixIsLiteral(t *testing.T) {
	t.Parallel()
	w := newFilterWorld(t)
	c, err := w.f.db.AuditEvents(context.Background(), w.owner, w.ws, store.AuditFilter{Actions: []string{"task.*"}}, auditPtr(100), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Nodes() {
		if !strings.HasPrefix(e.Action, "task.") {
			t.Errorf("task.* matched %s", e.Action)
		}
	}
	c, err = w.f.db.AuditEvents(context.Background(), w.owner, w.ws, store.AuditFilter{Actions: []string{"task_*"}}, auditPtr(100), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Nodes() {
		if e.Action != "task_x.created" {
			t.Errorf("task_* matched %s (_ taken as a wildcard)", e.Action)
		}
	}
	if len(c.Edges) == 0 {
		t.Error("task_* matched nothing")
	}
}

// bytesOf is the length of *p, 0 for nil.
func bytesOf(p *string) int {
	if p == nil {
		return 0
	}
	return len(*p)
}

// Bad arguments are BAD_USER_INPUT; cursors only work with their workspace and
// filter.
func TestAuditEventsBadInputAndCursorBinding(t *testing.T) {
	t.Parallel()
	w := newFilterWorld(t)
	ctx := context.Background()
	// The admin of w.ws is also OWNER of a second workspace with events.
	ws2 := w.f.workspace(map[*store.User]store.Role{w.admin: store.RoleOwner})
	w.f.append(ctx, auditWsEvent(ws2, w.admin, "task.created", "x", nil), nil)
	code := func(err error) errs.Code { return errs.CodeOf(err) }
	for _, bad := range []store.AuditFilter{
		{Actions: []string{""}},
		{Actions: []string{"*.created"}},
		{Actions: []string{"ta*sk"}},
		{Actions: []string{"task.**"}},
		{Actions: slices.Repeat([]string{"task.*"}, store.MaxAuditFilterActions+1)},
		{Actions: []string{strings.Repeat("t", store.MaxAuditFilterActionLength+1)}},
		{ActorID: auditPtr(strings.Repeat("a", store.MaxAuditFilterValueLength+1))},
		{EntityType: auditPtr(strings.Repeat("t", store.MaxAuditFilterValueLength+1))},
		{EntityID: auditPtr(strings.Repeat("e", store.MaxAuditFilterValueLength+1))},
	} {
		if _, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, bad, nil, nil); code(err) != errs.CodeBadUserInput {
			t.Errorf("filter %v (actor %d, type %d, entity %d bytes): %v", bad.Actions,
				bytesOf(bad.ActorID), bytesOf(bad.EntityType), bytesOf(bad.EntityID), err)
		}
	}
	atMost := store.AuditFilter{EntityType: auditPtr(strings.Repeat("t", store.MaxAuditFilterValueLength))}
	if _, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, atMost, nil, nil); err != nil {
		t.Errorf("an entity type of %d bytes: %v", store.MaxAuditFilterValueLength, err)
	}
	for _, n := range []int{0, -1, 101} {
		if _, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, store.AuditFilter{}, &n, nil); code(err) != errs.CodeBadUserInput {
			t.Errorf("first=%d: %v", n, err)
		}
	}
	f := store.AuditFilter{Actions: []string{"task.*"}}
	c, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, f, auditPtr(2), nil)
	if err != nil || c.PageInfo.EndCursor() == nil {
		t.Fatal(err)
	}
	cur := c.PageInfo.EndCursor()
	// The same filter written differently is the same list.
	same := store.AuditFilter{Actions: []string{"task.*", "task.*"}, ActorID: auditPtr(""), Since: nil}
	if _, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, same, auditPtr(2), cur); err != nil {
		t.Errorf("equivalent filter refused the cursor: %v", err)
	}
	t0 := w.events[5].OccurredAt
	for name, other := range map[string]store.AuditFilter{
		"no filter":      {},
		"other action":   {Actions: []string{"task.created"}},
		"added actor":    {Actions: []string{"task.*"}, ActorID: &w.admin.ID},
		"added type":     {Actions: []string{"task.*"}, EntityType: auditPtr("task")},
		"added entity":   {Actions: []string{"task.*"}, EntityID: auditPtr("ent-1")},
		"added since":    {Actions: []string{"task.*"}, Since: &t0},
		"added until":    {Actions: []string{"task.*"}, Until: &t0},
		"until as since": {Actions: []string{"task.*"}, Since: &t0, Until: nil},
	} {
		if _, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, other, auditPtr(2), cur); code(err) != errs.CodeBadUserInput {
			t.Errorf("cursor reused with %s: %v", name, err)
		}
	}
	if _, err := w.f.db.AuditEvents(ctx, w.admin, ws2, f, auditPtr(2), cur); code(err) != errs.CodeBadUserInput {
		t.Errorf("cursor reused in another workspace: %v", err)
	}
	if _, err := w.f.db.UserAuditEvents(ctx, w.admin, w.admin.ID, auditPtr(2), cur); code(err) != errs.CodeBadUserInput {
		t.Errorf("cursor reused for account events: %v", err)
	}
	for _, junk := range []string{"x", "!!!", "eyJ0IjoiMjAyNi0wMS0wMVQwMDowMDowMFoiLCJpIjoibm9wZSJ9"} {
		if _, err := w.f.db.AuditEvents(ctx, w.admin, w.ws, f, auditPtr(2), &junk); code(err) != errs.CodeBadUserInput {
			t.Errorf("cursor %q: %v", junk, err)
		}
	}
}

// OWNER and ADMIN read the log; MEMBER and VIEWER are FORBIDDEN; anyone else,
// or a workspace that does not exist, is NOT_FOUND; nobody is UNAUTHENTICATED.
// The same holds for verification and export.
func TestAuditAccessRules(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	owner, admin, member, viewer, stranger := f.user("O"), f.user("A"), f.user("M"), f.user("V"), f.user("S")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner, admin: store.RoleAdmin, member: store.RoleMember, viewer: store.RoleViewer})
	// The stranger is the OWNER of another workspace: no path to ws from there.
	other := f.workspace(map[*store.User]store.Role{stranger: store.RoleOwner, admin: store.RoleViewer})
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "1", nil), nil)
	f.append(ctx, auditWsEvent(other, stranger, "task.created", "2", nil), nil)
	type call func(u *store.User, ws string) error
	calls := map[string]call{
		"list": func(u *store.User, ws string) error {
			_, err := f.db.AuditEvents(ctx, u, ws, store.AuditFilter{}, nil, nil)
			return err
		},
		"verify": func(u *store.User, ws string) error {
			_, err := f.db.VerifyAuditLog(ctx, u, ws, nil, nil, nil)
			return err
		},
		"checkpoint": func(u *store.User, ws string) error {
			_, err := f.db.AuditCheckpoint(ctx, u, ws, nil)
			return err
		},
		"export": func(u *store.User, ws string) error {
			return f.db.EachAuditEvent(ctx, u, ws, store.AuditFilter{}, nil, nil, func(*store.AuditEvent) error { return nil })
		},
	}
	cases := []struct {
		user *store.User
		ws   string
		want errs.Code
	}{
		{owner, ws, ""}, {admin, ws, ""},
		{member, ws, errs.CodeForbidden}, {viewer, ws, errs.CodeForbidden},
		{stranger, ws, errs.CodeNotFound},
		{admin, other, errs.CodeForbidden}, // a VIEWER there
		{owner, "00000000-0000-0000-0000-000000000000", errs.CodeNotFound},
		{owner, "not-an-id", errs.CodeNotFound},
		{nil, ws, errs.CodeUnauthenticated},
	}
	for op, c := range calls {
		for _, tc := range cases {
			who := "nobody"
			if tc.user != nil {
				who = tc.user.Name
			}
			if got := errs.CodeOf(c(tc.user, tc.ws)); got != tc.want {
				t.Errorf("%s by %s in %s: code %q, want %q", op, who, tc.ws, got, tc.want)
			}
		}
	}
	// What an admin reads is the workspace's only.
	c, err := f.db.AuditEvents(ctx, admin, ws, store.AuditFilter{}, nil, nil)
	if err != nil || len(c.Edges) != 1 || *c.Edges[0].Node.WorkspaceID != ws {
		t.Fatalf("admin read %+v, %v", c, err)
	}
}

// Paging through the log while events are appended never skips or repeats an
// event that existed when paging began, and keeps newest-first order.
func TestAuditPaginationDuringConcurrentInserts(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	for i := range 45 {
		f.append(ctx, auditWsEvent(ws, owner, "task.created", fmt.Sprint(i), nil), nil)
	}
	before, err := f.db.AuditEvents(ctx, owner, ws, store.AuditFilter{}, auditPtr(100), nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	for g := range 2 {
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := f.tryAppend(ctx, auditWsEvent(ws, owner, "task.updated", fmt.Sprint("new", g, i), nil), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var got []*store.AuditEvent
	var after *string
	for {
		c, err := f.db.AuditEvents(ctx, owner, ws, store.AuditFilter{Actions: []string{"task.created"}}, auditPtr(4), after)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c.Nodes()...)
		if !c.PageInfo.HasNextPage {
			break
		}
		after = c.PageInfo.EndCursor()
		// Let the writers get ahead between pages.
		f.append(ctx, auditWsEvent(ws, owner, "task.updated", "between", nil), nil)
	}
	close(stop)
	wg.Wait()
	var want []string
	for _, e := range before.Nodes() {
		want = append(want, e.ID)
	}
	var gotIDs []string
	for i, e := range got {
		gotIDs = append(gotIDs, e.ID)
		if i > 0 && !(e.OccurredAt.Before(got[i-1].OccurredAt) || e.OccurredAt.Equal(got[i-1].OccurredAt) && e.ID < got[i-1].ID) {
			t.Fatalf("event %d is not older than the one before it", i)
		}
	}
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("paged %d events, want the %d that existed", len(gotIDs), len(want))
	}
	if v, err := f.db.VerifyAuditLog(ctx, owner, ws, nil, nil, nil); err != nil || !v.Valid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
}

// Account events are read by their own user only; for anyone else the list is
// empty (a User is reachable through shared workspaces).
func TestUserAuditEvents(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	alice, bob := f.user("Alice"), f.user("Bob")
	ws := f.workspace(map[*store.User]store.Role{alice: store.RoleOwner})
	ctx = reqinfo.With(ctx, reqinfo.Info{IP: "198.51.100.1"})
	f.append(ctx, audit.Event{ActorID: &alice.ID, Action: "user.registered", EntityID: alice.ID}, nil)
	f.append(ctx, audit.Event{ActorID: &alice.ID, Action: "user.logged_in", EntityID: alice.ID}, nil)
	f.append(ctx, audit.Event{Action: "user.login_failed", EntityID: alice.ID}, nil)
	f.append(ctx, audit.Event{ActorID: &bob.ID, Action: "user.registered", EntityID: bob.ID}, nil)
	f.append(ctx, audit.Event{Action: "user.login_failed", Metadata: map[string]any{"reason": "unknown e-mail"}}, nil)
	f.append(ctx, auditWsEvent(ws, alice, "workspace.created", ws, nil), nil)
	c, err := f.db.UserAuditEvents(ctx, alice, alice.ID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range c.Nodes() {
		actions = append(actions, e.Action)
		if e.WorkspaceID != nil || e.EntityID != alice.ID {
			t.Errorf("not an account event of alice: %+v", e)
		}
	}
	if !slices.Equal(actions, []string{"user.login_failed", "user.logged_in", "user.registered"}) {
		t.Fatalf("alice's events: %v", actions)
	}
	// Paging works and is bound to the account.
	p1, err := f.db.UserAuditEvents(ctx, alice, alice.ID, auditPtr(2), nil)
	if err != nil || !p1.PageInfo.HasNextPage {
		t.Fatal(err)
	}
	p2, err := f.db.UserAuditEvents(ctx, alice, alice.ID, auditPtr(2), p1.PageInfo.EndCursor())
	if err != nil || len(p2.Edges) != 1 || p2.Edges[0].Node.Action != "user.registered" || p2.PageInfo.HasNextPage {
		t.Fatalf("page 2 = %+v, %v", p2, err)
	}
	if _, err := f.db.UserAuditEvents(ctx, bob, bob.ID, auditPtr(2), p1.PageInfo.EndCursor()); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("alice's cursor on bob's events: %v", err)
	}
	for _, viewer := range []*store.User{bob, nil} {
		c, err := f.db.UserAuditEvents(ctx, viewer, alice.ID, nil, nil)
		if err != nil || len(c.Edges) != 0 || c.PageInfo.HasNextPage {
			t.Errorf("%v reads alice's events: %+v, %v", viewer, c, err)
		}
	}
	if v, err := f.db.VerifyChain(ctx, "user:"+alice.ID); err != nil || !v.Valid || v.CheckedEvents != 3 {
		t.Errorf("alice's chain: %+v, %v", v, err)
	}
}
