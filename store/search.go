package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"taskflow/errs"
)

// MaxSearchQueryLength is the longest search query accepted, in characters.
const MaxSearchQueryLength = 500

// DefaultSearchPageSize is the page size of search results when first is not given.
const DefaultSearchPageSize = 20

// searchCursor is the position of a result in a list ordered by (rank, created_at,
// id) descending. Scope binds it to the workspace and query it came from.
type searchCursor struct {
	Rank  float32   `json:"r"`
	At    time.Time `json:"t"`
	ID    string    `json:"i"`
	Scope string    `json:"s"`
}

// searchScope is the cursor scope of a search: the workspace and a digest of the
// query (the cursor need not carry the query's text).
func searchScope(workspaceID, query string) string {
	sum := sha256.Sum256([]byte(query))
	return "search:" + workspaceID + ":" + hex.EncodeToString(sum[:12])
}

// encodeSearchCursor returns the opaque form of a search position.
func encodeSearchCursor(rank float32, at time.Time, id, scope string) string {
	b, _ := json.Marshal(searchCursor{Rank: rank, At: at.UTC(), ID: id, Scope: scope})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeSearchCursor parses an opaque search cursor of scope; nil for none, a
// BAD_USER_INPUT error for one that is malformed or from another search.
func decodeSearchCursor(after *string, scope string) (*searchCursor, error) {
	if after == nil || *after == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(*after)
	if err != nil {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: malformed cursor")
	}
	var c searchCursor
	if err := json.Unmarshal(b, &c); err != nil || c.At.IsZero() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: malformed cursor")
	}
	if !validID(c.ID) {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: malformed cursor")
	}
	if c.Scope != scope {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: the cursor belongs to another search")
	}
	return &c, nil
}

// SearchTasks runs a full-text search (websearch syntax, English) over the titles
// and descriptions of the tasks of one workspace, as viewer (any role). Results
// come best match first by ts_rank, ties newest first by (created_at, id); the
// cursor carries the rank, so paging is keyset, not offset. It returns a NOT_FOUND
// error if the workspace does not exist or viewer is not a member, and
// BAD_USER_INPUT for an empty or too long query, first out of 1..100, or a
// cursor from another workspace or query. The Tasks have the fields of fields
// set.
func (db *DB) SearchTasks(ctx context.Context, viewer *User, workspaceID, query string, first *int, after *string, fields TaskFields) (*TaskConnection, error) {
	if viewer == nil {
		return nil, errs.ErrUnauthenticated
	}
	query = strings.TrimSpace(query)
	if query == "" {
		return nil, errs.Errorf(errs.CodeBadUserInput, "query must not be empty")
	}
	if utf8.RuneCountInString(query) > MaxSearchQueryLength {
		return nil, errs.Errorf(errs.CodeBadUserInput, "query must be at most %d characters", MaxSearchQueryLength)
	}
	n, err := pageSize(first, DefaultSearchPageSize)
	if err != nil {
		return nil, err
	}
	scope := searchScope(workspaceID, query)
	cur, err := decodeSearchCursor(after, scope)
	if err != nil {
		return nil, err
	}
	if !validID(workspaceID) {
		return nil, notFound("workspace")
	}
	var rank *float32
	var at *time.Time
	var id *string
	if cur != nil {
		rank, at, id = &cur.Rank, &cur.At, &cur.ID
	}
	// The viewer's membership and the search go in one round trip; the
	// search finds nothing unless the viewer is a member (its EXISTS is a
	// one-time filter, so a stranger's search scans nothing).
	b := &pgx.Batch{}
	b.Queue(roleInSQL, workspaceID, viewer.ID)
	var sc taskScanner
	scan := sc.scanOf(fields)
	b.Queue(`SELECT t.rank, `+fields.columns()+`
		FROM (SELECT t.*, ts_rank(t.search, q.q) AS rank
			FROM tasks t, websearch_to_tsquery('english', $2) AS q(q)
			WHERE t.workspace_id = $1 AND t.search @@ q.q
				AND EXISTS (SELECT 1 FROM members v WHERE v.workspace_id = $1 AND v.user_id = $7)) t
		WHERE $3::real IS NULL OR (t.rank, t.created_at, t.id) < ($3::real, $4::timestamptz, $5::uuid)
		ORDER BY t.rank DESC, t.created_at DESC, t.id DESC
		LIMIT $6`, workspaceID, query, rank, at, id, n+1, viewer.ID)
	br := db.q(ctx).SendBatch(ctx, b)
	defer br.Close()
	if _, err := scanRole(br.QueryRow(), "workspace"); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	defer rows.Close()
	var tasks []*Task
	var ranks []float32
	var r float32
	for rows.Next() {
		t, err := scan(rows, &r)
		if err != nil {
			return nil, fmt.Errorf("search tasks: %w", err)
		}
		tasks = append(tasks, t)
		ranks = append(ranks, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	return searchConnection(tasks, ranks, n, scope), nil
}

// searchConnection builds a page of search results from up to first+1 tasks,
// best first, and their ranks. Its edges' cursors are searchCursors of scope,
// made when asked for.
func searchConnection(tasks []*Task, ranks []float32, first int, scope string) *TaskConnection {
	c := connection(tasks, Page{First: first}, scope, taskKey)
	c.list.search = true
	for i, e := range c.Edges {
		e.rank = ranks[i]
	}
	return c
}
