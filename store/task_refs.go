package store

import (
	"context"
	"fmt"
)

// This file reads the users and projects that tasks and comments refer to, for
// the task loaders. They check no access: callers load them from tasks and
// comments the viewer can already see.

// UsersForTasks returns the users with the given ids (creators, assignees,
// comment authors), in the order of ids, with nil for an id that does not exist.
func (db *DB) UsersForTasks(ctx context.Context, ids []string) ([]*User, error) {
	rows, err := db.q(ctx).Query(ctx, `SELECT `+userColumns+` FROM users u WHERE u.id = ANY($1::uuid[])`, validIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("users by id: %w", err)
	}
	defer rows.Close()
	byID := map[string]*User{}
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("users by id: %w", err)
		}
		byID[u.ID] = u
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("users by id: %w", err)
	}
	out := make([]*User, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// ProjectsForTasks returns the projects with the given ids, in the order of ids,
// with nil for an id that does not exist.
func (db *DB) ProjectsForTasks(ctx context.Context, ids []string) ([]*Project, error) {
	rows, err := db.q(ctx).Query(ctx, `SELECT id, workspace_id, name, description, archived_at, created_at, updated_at
		FROM projects WHERE id = ANY($1::uuid[])`, validIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("projects by id: %w", err)
	}
	defer rows.Close()
	byID := map[string]*Project{}
	for rows.Next() {
		var p Project
		if err := rows.Scan(&p.ID, &p.WorkspaceID, &p.Name, &p.Description, &p.ArchivedAt, &p.CreatedAt, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("projects by id: %w", err)
		}
		byID[p.ID] = &p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("projects by id: %w", err)
	}
	out := make([]*Project, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// validIDs returns the well-formed ids of ids.
func validIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if validID(id) {
			out = append(out, id)
		}
	}
	return out
}
