package store

import (
	"context"
	"fmt"
)

// MembersByWorkspaces returns the members of each of workspaceIDs that viewerID is
// a member of, newest first (by joined_at, then user id). Workspaces the viewer is
// not in map to nothing.
func (db *DB) MembersByWorkspaces(ctx context.Context, viewerID string, workspaceIDs []string) (map[string][]*Member, error) {
	out := make(map[string][]*Member, len(workspaceIDs))
	valid := validIDs(workspaceIDs)
	if len(valid) == 0 || !validID(viewerID) {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT m.workspace_id, m.user_id, m.role, m.joined_at FROM members m
		JOIN members v ON v.workspace_id = m.workspace_id AND v.user_id = $1
		WHERE m.workspace_id = ANY($2::uuid[])
		ORDER BY m.joined_at DESC, m.user_id DESC`, viewerID, valid)
	if err != nil {
		return nil, fmt.Errorf("members by workspaces: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m Member
		if err := rows.Scan(&m.WorkspaceID, &m.UserID, &m.Role, &m.JoinedAt); err != nil {
			return nil, fmt.Errorf("members by workspaces: %w", err)
		}
		out[m.WorkspaceID] = append(out[m.WorkspaceID], &m)
	}
	return out, rows.Err()
}
