package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// projectColumns is the column list scanned by scanProject.
const projectColumns = `p.id, p.workspace_id, p.name, p.description, p.archived_at, p.created_at, p.updated_at`

// scanProject scans the columns of projectColumns.
func scanProject(row pgx.Row) (*Project, error) {
	var p Project
	if err := row.Scan(&p.ID, &p.WorkspaceID, &p.Name, &p.Description, &p.ArchivedAt, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return nil, err
	}
	return &p, nil
}

// ProjectsByIDs returns the projects with these ids (archived ones included) that
// live in a workspace viewerID is a member of, by id. Other ids are absent.
func (db *DB) ProjectsByIDs(ctx context.Context, viewerID string, ids []string) (map[string]*Project, error) {
	out := make(map[string]*Project, len(ids))
	valid := validIDs(ids)
	if len(valid) == 0 || !validID(viewerID) {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+projectColumns+` FROM projects p
		JOIN members v ON v.workspace_id = p.workspace_id AND v.user_id = $1
		WHERE p.id = ANY($2::uuid[])`, viewerID, valid)
	if err != nil {
		return nil, fmt.Errorf("projects by ids: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, fmt.Errorf("projects by ids: %w", err)
		}
		out[p.ID] = p
	}
	return out, rows.Err()
}

// ProjectsScope is the cursor scope of a workspace's project list with or without
// its archived projects: a cursor of one such list is refused by any other.
func ProjectsScope(workspaceID string, includeArchived bool) string {
	return "projects:" + workspaceID + ":" + strconv.FormatBool(includeArchived)
}

// Projects returns a page of the workspace's projects, newest first, without the
// archived ones unless includeArchived. p must come from NewPage with
// ProjectsScope(workspaceID, includeArchived). It returns UNAUTHENTICATED for no
// viewer and NOT_FOUND if the viewer is not a member of the workspace.
func (db *DB) Projects(ctx context.Context, viewer *User, workspaceID string, includeArchived bool, p Page) (*ProjectConnection, error) {
	if _, err := db.requireRole(ctx, workspaceID, viewer, RoleViewer, "workspace", "read projects"); err != nil {
		return nil, err
	}
	args := []any{workspaceID, includeArchived, p.First + 1}
	where := ``
	if p.After != nil {
		where = ` AND (p.created_at, p.id) < ($4, $5)`
		args = append(args, p.After.At, p.After.ID)
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+projectColumns+` FROM projects p
		WHERE p.workspace_id = $1 AND ($2 OR p.archived_at IS NULL)`+where+`
		ORDER BY p.created_at DESC, p.id DESC LIMIT $3`, args...)
	if err != nil {
		return nil, fmt.Errorf("projects: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Project, error) { return scanProject(r) })
	if err != nil {
		return nil, fmt.Errorf("projects: %w", err)
	}
	return connection(items, p, ProjectsScope(workspaceID, includeArchived), func(pr *Project) (time.Time, string) {
		return pr.CreatedAt, pr.ID
	}), nil
}
