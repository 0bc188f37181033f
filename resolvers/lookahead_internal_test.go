package resolvers

import (
	"testing"

	"taskflow/store"
)

// settledBy settles a field only when the lookahead read it for every task
// of the page: a task added or reassigned between the lookahead's
// statements (its assignee, its comments or an author not read) leaves the
// field unsettled, and nothing else is ever settled.
func TestSettledByOnlyWhatWasReadForEveryTask(t *testing.T) {
	t.Parallel()
	const (
		t1, t2 = "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"
		u1, u2 = "00000000-0000-0000-0000-0000000000a1", "00000000-0000-0000-0000-0000000000a2"
	)
	assignee := func(id string) *string { return &id }
	page := &store.TaskConnection{Edges: []*store.Edge[store.Task]{
		{Node: &store.Task{ID: t1, AssigneeID: assignee(u1)}},
		{Node: &store.Task{ID: t2}}, // no assignee
	}}
	comments := func(authors ...string) *store.CommentConnection {
		c := &store.CommentConnection{}
		for _, a := range authors {
			c.Edges = append(c.Edges, &store.Edge[store.Comment]{Node: &store.Comment{AuthorID: a}})
		}
		return c
	}
	key := func(task string) store.CommentPageKey {
		first := 5
		k, err := store.NewCommentPageKey(task, &first, nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	users := map[string]*store.User{u1: {ID: u1}, u2: {ID: u2}}
	all := store.TaskPageAlso{Assignees: true, Comments: &store.CommentsAlso{First: 5, Authors: true}}
	for _, c := range []struct {
		name   string
		also   store.TaskPageAlso
		extras store.TaskPageExtras
		want   string // Task.assignee, Task.comments, Comment.author, Task.createdBy, Task.project
	}{
		{"everything read", all, store.TaskPageExtras{Users: users,
			Comments: map[store.CommentPageKey]*store.CommentConnection{key(t1): comments(u2), key(t2): comments()}}, "TTTFF"},
		{"nothing asked", store.TaskPageAlso{}, store.TaskPageExtras{Users: users}, "nil"},
		{"an assignee not read", all, store.TaskPageExtras{Users: map[string]*store.User{u2: {ID: u2}},
			Comments: map[store.CommentPageKey]*store.CommentConnection{key(t1): comments(u2), key(t2): comments()}}, "FTTFF"},
		{"a task's comments not read", all, store.TaskPageExtras{Users: users,
			Comments: map[store.CommentPageKey]*store.CommentConnection{key(t1): comments(u2)}}, "TFFFF"},
		{"an author not read", all, store.TaskPageExtras{Users: map[string]*store.User{u1: {ID: u1}},
			Comments: map[store.CommentPageKey]*store.CommentConnection{key(t1): comments(u2), key(t2): comments()}}, "TTFFF"},
		{"comments without authors", store.TaskPageAlso{Comments: &store.CommentsAlso{First: 5}}, store.TaskPageExtras{Users: map[string]*store.User{},
			Comments: map[store.CommentPageKey]*store.CommentConnection{key(t1): comments(u2), key(t2): comments()}}, "FTFFF"},
		{"comments of another size", store.TaskPageAlso{Comments: &store.CommentsAlso{First: 3}}, store.TaskPageExtras{Users: users,
			Comments: map[store.CommentPageKey]*store.CommentConnection{key(t1): comments(), key(t2): comments()}}, "nil"},
	} {
		settled := settledBy(page, c.also, &c.extras)
		got := "nil"
		if settled != nil {
			got = ""
			for _, f := range [][2]string{{"Task", "assignee"}, {"Task", "comments"}, {"Comment", "author"}, {"Task", "createdBy"}, {"Task", "project"}} {
				got += map[bool]string{true: "T", false: "F"}[settled(f[0], f[1])]
			}
		}
		if got != c.want {
			t.Errorf("%s: settled %s, want %s", c.name, got, c.want)
		}
	}
}
