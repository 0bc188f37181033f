package store

import (
	"context"
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

// scanCommentAuthor scans the columns of commentColumns and userColumns, then
// extra, and adds the comment's author to authors.
func scanCommentAuthor(row pgx.Row, authors map[string]*User, extra ...any) (*Comment, error) {
	var u User
	c, err := scanComment(row, userDests(&u, extra...)...)
	if err == nil && authors[u.ID] == nil {
		authors[u.ID] = &u
	}
	return c, err
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
	var c *Comment
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		ws, err := db.workspaceOf(ctx, tx, parentTask, taskID)
		if err != nil {
			return err
		}
		now := stamp(time.Now())
		c = &Comment{ID: newID(), TaskID: mustCanonical(taskID), WorkspaceID: ws, AuthorID: actor.ID, Body: body,
			CreatedAt: now, UpdatedAt: now}
		u := unitOfWorkFrom(ctx)
		u.checkParent(parentTask, c.TaskID, actor, RoleMember, "comment on tasks", "", nil)
		u.write("insert comment", `INSERT INTO comments (id, task_id, workspace_id, author_id, body, created_at, updated_at)
			SELECT $1, $2, $3, $4, $5, $6, $7 WHERE taskflow_ok()`,
			[]any{c.ID, c.TaskID, c.WorkspaceID, c.AuthorID, c.Body, c.CreatedAt, c.UpdatedAt}, 1)
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

// commentsTable is the comments table for the write helpers.
var commentsTable = table[Comment]{kind: "comment", name: "comments", alias: "c", columns: commentColumns,
	lock: "FOR UPDATE", scan: scanComment, event: func(c *Comment) (string, string) { return c.WorkspaceID, c.ID },
	withID: func(id string) *Comment { return &Comment{ID: id} }, json: commentSnapshotSQL + ` || ` + timesSQL}

// notAuthor is the FORBIDDEN error of a comment's change by neither its
// author nor an ADMIN or OWNER.
func notAuthor(action string) error {
	return errs.Errorf(errs.CodeForbidden, "only the comment's author or an ADMIN or OWNER may %s", action)
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
	const action = "edit this comment"
	// Only the author or an ADMIN or OWNER, checked by Postgres: one round trip.
	refuse, more, args := ownerOrAdmin("author_id", notAuthor(action))
	return updateRecorded(ctx, db, commentsTable, actor, id, RoleMember, action, "comment.updated",
		[]assign{setTo("body", "body", "text", body)}, refuse, more, args...)
}

// DeleteComment deletes a comment as actor and records comment.deleted with its
// fields, in one round trip with the commit. Only the author (while MEMBER or
// more) or an ADMIN or OWNER may do it. It returns UNAUTHENTICATED for no
// actor, a NOT_FOUND error if the comment does not exist or is in a workspace
// actor is not a member of, and FORBIDDEN for anyone else.
func (db *DB) DeleteComment(ctx context.Context, actor *User, id string) error {
	const action = "delete this comment"
	// Only the author or an ADMIN or OWNER, checked by Postgres: one round trip.
	refuse, more, args := ownerOrAdmin("author_id", notAuthor(action))
	return deleteRecorded(ctx, db, commentsTable, actor, id, RoleMember, action, "comment.deleted", commentSnapshotSQL,
		refuse, more, args...)
}

// commentSnapshotSQL is audit.Snapshot of a Comment as Postgres makes it from
// a comments row d (TestSnapshotsInSQLAreGos compares them).
const commentSnapshotSQL = `jsonb_build_object('id', d.id, 'taskId', d.task_id, 'workspaceId', d.workspace_id,
	'authorId', d.author_id, 'body', d.body)`

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

// CommentPagesWithAuthors is CommentPages that also returns the authors of
// the comments, by id, read in the same statement: a page whose comments show
// their authors (comments { nodes { author { ... } } }) then needs no read of
// them after it. It returns CommentPages' errors.
func (db *DB) CommentPagesWithAuthors(ctx context.Context, keys []CommentPageKey) ([]*CommentConnection, map[string]*User, error) {
	authors := map[string]*User{}
	l := commentList
	l.columns = commentColumns + ", " + userColumns
	l.join = " JOIN users u ON u.id = c.author_id"
	l.scan = func(row pgx.Row, ord *int64) (*Comment, error) { return scanCommentAuthor(row, authors, ord) }
	pages, err := l.pages(ctx, db.q(ctx), childKeys(keys))
	if err != nil {
		return nil, nil, err
	}
	return pages, authors, nil
}

// commentKey returns a comment's position in newest-first lists.
func commentKey(c *Comment) (time.Time, string) { return c.CreatedAt, c.ID }
