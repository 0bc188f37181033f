package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
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
// before its cursor too) to find its tasks. When ranking is not nil it is
// called before the search, once its arguments are checked and before the
// viewer's membership is, with the most tasks it may rank: SearchCountFrom-1
// in a workspace this instance found smaller than that, else -1 (no bound is
// known before the search: any task of the workspace may match), so that the
// caller can refuse a search it could not pay for; an error of ranking is
// returned and nothing is read. When matched is not nil it is called, once
// the page is read and before it is returned, with how many tasks matched
// (0 for a viewer who is not a member), so that the caller can charge for
// them; an error of matched is returned instead of the page.
func (db *DB) SearchTasks(ctx context.Context, viewer *User, workspaceID, query string, first *int, after *string, fields TaskFields,
	ranking, matched func(n int) error) (*TaskConnection, error) {
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
	// one-time filter, so a stranger's search scans nothing). Every row
	// tells how many tasks the query matched, for the charge of
	// ratelimit.SearchCost (a point per 1,000 matches, so nothing under
	// 1,000): counted from the ranked matches (searchSQL), once a
	// statement, in a workspace of at least SearchCountFrom tasks; -1 in a
	// smaller one, where no query matches as many, which this instance
	// then remembers for smallWorkspaceTTL and searches without counting.
	// Measured on 2026-12-05 in bench/load's searchTasks (a workspace of
	// 100 tasks, `-exec -peer=false`, runs alternating with 6c3ae70, which
	// did not count): Postgres CPU a search 129-143 µs without counting;
	// counting the ranked rows with a window over them 164-203 µs; looking
	// at the workspace's size first (100 index entries) 164-180 µs;
	// remembered, 152-156 µs against 139-153 µs in the same runs. A page that is empty after a cursor has no row to
	// tell it, so its matches are counted by a statement of their own, a
	// round trip more: a cursor past every match still pays for ranking
	// them.
	counted, most := true, -1
	if _, small := db.smallWorkspaces.GetIfPresent(workspaceID); small {
		counted, most = false, SearchCountFrom-1
	}
	if ranking != nil {
		if err := ranking(most); err != nil {
			return nil, err
		}
	}
	b := &pgx.Batch{}
	b.Queue(roleInSQL, workspaceID, viewer.ID)
	var sc taskScanner
	scan := sc.scanOf(fields)
	b.Queue(searchSQL(fields.columns(), counted), workspaceID, query, rank, at, id, n+1, viewer.ID)
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
	var lead []float64 // the rank (a real, exact as a float8) and the matches
	var matches int64
	for rows.Next() {
		t, err := scan(rows, &lead)
		if err != nil {
			return nil, fmt.Errorf("search tasks: %w", err)
		}
		if len(lead) != 2 {
			return nil, fmt.Errorf("search tasks: a lead of %d values", len(lead))
		}
		tasks = append(tasks, t)
		ranks, matches = append(ranks, float32(lead[0])), int64(lead[1])
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	rows.Close()
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	if len(tasks) == 0 && cur != nil && matched != nil {
		if err := db.q(ctx).QueryRow(ctx, `SELECT (`+searchMatchesSQL+`)`, workspaceID, query).Scan(&matches); err != nil {
			return nil, fmt.Errorf("search tasks: count: %w", err)
		}
	}
	if matches < 0 {
		db.smallWorkspaces.Set(workspaceID, struct{}{})
		matches = 0
	}
	if matched != nil {
		if err := matched(int(matches)); err != nil {
			return nil, err
		}
	}
	return searchConnection(tasks, ranks, n, scope), nil
}

// SearchCountFrom is the fewest tasks a workspace has for a search in it to
// count its matches (SearchTasks): with fewer, no query matches the 1,000
// that a point of its charge takes.
const SearchCountFrom = 1000

// smallWorkspaceTTL is how long an instance remembers a workspace found
// with fewer than SearchCountFrom tasks, searching it without counting the
// matches: a workspace that grows past it is counted again within that
// time.
const smallWorkspaceTTL = time.Minute

// searchSQL is the statement of a search page whose columns (table alias t)
// are columns: the tasks of workspace $1 that match the websearch query $2,
// to viewer $7, a member, after the cursor ($3, $4, $5: rank, created_at and
// id, or NULLs), best first, at most $6. Each row leads with an array of its
// rank and, when counted, how many tasks match, or -1 in a workspace of
// fewer than SearchCountFrom tasks (searchSmallSQL), else -1.
//
// Counted, the matches are looked at once: ranked into a CTE (their id,
// created_at and rank), which gives both the page (a top-N sort, joined back
// to tasks by id for its columns) and the count. Counting them in a
// subquery of their own (searchMatchesSQL), as the statement did until
// 2026-12-05, tested the workspace's tasks against the query twice. The
// backend's CPU a page (first: 20, ListedTaskFields, no parallel workers,
// medians of 6 rounds of 10) in a workspace of 100,000 tasks: a word in
// all of them 134 ms with the second look, 120 ms with the CTE (104 ms
// counting nothing); in 30,000 of them 60, 54 (40); in 12,500 of them 34, 21
// (22); in 100 of them under 1 ms either way. The CTE is materialized (past
// work_mem it spills to a temporary file) and not read by parallel workers.
// Not counted (a workspace remembered small), the matches stream into the
// top-N sort, which a parallel scan can feed, as before.
func searchSQL(columns string, counted bool) string {
	if !counted {
		return `SELECT ARRAY[t.rank::float8, (-1)::float8], ` + columns + `
		FROM (SELECT t.*, ts_rank(t.search, q.q) AS rank
			FROM tasks t, websearch_to_tsquery('english', $2) AS q(q)
			WHERE t.workspace_id = $1 AND t.search @@ q.q
				AND EXISTS (SELECT 1 FROM members v WHERE v.workspace_id = $1 AND v.user_id = $7)) t
		WHERE $3::real IS NULL OR (t.rank, t.created_at, t.id) < ($3::real, $4::timestamptz, $5::uuid)
		ORDER BY t.rank DESC, t.created_at DESC, t.id DESC
		LIMIT $6`
	}
	return `WITH m AS MATERIALIZED (SELECT t.id, t.created_at, ts_rank(t.search, q.q) AS rank
			FROM tasks t, websearch_to_tsquery('english', $2) AS q(q)
			WHERE t.workspace_id = $1 AND t.search @@ q.q
				AND EXISTS (SELECT 1 FROM members v WHERE v.workspace_id = $1 AND v.user_id = $7)),
		p AS (SELECT m.id, m.created_at, m.rank FROM m
			WHERE $3::real IS NULL OR (m.rank, m.created_at, m.id) < ($3::real, $4::timestamptz, $5::uuid)
			ORDER BY m.rank DESC, m.created_at DESC, m.id DESC
			LIMIT $6)
		SELECT ARRAY[p.rank::float8, (CASE WHEN ` + searchSmallSQL + ` THEN -1 ELSE (SELECT count(*) FROM m) END)::float8], ` + columns + `
		FROM p JOIN tasks t ON t.id = p.id
		ORDER BY p.rank DESC, p.created_at DESC, p.id DESC`
}

// searchSmallSQL is whether workspace $1 has fewer than SearchCountFrom
// tasks, read from its index entries (at most SearchCountFrom of them).
var searchSmallSQL = `NOT EXISTS (SELECT 1 FROM tasks w WHERE w.workspace_id = $1 OFFSET ` +
	strconv.Itoa(SearchCountFrom-1) + `)`

// searchMatchesSQL is how many tasks of workspace $1 match the websearch
// query $2, or -1 when the workspace has fewer than SearchCountFrom tasks:
// the statement of its own that counts the matches of a page empty after a
// cursor, which has no row to tell them.
var searchMatchesSQL = `SELECT CASE WHEN ` + searchSmallSQL + ` THEN -1
	ELSE (SELECT count(*) FROM tasks c WHERE c.workspace_id = $1 AND c.search @@ websearch_to_tsquery('english', $2)) END`

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
