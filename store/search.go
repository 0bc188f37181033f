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
//
// A page ranks every task of the workspace that matches the query (those
// before its cursor too) to find its tasks. When matched is not nil it is
// called, once the page is read and before it is returned, with how many
// tasks matched (0 for a viewer who is not a member), so that the caller can
// charge for them; an error of matched is returned instead of the page.
func (db *DB) SearchTasks(ctx context.Context, viewer *User, workspaceID, query string, first *int, after *string, fields TaskFields,
	matched func(n int) error) (*TaskConnection, error) {
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
	// one-time filter, so a stranger's search scans nothing). The matches
	// are ranked with their number (count over the ranked rows) and whether
	// they come after the cursor (past); those that do come first, and the
	// others fill a short page, so that even an empty page tells how many
	// tasks it ranked (the lead array: rank, matches, past). Only the page's
	// rows are read whole.
	b := &pgx.Batch{}
	b.Queue(roleInSQL, workspaceID, viewer.ID)
	var sc taskScanner
	scan := sc.scanOf(fields)
	b.Queue(`SELECT ARRAY[m.rank::float8, m.matches, m.past::int], `+fields.columns()+`
		FROM (SELECT m.*, count(*) OVER () AS matches,
				($3::real IS NULL OR (m.rank, m.created_at, m.id) < ($3::real, $4::timestamptz, $5::uuid)) AS past
			FROM (SELECT t.id, t.created_at, ts_rank(t.search, q.q) AS rank
				FROM tasks t, websearch_to_tsquery('english', $2) AS q(q)
				WHERE t.workspace_id = $1 AND t.search @@ q.q
					AND EXISTS (SELECT 1 FROM members v WHERE v.workspace_id = $1 AND v.user_id = $7)) m
			ORDER BY past DESC, m.rank DESC, m.created_at DESC, m.id DESC
			LIMIT $6) m
		JOIN tasks t ON t.id = m.id
		ORDER BY m.past DESC, m.rank DESC, m.created_at DESC, m.id DESC`, workspaceID, query, rank, at, id, n+1, viewer.ID)
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
	var lead []float64
	matches := 0
	for rows.Next() {
		t, err := scan(rows, &lead)
		if err != nil {
			return nil, fmt.Errorf("search tasks: %w", err)
		}
		if len(lead) != 3 {
			return nil, fmt.Errorf("search tasks: a lead of %d values", len(lead))
		}
		matches = int(lead[1])
		if lead[2] == 1 {
			tasks = append(tasks, t)
			ranks = append(ranks, float32(lead[0]))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	rows.Close()
	if matched != nil {
		if err := matched(matches); err != nil {
			return nil, err
		}
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
