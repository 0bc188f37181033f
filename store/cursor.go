package store

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"taskflow/errs"

	"github.com/google/uuid"
)

// MinPageSize and MaxPageSize are the smallest and largest first a
// connection accepts (the rate limiter refuses an operation with another
// before it runs, ratelimit's extension).
const (
	MinPageSize = 1
	MaxPageSize = 100
)

// cursor is the position of an item in a list ordered by (created_at, id) newest
// first, or by a pair like it (a member's (joined_at, user id)). Scope binds it to the list it came from (a workspace, a project with its
// filter...), so a cursor of one list is refused by another.
type cursor struct {
	At    time.Time `json:"t"`
	ID    string    `json:"i"`
	Scope string    `json:"s,omitempty"`
}

// encodeCursor returns the opaque form of a position.
func encodeCursor(at time.Time, id, scope string) string {
	b, _ := json.Marshal(cursor{At: at.UTC(), ID: id, Scope: scope})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor parses an opaque cursor of the list named scope. It returns nil for
// no cursor, and a BAD_USER_INPUT error for one that is malformed or belongs to
// another list.
func decodeCursor(after *string, scope string) (*cursor, error) {
	if after == nil || *after == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(*after)
	if err != nil {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: malformed cursor")
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.At.IsZero() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: malformed cursor")
	}
	if !validID(c.ID) {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: malformed cursor")
	}
	if c.Scope != scope {
		return nil, errs.Errorf(errs.CodeBadUserInput, "after: the cursor belongs to another list or filter")
	}
	return &c, nil
}

// pageSize validates first (nil means def) and returns it.
func pageSize(first *int, def int) (int, error) {
	n := def
	if first != nil {
		n = *first
	}
	if n < MinPageSize || n > MaxPageSize {
		return 0, RangeError("first", MinPageSize, MaxPageSize)
	}
	return n, nil
}

// RangeError is the BAD_USER_INPUT error of an argument out of its range,
// "<argument> must be between <min> and <max>": a page's first, refused by
// the store or, before anything runs, by the cost pass.
func RangeError(argument string, min, max int64) *errs.Error {
	return errs.Errorf(errs.CodeBadUserInput, "%s must be between %d and %d", argument, min, max)
}

// Page holds a validated page request: the size and the decoded cursor.
type Page struct {
	First int
	After *cursor
}

// NewPage validates first and after for the list named scope.
func NewPage(first *int, def int, after *string, scope string) (Page, error) {
	n, err := pageSize(first, def)
	if err != nil {
		return Page{}, err
	}
	c, err := decodeCursor(after, scope)
	if err != nil {
		return Page{}, err
	}
	return Page{First: n, After: c}, nil
}

// connection builds a page from up to First+1 rows fetched newest first; key
// returns an item's (created_at, id). It makes no cursor: an edge makes its
// own when asked for.
func connection[T any](items []*T, p Page, scope string, key func(*T) (time.Time, string)) *Connection[T] {
	c := &Connection[T]{list: edgeList[T]{scope: scope, key: key}}
	if len(items) > p.First {
		items = items[:p.First]
		c.PageInfo.HasNextPage = true
	}
	edges := make([]Edge[T], len(items)) // one allocation for all the edges
	c.Edges = make([]*Edge[T], len(items))
	for i, it := range items {
		edges[i] = Edge[T]{Node: it, list: &c.list}
		c.Edges[i] = &edges[i]
	}
	if n := len(edges); n > 0 {
		c.PageInfo.last = &edges[n-1]
	}
	return c
}

// validID reports whether s is a well-formed id; ids that are not cannot exist.
// It takes the forms of uuid.Parse that Postgres's uuid type also reads
// (hyphenated, in braces, 32 hex digits), not urn:uuid:..., which Postgres
// refuses (22P02).
func validID(s string) bool {
	if len(s) == len("urn:uuid:")+36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}
