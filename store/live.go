package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
)

// This file holds what live subscriptions (package live) read from the
// store: the spine's head, the access a subscription starts with, where task
// and comment events belong, and the things an event names as they are now.

// SpineWakeups returns a channel that receives (without blocking the sender:
// one pending wake-up stands for any number) after every commit of this
// instance that wrote audit events, as the sealer's does. Each call makes a
// channel of its own; call it once per consumer.
func (db *DB) SpineWakeups() <-chan struct{} {
	ch := make(chan struct{}, 1)
	db.wakeMu.Lock()
	db.spineWakes = append(db.spineWakes, ch)
	db.wakeMu.Unlock()
	return ch
}

// wakeSpineReaders signals every channel of SpineWakeups.
func (db *DB) wakeSpineReaders() {
	db.wakeMu.Lock()
	defer db.wakeMu.Unlock()
	for _, ch := range db.spineWakes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// spineHead is the cursor past every event below a horizon: a reader there
// has read everything committed when the horizon was taken.
func spineHead(horizon uint64) SpineCursor {
	if horizon == 0 {
		return SpineCursor{}
	}
	return SpineCursor{TxID: horizon - 1, Seq: math.MaxInt64}
}

// SpineHead returns a cursor past every event committed now (below the
// snapshot's xmin; see ReadSpine): reading on from it misses nothing that
// commits later.
func (db *DB) SpineHead(ctx context.Context) (SpineCursor, error) {
	var h uint64
	if err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())`).Scan(&h); err != nil {
		return SpineCursor{}, fmt.Errorf("spine head: %w", err)
	}
	return spineHead(h), nil
}

// LiveGrant is what a subscription starts with: the workspace it reads, the
// caller's role there and the token's expiry, all read in one snapshot,
// together with that snapshot's spine head.
type LiveGrant struct {
	WorkspaceID string
	Role        Role
	// TokenExpires is when the caller's token expires.
	TokenExpires time.Time
	// Head is the spine head of the snapshot the grant was read in: every
	// membership change before it is in Role; every one after it is an event
	// past Head.
	Head SpineCursor
	// Current is where the events of transactions that began after the
	// grant was read start (the snapshot's xmax): the grant holds for every
	// event from it on (until a membership event changes it), and for no
	// event before it that a membership event had taken away.
	Current SpineCursor
}

// LiveAccess reads the grant of a subscription by user, authenticated by the
// token with SHA-256 tokenHash, to the workspace workspaceID or, when
// projectID is not empty, to the workspace of that project, in one
// statement. It returns UNAUTHENTICATED when the token is unknown, revoked,
// expired or not the user's, and NOT_FOUND (for the project or the
// workspace) when it does not exist or the user is not a member.
func (db *DB) LiveAccess(ctx context.Context, userID string, tokenHash []byte, workspaceID, projectID string) (*LiveGrant, error) {
	kind, id := "workspace", workspaceID
	scope := `SELECT $3::uuid AS ws WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = $3::uuid)`
	if projectID != "" {
		kind, id = "project", projectID
		scope = `SELECT workspace_id AS ws FROM projects WHERE id = $3::uuid`
	}
	if !validID(id) {
		return nil, notFound(kind)
	}
	var g LiveGrant
	var horizon, xmax uint64
	var ws, role *string
	var expires *time.Time
	err := db.Pool.QueryRow(ctx, `WITH s AS (`+scope+`)
		SELECT pg_snapshot_xmin(pg_current_snapshot()), pg_snapshot_xmax(pg_current_snapshot()),
			(SELECT expires_at FROM tokens WHERE token_hash = $1 AND user_id = $2
				AND revoked_at IS NULL AND expires_at > now()),
			(SELECT ws::text FROM s),
			(SELECT m.role FROM s JOIN members m ON m.workspace_id = s.ws AND m.user_id = $2)`,
		tokenHash, userID, id).Scan(&horizon, &xmax, &expires, &ws, &role)
	if err != nil {
		return nil, fmt.Errorf("subscription access: %w", err)
	}
	if expires == nil {
		return nil, ErrInvalidToken
	}
	if ws == nil || role == nil {
		return nil, notFound(kind)
	}
	g.WorkspaceID, g.Role, g.TokenExpires, g.Head = *ws, Role(*role), *expires, spineHead(horizon)
	g.Current = SpineCursor{TxID: xmax}
	return &g, nil
}

// TokensExpire returns, by SHA-256 (as a string), when each of the tokens
// with these hashes that is known, not revoked and not expired expires (in
// this instance's clock, from the time left in Postgres's: no skew), read
// from the database in one statement (not from what UserByTokenHash
// remembers: a subscription reads its token after a logout event, which
// another instance's memory may not know of yet). A token left out is no
// longer valid.
func (db *DB) TokensExpire(ctx context.Context, tokenHashes [][]byte) (map[string]time.Time, error) {
	sent := time.Now()
	rows, err := db.Pool.Query(ctx, `SELECT token_hash, (extract(epoch FROM expires_at - now()) * 1000)::bigint
		FROM tokens WHERE token_hash = ANY($1) AND revoked_at IS NULL AND expires_at > now()`, tokenHashes)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	out := map[string]time.Time{}
	var hash []byte
	var leftMs int64
	_, err = pgx.ForEachRow(rows, []any{&hash, &leftMs}, func() error {
		out[string(hash)] = sent.Add(time.Duration(leftMs) * time.Millisecond)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	return out, nil
}

// SpineRoute names the task (and project) an event of a task or a comment is
// about.
type SpineRoute struct {
	ProjectID, TaskID string
}

// SpineRoutes returns where the task.* and comment.* events among events
// belong, by event id: their task, and its project. Tasks and comments that
// still exist are read from their tables; those deleted since are found by
// the task.created/task.deleted and comment.created/comment.deleted events
// that recorded them (so a route is known as long as the log keeps them).
// Other events are left out.
func (db *DB) SpineRoutes(ctx context.Context, events []SpineEvent) (map[string]SpineRoute, error) {
	out := map[string]SpineRoute{}
	commentTask := map[string]string{} // comment id → task id
	taskProject := map[string]string{} // task id → project id
	var needComments, needTasks []string
	var wss []string
	for i := range events {
		r := &events[i].Record
		switch r.EntityType {
		case "task":
			if p, ok := r.Metadata["projectId"].(string); ok {
				taskProject[r.EntityID] = p
			} else {
				needTasks = append(needTasks, r.EntityID)
			}
		case "comment":
			if t, ok := r.Metadata["taskId"].(string); ok {
				commentTask[r.EntityID] = t
			} else {
				needComments = append(needComments, r.EntityID)
			}
		default:
			continue
		}
		if r.WorkspaceID != nil {
			wss = append(wss, *r.WorkspaceID)
		}
	}
	if len(needComments) > 0 {
		if err := db.routeLookup(ctx, `SELECT id::text, task_id::text FROM comments WHERE id = ANY($1::text[]::uuid[])`,
			"comment", "comment.created", "taskId", needComments, wss, commentTask); err != nil {
			return nil, err
		}
	}
	for _, t := range commentTask {
		if _, ok := taskProject[t]; !ok {
			needTasks = append(needTasks, t)
		}
	}
	if len(needTasks) > 0 {
		if err := db.routeLookup(ctx, `SELECT id::text, project_id::text FROM tasks WHERE id = ANY($1::text[]::uuid[])`,
			"task", "task.created", "projectId", needTasks, wss, taskProject); err != nil {
			return nil, err
		}
	}
	for i := range events {
		r := &events[i].Record
		switch r.EntityType {
		case "task":
			out[r.ID] = SpineRoute{ProjectID: taskProject[r.EntityID], TaskID: r.EntityID}
		case "comment":
			t := commentTask[r.EntityID]
			out[r.ID] = SpineRoute{ProjectID: taskProject[t], TaskID: t}
		}
	}
	return out, nil
}

// routeLookup maps ids to their parents into into: first from the table (the
// query tableSQL, $1 the ids), then, for the ids it did not find (deleted),
// from the parent field of the metadata of their creation event in the
// workspaces wss.
func (db *DB) routeLookup(ctx context.Context, tableSQL, entityType, created, field string, ids, wss []string, into map[string]string) error {
	scan := func(rows pgx.Rows, err error) error {
		if err != nil {
			return fmt.Errorf("route events: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var parent *string
			if err := rows.Scan(&id, &parent); err != nil {
				return fmt.Errorf("route events: %w", err)
			}
			if parent != nil {
				into[id] = *parent
			}
		}
		return rows.Err()
	}
	if err := scan(db.Pool.Query(ctx, tableSQL, ids)); err != nil {
		return err
	}
	var gone []string
	for _, id := range ids {
		if _, ok := into[id]; !ok {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return scan(db.Pool.Query(ctx, `SELECT entity_id, metadata->>$5 FROM audit_events
		WHERE workspace_id = ANY($2::uuid[]) AND entity_type = $3 AND entity_id = ANY($1::text[]) AND action = $4`,
		gone, wss, entityType, created, field))
}

// LiveComment returns the comment with this id as it is now if viewer is a
// member of its workspace, or nil when it is gone or not visible.
func (db *DB) LiveComment(ctx context.Context, viewer *User, id string) (*Comment, error) {
	if viewer == nil || !validID(id) {
		return nil, nil
	}
	c, err := scanComment(db.q(ctx).QueryRow(ctx, `SELECT `+commentColumns+` FROM comments c
		JOIN members m ON m.workspace_id = c.workspace_id AND m.user_id = $2 WHERE c.id = $1`, id, viewer.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("comment: %w", err)
	}
	return c, nil
}

// LiveMember returns the membership of userID in the workspace as it is now
// if viewer is a member there too, or nil when there is none or it is not
// visible.
func (db *DB) LiveMember(ctx context.Context, viewer *User, workspaceID, userID string) (*Member, error) {
	if viewer == nil || !validID(workspaceID) || !validID(userID) {
		return nil, nil
	}
	var m Member
	err := db.q(ctx).QueryRow(ctx, `SELECT m.workspace_id, m.user_id, m.role, m.joined_at FROM members m
		JOIN members v ON v.workspace_id = m.workspace_id AND v.user_id = $3
		WHERE m.workspace_id = $1 AND m.user_id = $2`, workspaceID, userID, viewer.ID).
		Scan(&m.WorkspaceID, &m.UserID, &m.Role, &m.JoinedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("member: %w", err)
	}
	return &m, nil
}

// AuditMatcher returns a function that tells whether an event matches the
// filter as auditEvents applies it (actions exact or by prefix, actor, entity
// type and id, since inclusive, until exclusive), or the BAD_USER_INPUT
// errors of auditEvents for a bad filter.
func (f AuditFilter) AuditMatcher() (func(*audit.Record) bool, error) {
	n, err := f.normalized()
	if err != nil {
		return nil, err
	}
	return func(r *audit.Record) bool {
		if len(n.Actions) > 0 && !ActionMatches(n.Actions, r.Action) {
			return false
		}
		if n.ActorID != nil && (r.ActorID == nil || !strings.EqualFold(*r.ActorID, *n.ActorID)) {
			return false
		}
		if n.EntityType != nil && r.EntityType != *n.EntityType {
			return false
		}
		if n.EntityID != nil && r.EntityID != *n.EntityID {
			return false
		}
		if n.Since != nil && r.OccurredAt.Before(*n.Since) {
			return false
		}
		if n.Until != nil && !r.OccurredAt.Before(*n.Until) {
			return false
		}
		return true
	}, nil
}

// ActionMatches reports whether action is one of patterns: exact actions or
// prefixes ending in "*", as in AuditFilter.Actions.
func ActionMatches(patterns []string, action string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(action, prefix) {
				return true
			}
		} else if p == action {
			return true
		}
	}
	return false
}

// AuditEventOf returns the event as the API shows it, from a record read from
// the spine: not sealed (the sealer may not have reached it; auditEvents
// shows its seal later).
func AuditEventOf(r *audit.Record) *AuditEvent {
	// Metadata decoded from jsonb always encodes again; null if it did not.
	meta, _ := json.Marshal(r.Metadata)
	return &AuditEvent{ID: r.ID, WorkspaceID: r.WorkspaceID, ActorID: r.ActorID, Action: r.Action,
		EntityType: r.EntityType, EntityID: r.EntityID, OccurredAt: r.OccurredAt, IP: r.IP,
		UserAgent: r.UserAgent, RequestID: r.RequestID, Metadata: meta, TraceID: r.TraceID}
}

// Before reports whether c comes before d in spine order.
func (c SpineCursor) Before(d SpineCursor) bool { return c.less(d) }
