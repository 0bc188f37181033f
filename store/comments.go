package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// MaxCommentLength is the longest comment body accepted, in characters.
const MaxCommentLength = 10000

// DefaultCommentPageSize is the page size of comment lists when first is not given.
const DefaultCommentPageSize = 20

// commentColumns is the column list scanned by scanComment (table alias c).
const commentColumns = `c.id, c.task_id, c.workspace_id, c.author_id, c.body, c.created_at, c.updated_at`

// scanComment scans the columns of commentColumns, then the extra destinations.
func scanComment(row pgx.Row, extra ...any) (*Comment, error) {
	var c Comment
	dest := append([]any{&c.ID, &c.TaskID, &c.WorkspaceID, &c.AuthorID, &c.Body, &c.CreatedAt, &c.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	return &c, nil
}

// cleanBody trims a comment body and checks it is non-empty and not too long.
func cleanBody(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errs.Errorf(errs.CodeBadUserInput, "body must not be empty")
	}
	if utf8.RuneCountInString(s) > MaxCommentLength {
		return "", errs.Errorf(errs.CodeBadUserInput, "body must be at most %d characters", MaxCommentLength)
	}
	return s, nil
}

// AddComment adds a comment to a task as actor (MEMBER or more) and records
// comment.created. The body is trimmed. It returns a NOT_FOUND error if the task
// does not exist or is in a workspace actor is not a member of, FORBIDDEN for a
// VIEWER, and BAD_USER_INPUT for an empty or too long body.
func (db *DB) AddComment(ctx context.Context, actor *User, taskID, body string) (*Comment, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	body, err := cleanBody(body)
	if err != nil {
		return nil, err
	}
	if !validID(taskID) {
		return nil, notFound("task")
	}
	var c *Comment
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		var workspaceID string
		var role *Role
		err := tx.QueryRow(ctx, `SELECT t.workspace_id, m.role FROM tasks t`+joinRole("t", "$2")+`
			WHERE t.id = $1 FOR KEY SHARE OF t`, taskID, actor.ID).Scan(&workspaceID, &role)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("task")
		}
		if err != nil {
			return fmt.Errorf("add comment: task: %w", err)
		}
		if _, err := checkRole(role, RoleMember, "task", "comment on tasks"); err != nil {
			return err
		}
		c, err = scanComment(tx.QueryRow(ctx, `INSERT INTO comments AS c (task_id, workspace_id, author_id, body)
			VALUES ($1, $2, $3, $4) RETURNING `+commentColumns, taskID, workspaceID, actor.ID, body))
		if err != nil {
			return fmt.Errorf("add comment: %w", mapError(err))
		}
		return db.appendAudit(ctx, tx, audit.Event{
			WorkspaceID: &c.WorkspaceID, ActorID: &actor.ID, Action: "comment.created",
			EntityID: c.ID, Metadata: audit.Snapshot(c),
		})
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// lockComment reads a comment FOR UPDATE in tx and checks that actor may change
// it: its author with a role of MEMBER or more, or an ADMIN or OWNER. It returns
// NOT_FOUND if the comment does not exist or actor is not a member of its
// workspace, and FORBIDDEN (naming action) otherwise.
func (db *DB) lockComment(ctx context.Context, tx Querier, actor *User, id, action string) (*Comment, error) {
	if !validID(id) {
		return nil, notFound("comment")
	}
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	var member *Role
	c, err := scanComment(tx.QueryRow(ctx, `SELECT `+commentColumns+`, m.role FROM comments c`+joinRole("c", "$2")+`
		WHERE c.id = $1 FOR UPDATE OF c`, id, actor.ID), &member)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("comment")
	}
	if err != nil {
		return nil, fmt.Errorf("lock comment: %w", err)
	}
	role, err := checkRole(member, RoleMember, "comment", action)
	if err != nil {
		return nil, err
	}
	if c.AuthorID != actor.ID && !role.AtLeast(RoleAdmin) {
		return nil, errs.Errorf(errs.CodeForbidden, "only the comment's author or an ADMIN or OWNER may %s", action)
	}
	return c, nil
}

// UpdateComment replaces a comment's body as actor and records comment.updated.
// Only the author (while MEMBER or more) or an ADMIN or OWNER may do it. An
// unchanged body writes nothing and records no event. It returns a NOT_FOUND
// error if the comment does not exist or is in a workspace actor is not a member
// of, FORBIDDEN for anyone else, and BAD_USER_INPUT for an empty or too long body.
func (db *DB) UpdateComment(ctx context.Context, actor *User, id, body string) (*Comment, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	body, err := cleanBody(body)
	if err != nil {
		return nil, err
	}
	var c *Comment
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		before, err := db.lockComment(ctx, tx, actor, id, "edit this comment")
		if err != nil {
			return err
		}
		if before.Body == body {
			c = before
			return nil
		}
		c, err = scanComment(tx.QueryRow(ctx, `UPDATE comments AS c SET body = $2, updated_at = clock_timestamp()
			WHERE c.id = $1 RETURNING `+commentColumns, id, body))
		if err != nil {
			return fmt.Errorf("update comment: %w", err)
		}
		return db.appendAudit(ctx, tx, audit.Event{
			WorkspaceID: &c.WorkspaceID, ActorID: &actor.ID, Action: "comment.updated",
			EntityID: c.ID, Metadata: map[string]any{"changes": audit.Changes(before, c)},
		})
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// DeleteComment deletes a comment as actor and records comment.deleted with its
// fields. Only the author (while MEMBER or more) or an ADMIN or OWNER may do it.
// It returns a NOT_FOUND error if the comment does not exist or is in a workspace
// actor is not a member of, and FORBIDDEN for anyone else.
func (db *DB) DeleteComment(ctx context.Context, actor *User, id string) error {
	if actor == nil {
		return errs.ErrUnauthenticated
	}
	return db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		c, err := db.lockComment(ctx, tx, actor, id, "delete this comment")
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM comments WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete comment: %w", err)
		}
		return db.appendAudit(ctx, tx, audit.Event{
			WorkspaceID: &c.WorkspaceID, ActorID: &actor.ID, Action: "comment.deleted",
			EntityID: c.ID, Metadata: audit.Snapshot(c),
		})
	})
}

// CommentPageKey names one page of a task's comments: the task, the page size and
// the opaque cursor ("" for the first page). It is comparable, so loaders batch
// and cache by it.
type CommentPageKey struct {
	TaskID string
	First  int
	After  string
}

// commentList is Task.comments.
var commentList = childList[Comment]{
	table: "comments", alias: "c", columns: commentColumns, pageSize: DefaultCommentPageSize,
	scope: func(taskID string) string { return "comments:" + taskID },
	scan:  func(row pgx.Row, ord *int64) (*Comment, error) { return scanComment(row, ord) },
	key:   commentKey,
}

// NewCommentPageKey validates a page request for a task's comments (first nil
// means DefaultCommentPageSize) and returns its key. It returns a
// BAD_USER_INPUT error for first out of 1..100 or a cursor that is malformed or
// comes from another task's comments.
func NewCommentPageKey(taskID string, first *int, after *string) (CommentPageKey, error) {
	k, err := commentList.newKey(taskID, first, after)
	return CommentPageKey(k), err
}

// CommentPages returns one page of comments, newest first by (created_at, id), for
// each key, in the order of keys, with one query for all of them. It checks no
// access: callers pass tasks the viewer can see. It returns a BAD_USER_INPUT
// error for a key whose cursor is invalid (keys made by NewCommentPageKey never are).
func (db *DB) CommentPages(ctx context.Context, keys []CommentPageKey) ([]*CommentConnection, error) {
	return commentList.pages(ctx, db.q(ctx), childKeys(keys))
}

// commentKey returns a comment's position in newest-first lists.
func commentKey(c *Comment) (time.Time, string) { return c.CreatedAt, c.ID }
