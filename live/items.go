package live

import (
	"encoding/json"
	"time"

	"taskflow/store"
)

// TaskChange is an item of taskChanges: a change of a task or of one of its
// comments. The task and comment themselves are read when it is delivered.
type TaskChange struct {
	Cursor     string
	Action     string
	OccurredAt time.Time
	ActorID    *string
	TaskID     string
	// CommentID is set for comment.* events.
	CommentID *string
	Changes   store.RawJSON
}

// NewTaskChange is the item of a task or comment event.
func NewTaskChange(e *Event) *TaskChange {
	c := &TaskChange{Cursor: e.Cursor.String(), Action: e.Record.Action, OccurredAt: e.Record.OccurredAt,
		ActorID: e.Record.ActorID, TaskID: e.Route.TaskID, Changes: changes(e)}
	if e.Record.EntityType == "comment" {
		id := e.Record.EntityID
		c.CommentID = &id
	}
	return c
}

// WorkspaceChange is an item of workspaceChanges: a change of a project or
// of a membership.
type WorkspaceChange struct {
	Cursor      string
	Action      string
	OccurredAt  time.Time
	ActorID     *string
	WorkspaceID string
	// ProjectID is set for project.* events, UserID for member.* events.
	ProjectID *string
	UserID    *string
	Changes   store.RawJSON
}

// NewWorkspaceChange is the item of a project or member event.
func NewWorkspaceChange(e *Event) *WorkspaceChange {
	c := &WorkspaceChange{Cursor: e.Cursor.String(), Action: e.Record.Action, OccurredAt: e.Record.OccurredAt,
		ActorID: e.Record.ActorID, Changes: changes(e)}
	if e.Record.WorkspaceID != nil {
		c.WorkspaceID = *e.Record.WorkspaceID
	}
	id := e.Record.EntityID
	if e.Record.EntityType == "project" {
		c.ProjectID = &id
	} else {
		c.UserID = &id
	}
	return c
}

// AuditItem is an item of auditEventAdded.
type AuditItem struct {
	Cursor string
	Event  *store.AuditEvent
}

// NewAuditItem is the item of an audit event.
func NewAuditItem(e *Event) *AuditItem {
	return &AuditItem{Cursor: e.Cursor.String(), Event: store.AuditEventOf(e.Record)}
}

// changes is metadata.changes of an update, else the whole metadata.
func changes(e *Event) store.RawJSON {
	var v any = e.Record.Metadata
	if ch, ok := e.Record.Metadata["changes"]; ok {
		v = ch
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
