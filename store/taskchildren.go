package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// childPageKey names one page of a task's children (comments, attachments):
// the task, the page size and the opaque cursor ("" for the first page).
type childPageKey struct {
	TaskID string
	First  int
	After  string
}

// childList describes a list of things that belong to a task, newest first by
// (created_at, id), read a page per task (Task.comments, Task.attachments).
type childList[T any] struct {
	// table is the table, alias its alias in columns.
	table, alias string
	// columns are the columns scan reads before the page's ordinal.
	columns string
	// join joins the page's rows (alias) to the tables of more of columns
	// ("" for none).
	join string
	// pageSize is the page size when first is not given.
	pageSize int
	// scope is the cursor scope of a task's list.
	scope func(taskID string) string
	// scan reads the columns, then the ordinal of the page into ord.
	scan func(row pgx.Row, ord *int64) (*T, error)
	// key returns an item's position in the list.
	key func(*T) (time.Time, string)
}

// newKey validates a page request for the list of a task (first nil means the
// list's page size) and returns its key. It returns a BAD_USER_INPUT error for
// first out of 1..100 or a cursor that is malformed or comes from another list.
func (l childList[T]) newKey(taskID string, first *int, after *string) (childPageKey, error) {
	p, err := NewPage(first, l.pageSize, after, l.scope(taskID))
	if err != nil {
		return childPageKey{}, err
	}
	k := childPageKey{TaskID: taskID, First: p.First}
	if after != nil {
		k.After = *after
	}
	return k, nil
}

// pages returns one page of the list for each key, in the order of keys, with
// one query for all of them. It checks no access. It returns a BAD_USER_INPUT
// error for a key whose cursor is invalid.
func (l childList[T]) pages(ctx context.Context, q Querier, keys []childPageKey) ([]*Connection[T], error) {
	pages := make([]Page, len(keys))
	taskIDs := make([]string, len(keys))
	ats := make([]*time.Time, len(keys))
	afterIDs := make([]*string, len(keys))
	limits := make([]int32, len(keys))
	for i, k := range keys {
		p, err := NewPage(&k.First, l.pageSize, &k.After, l.scope(k.TaskID))
		if err != nil {
			return nil, err
		}
		pages[i] = p
		taskIDs[i] = k.TaskID
		if !validID(k.TaskID) {
			taskIDs[i] = "00000000-0000-0000-0000-000000000000"
		}
		if p.After != nil {
			ats[i], afterIDs[i] = &p.After.At, &p.After.ID
		}
		limits[i] = int32(p.First + 1)
	}
	a := l.alias
	rows, err := q.Query(ctx, `SELECT `+l.columns+`, k.ord
		FROM unnest($1::text[]::uuid[], $2::timestamptz[], $3::text[]::uuid[], $4::int[])
			WITH ORDINALITY AS k(task_id, at, id, lim, ord)
		CROSS JOIN LATERAL (
			SELECT * FROM `+l.table+` `+a+`
			WHERE `+a+`.task_id = k.task_id
				AND (k.at IS NULL OR (`+a+`.created_at, `+a+`.id) < (k.at, k.id))
			ORDER BY `+a+`.created_at DESC, `+a+`.id DESC
			LIMIT k.lim) `+a+l.join+`
		ORDER BY k.ord, `+a+`.created_at DESC, `+a+`.id DESC`,
		taskIDs, ats, afterIDs, limits)
	if err != nil {
		return nil, fmt.Errorf("%s pages: %w", l.table, err)
	}
	defer rows.Close()
	items := make([][]*T, len(keys))
	for rows.Next() {
		var ord int64
		it, err := l.scan(rows, &ord)
		if err != nil {
			return nil, fmt.Errorf("%s pages: %w", l.table, err)
		}
		items[ord-1] = append(items[ord-1], it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s pages: %w", l.table, err)
	}
	out := make([]*Connection[T], len(keys))
	for i, k := range keys {
		out[i] = connection(items[i], pages[i], l.scope(k.TaskID), l.key)
	}
	return out, nil
}

// childKeys converts page keys of a named key type to childPageKey.
func childKeys[K ~struct {
	TaskID string
	First  int
	After  string
}](keys []K) []childPageKey {
	out := make([]childPageKey, len(keys))
	for i, k := range keys {
		out[i] = childPageKey(k)
	}
	return out
}
