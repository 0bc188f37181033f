package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"

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
	key, ok := taskPageAsked(ctx, parsed.String())
	if !ok {
		return l.Project(ctx, id)
	}
	p, page, err := r.DB.ProjectWithTaskPage(ctx, viewer.ID, key)
	if err != nil || p == nil {
		// Not found, or not visible: the loader says which, with its error.
		return l.Project(ctx, id)
	}
	l.projects.Prime(id, p)
	l.taskPages.Prime(key, page)
	return p, nil
}

// taskPageAsked returns the key of the page of tasks (Project.tasks) that the
// selection of the field of ctx, a Project, asks for, with projectID as the
// project's id; false when it asks for none, for two different pages, or for
// one whose arguments it cannot read as the field will.
func taskPageAsked(ctx context.Context, projectID string) (store.TaskPageKey, bool) {
	fc := graphql.GetFieldContext(ctx)
	oc := graphql.GetOperationContext(ctx)
	if fc == nil || fc.Field.Field == nil || oc == nil {
		return store.TaskPageKey{}, false
	}
	var key store.TaskPageKey
	found := false
	for _, f := range graphql.CollectFields(oc, fc.Field.Selections, []string{"Project"}) {
		if f.Name != "tasks" {
			continue
		}
		k, ok := taskPageKeyOf(projectID, f.ArgumentMap(oc.Variables))
		if !ok || (found && k != key) {
			return store.TaskPageKey{}, false
		}
		key, found = k, true
	}
	return key, found
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
