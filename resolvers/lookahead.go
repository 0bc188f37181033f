package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/store"
)

// The lookahead of project(id): when the project's selection asks for one page
// of its tasks, the project and that page are read in one round trip
// (store.ProjectWithTaskPage) and the page waits in the task-page loader for
// the tasks field, which finds it under the key it makes itself. What the
// lookahead cannot read with certainty (arguments of an unexpected type, two
// different pages, a bad cursor) it leaves to the fields, which then read as
// without it: a wrong guess costs one page read, never a wrong answer.

// projectWithTasks is Loaders.Project that reads the page of tasks the
// project's selection asks for (see taskPageAsked) in the same round trip.
func (r *queryResolver) projectWithTasks(ctx context.Context, id string) (*store.Project, error) {
	l := r.loaders(ctx)
	viewer := l.Viewer(ctx)
	parsed, err := uuid.Parse(id)
	if viewer == nil || err != nil {
		return l.Project(ctx, id)
	}
	key, also, ok := taskPageAsked(ctx, parsed.String())
	if !ok {
		return l.Project(ctx, id)
	}
	p, page, extras, err := r.DB.ProjectWithTaskPage(ctx, viewer.ID, key, also)
	if err != nil || p == nil {
		// Not found, or not visible: the loader says which, with its error.
		return l.Project(ctx, id)
	}
	l.projects.Prime(id, p)
	if settled := settledBy(page, also, extras); settled != nil {
		page.Settle(settled)
	}
	l.taskPages.Prime(key, page)
	for uid, u := range extras.Users {
		l.users.Prime(uid, u)
	}
	if also.Comments != nil {
		comments := &l.commentPages
		if also.Comments.Authors {
			comments = &l.commentPagesWithAuthors
		}
		for k, c := range extras.Comments {
			comments.Prime(k, c)
		}
	}
	return p, nil
}

// settledBy returns what a page read with also has settled for its list's
// marshaling (inorder.Settler, store.Connection.Settle), nil for nothing:
// Task.assignee when every task's assignee is among the users read,
// Task.comments when every task's page of comments was read (every
// comments field of its tasks asks for that page, see taskExtrasAsked), and
// Comment.author when the authors were asked for and every comment's is
// among the users read. A task added or reassigned between the lookahead's
// statements leaves its field unsettled: the list then keeps gqlgen's
// goroutines and its loaders batch what is missing, as without it.
func settledBy(page *store.TaskConnection, also store.TaskPageAlso, extras *store.TaskPageExtras) func(typ, field string) bool {
	var assignees, comments, authors bool
	if also.Assignees {
		assignees = true
		for _, e := range page.Edges {
			if id := e.Node.AssigneeID; id != nil && extras.Users[*id] == nil {
				assignees = false
			}
		}
	}
	if c := also.Comments; c != nil {
		comments, authors = true, c.Authors
		for _, e := range page.Edges {
			k, err := store.NewCommentPageKey(e.Node.ID, &c.First, nil)
			cs := extras.Comments[k]
			if err != nil || cs == nil {
				comments = false
				break
			}
			for _, ce := range cs.Edges {
				if extras.Users[ce.Node.AuthorID] == nil {
					authors = false
				}
			}
		}
	}
	if !assignees && !comments {
		return nil
	}
	return func(typ, field string) bool {
		switch {
		case typ == "Task" && field == "assignee":
			return assignees
		case typ == "Task" && field == "comments":
			return comments
		case typ == "Comment" && field == "author":
			return comments && authors
		}
		return false
	}
}

// taskPageAsked returns the key of the page of tasks (Project.tasks) that the
// selection of the field of ctx, a Project, asks for, with projectID as the
// project's id, and what its tasks' selections ask for that
// ProjectWithTaskPage can read with it (taskExtrasAsked); false when it asks
// for no page, for two different pages, or for one whose arguments it cannot
// read as the field will.
func taskPageAsked(ctx context.Context, projectID string) (store.TaskPageKey, store.TaskPageAlso, bool) {
	fc := graphql.GetFieldContext(ctx)
	oc := graphql.GetOperationContext(ctx)
	if fc == nil || fc.Field.Field == nil || oc == nil {
		return store.TaskPageKey{}, store.TaskPageAlso{}, false
	}
	var key store.TaskPageKey
	var tasks []ast.SelectionSet
	found := false
	for _, f := range graphql.CollectFields(oc, fc.Field.Selections, []string{"Project"}) {
		if f.Name != "tasks" {
			continue
		}
		k, ok := taskPageKeyOf(projectID, f.ArgumentMap(oc.Variables))
		k.Fields = taskFieldsOf(oc, f.Selections) // as Project.tasks makes its key
		if !ok || (found && k != key) {
			return store.TaskPageKey{}, store.TaskPageAlso{}, false
		}
		key, found = k, true
		tasks = append(tasks, taskSelections(oc, f.Selections)...)
	}
	if !found {
		return key, store.TaskPageAlso{}, false
	}
	return key, taskExtrasAsked(oc, tasks), true
}

// taskSelections returns the selections of the tasks of a TaskConnection
// selection: under nodes, and under edges { node }.
func taskSelections(oc *graphql.OperationContext, conn ast.SelectionSet) []ast.SelectionSet {
	var out []ast.SelectionSet
	for _, f := range graphql.CollectFields(oc, conn, []string{"TaskConnection"}) {
		switch f.Name {
		case "nodes":
			out = append(out, f.Selections)
		case "edges":
			for _, e := range graphql.CollectFields(oc, f.Selections, []string{"TaskEdge"}) {
				if e.Name == "node" {
					out = append(out, e.Selections)
				}
			}
		}
	}
	return out
}

// taskExtrasAsked returns what the selections of a page's tasks ask for that
// ProjectWithTaskPage reads with the page: the assignees (assignee), and the
// first page of comments when every comments field asks for the same one
// (same size, no cursor, the authors asked for by all or by none), read as
// Task.comments and Loaders.commentPagesFor would.
func taskExtrasAsked(oc *graphql.OperationContext, tasks []ast.SelectionSet) store.TaskPageAlso {
	var also store.TaskPageAlso
	var comments *store.CommentsAlso
	mixed := false
	for _, sel := range tasks {
		for _, f := range graphql.CollectFields(oc, sel, []string{"Task"}) {
			switch f.Name {
			case "assignee":
				also.Assignees = true
			case "comments":
				c, ok := commentsAsked(oc, f)
				if !ok || (comments != nil && *comments != c) {
					mixed = true
					continue
				}
				comments = &c
			}
		}
	}
	if !mixed {
		also.Comments = comments
	}
	return also
}

// commentsAsked returns the page a Task.comments field f asks for, false when
// it has a cursor (each task's own) or arguments the field would refuse.
func commentsAsked(oc *graphql.OperationContext, f graphql.CollectedField) (store.CommentsAlso, bool) {
	args := f.ArgumentMap(oc.Variables)
	if args["after"] != nil {
		return store.CommentsAlso{}, false
	}
	first, ok := optionalArg(args["first"], graphql.UnmarshalInt)
	if !ok {
		return store.CommentsAlso{}, false
	}
	k, err := store.NewCommentPageKey("", first, nil)
	if err != nil {
		return store.CommentsAlso{}, false
	}
	return store.CommentsAlso{First: k.First, Authors: asksForAuthors(oc, f.Selections)}, true
}

// taskPageKeyOf returns the key store.NewTaskPageKey makes of the arguments
// args of Project.tasks, read with the unmarshalers the field's generated
// code uses (graphql.UnmarshalInt, TaskStatus.UnmarshalGQL,
// graphql.UnmarshalString); false when one of them refuses its value.
func taskPageKeyOf(projectID string, args map[string]any) (store.TaskPageKey, bool) {
	var status *store.TaskStatus
	if v := args["status"]; v != nil {
		status = new(store.TaskStatus)
		if status.UnmarshalGQL(v) != nil {
			return store.TaskPageKey{}, false
		}
	}
	first, ok := optionalArg(args["first"], graphql.UnmarshalInt)
	if !ok {
		return store.TaskPageKey{}, false
	}
	after, ok := optionalArg(args["after"], graphql.UnmarshalString)
	if !ok {
		return store.TaskPageKey{}, false
	}
	key, err := store.NewTaskPageKey(projectID, status, first, after)
	return key, err == nil
}

// optionalArg returns the value of an optional argument read by unmarshal
// (nil when absent or null), false when unmarshal refuses it.
func optionalArg[T any](v any, unmarshal func(any) (T, error)) (*T, bool) {
	if v == nil {
		return nil, true
	}
	x, err := unmarshal(v)
	if err != nil {
		return nil, false
	}
	return &x, true
}

// listedFields are the Task fields a Task of store.ListedTaskFields answers.
var listedFields = map[string]bool{"id": true, "title": true, "status": true, "priority": true,
	"createdAt": true, "__typename": true}

// taskFieldsAsked returns the fields of a task that the tasks of ctx's field
// (a TaskConnection) need set (taskFieldsOf).
func taskFieldsAsked(ctx context.Context) store.TaskFields {
	fc, oc := graphql.GetFieldContext(ctx), graphql.GetOperationContext(ctx)
	if fc == nil || oc == nil {
		return store.AllTaskFields
	}
	return taskFieldsOf(oc, fc.Field.Selections)
}

// taskFieldsOf returns the fields of a task that the tasks of a
// TaskConnection selection need set: store.ListedTaskFields when every
// selection of its tasks asks only for listedFields, else
// store.AllTaskFields.
func taskFieldsOf(oc *graphql.OperationContext, conn ast.SelectionSet) store.TaskFields {
	for _, sel := range taskSelections(oc, conn) {
		for _, f := range graphql.CollectFields(oc, sel, []string{"Task"}) {
			if !listedFields[f.Name] {
				return store.AllTaskFields
			}
		}
	}
	return store.ListedTaskFields
}
