package store

import (
	"encoding/json"
	"testing"
	"time"
)

// pageItem is an item of a list in the tests of connection.
type pageItem struct {
	ID string
	At time.Time
}

// The edges of a page make, when asked, the very cursors the page used to make
// up front, and the page's JSON is what it was: the goldens below come from
// the code before cursors were made lazily, so the cursors clients hold keep
// working.
func TestConnectionCursorsAndJSON(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.FixedZone("CET", 3600))
	items := []*pageItem{
		{ID: "6f1c1f3e-6a4c-4d0e-9a6e-0c2f5b8f9d11", At: at},
		{ID: "0b9e8f0a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", At: at.Add(-time.Second)},
		{ID: "ffffffff-1c2d-4e5f-8a9b-0c1d2e3f4a5b", At: at.Add(-2 * time.Second)},
	}
	key := func(it *pageItem) (time.Time, string) { return it.At, it.ID }
	cursors := []string{
		"eyJ0IjoiMjAyNi0xMS0zMFQwMDowMjowMy40NTY3ODlaIiwiaSI6IjZmMWMxZjNlLTZhNGMtNGQwZS05YTZlLTBjMmY1YjhmOWQxMSIsInMiOiJ0YXNrczpwOiJ9",
		"eyJ0IjoiMjAyNi0xMS0zMFQwMDowMjowMi40NTY3ODlaIiwiaSI6IjBiOWU4ZjBhLTFjMmQtNGU1Zi04YTliLTBjMWQyZTNmNGE1YiIsInMiOiJ0YXNrczpwOiJ9",
		"eyJ0IjoiMjAyNi0xMS0zMFQwMDowMjowMS40NTY3ODlaIiwiaSI6ImZmZmZmZmZmLTFjMmQtNGU1Zi04YTliLTBjMWQyZTNmNGE1YiIsInMiOiJ0YXNrczpwOiJ9",
	}
	for _, first := range []int{2, 3} {
		c := connection(items, Page{First: first}, "tasks:p:", key)
		if len(c.Edges) != first || c.PageInfo.HasNextPage != (first < len(items)) {
			t.Fatalf("first %d: %d edges, hasNextPage %v", first, len(c.Edges), c.PageInfo.HasNextPage)
		}
		for i, e := range c.Edges {
			if e.Node != items[i] || e.Cursor() != cursors[i] {
				t.Errorf("first %d: edge %d is %v with cursor %q, want %v with %q", first, i, e.Node, e.Cursor(), items[i], cursors[i])
			}
		}
		if end := c.PageInfo.EndCursor(); end == nil || *end != cursors[first-1] {
			t.Errorf("first %d: endCursor %v, want %q", first, end, cursors[first-1])
		}
	}
	b, err := json.Marshal(connection(items, Page{First: 2}, "tasks:p:", key))
	want := `{"edges":[` +
		`{"cursor":"` + cursors[0] + `","node":{"ID":"6f1c1f3e-6a4c-4d0e-9a6e-0c2f5b8f9d11","At":"2026-11-30T01:02:03.456789+01:00"}},` +
		`{"cursor":"` + cursors[1] + `","node":{"ID":"0b9e8f0a-1c2d-4e5f-8a9b-0c1d2e3f4a5b","At":"2026-11-30T01:02:02.456789+01:00"}}],` +
		`"pageInfo":{"hasNextPage":true,"endCursor":"` + cursors[1] + `"}}`
	if err != nil || string(b) != want {
		t.Errorf("JSON of a page:\n%s, %v\nwant\n%s", b, err, want)
	}
	empty := connection([]*pageItem{}, Page{First: 2}, "x", key)
	if empty.PageInfo.EndCursor() != nil {
		t.Error("an empty page has an endCursor")
	}
	if b, err := json.Marshal(empty); err != nil || string(b) != `{"edges":[],"pageInfo":{"hasNextPage":false,"endCursor":null}}` {
		t.Errorf("JSON of an empty page: %s, %v", b, err)
	}
	if c := (&Edge[pageItem]{Node: items[0]}).Cursor(); c != "" {
		t.Errorf("an edge of no page has cursor %q", c)
	}
}

// A search result's cursor carries its rank, as it used to.
func TestSearchConnectionCursors(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.FixedZone("CET", 3600))
	tasks := []*Task{{ID: "6f1c1f3e-6a4c-4d0e-9a6e-0c2f5b8f9d11", CreatedAt: at}, {ID: "0b9e8f0a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", CreatedAt: at}}
	c := searchConnection(tasks, []float32{0.0607927, 0.01}, 1, "search:w:abc")
	want := "eyJyIjowLjA2MDc5MjcsInQiOiIyMDI2LTExLTMwVDAwOjAyOjAzLjQ1Njc4OVoiLCJpIjoiNmYxYzFmM2UtNmE0Yy00ZDBlLTlhNmUtMGMyZjViOGY5ZDExIiwicyI6InNlYXJjaDp3OmFiYyJ9"
	if len(c.Edges) != 1 || !c.PageInfo.HasNextPage || c.Edges[0].Cursor() != want || *c.PageInfo.EndCursor() != want {
		t.Fatalf("%d edges, hasNextPage %v, cursor %q", len(c.Edges), c.PageInfo.HasNextPage, c.Edges[0].Cursor())
	}
	if _, err := decodeSearchCursor(&want, "search:w:abc"); err != nil {
		t.Fatal(err)
	}
}
