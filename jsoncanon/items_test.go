package jsoncanon

import (
	"strings"
	"testing"
)

// TestWithinItems counts each object's members and each array's elements,
// an empty one as one, and nothing inside strings.
func TestWithinItems(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json  string
		items int
	}{
		{`0`, 0},
		{`"a,b{c[d"`, 0},
		{`{}`, 1},
		{`[]`, 1},
		{`{"a":1}`, 1},
		{`{"a":1,"b":2}`, 2},
		{`[1,2,3]`, 3},
		{`{"a":[{},{}],"b":"x,y"}`, 2 + 2 + 1 + 1},
		{`["\",[{", 1]`, 2},
		{`["\\", [1,2]]`, 2 + 2},
		{` [ [ ] , { "k" : [ 1 , 2 ] } ] `, 2 + 1 + 1 + 2},
	} {
		if !WithinItems([]byte(c.json), c.items) {
			t.Errorf("WithinItems(%s, %d) = false, want true", c.json, c.items)
		}
		if c.items > 0 && WithinItems([]byte(c.json), c.items-1) {
			t.Errorf("WithinItems(%s, %d) = true, want false: it has %d", c.json, c.items-1, c.items)
		}
	}
	// A megabyte of empty objects in one array: 349,525 elements and as
	// many objects, found past the bound early.
	big := []byte("[" + strings.Repeat("{},", 1<<20/3) + "{}]")
	if WithinItems(big, 10_000) {
		t.Error("a megabyte of empty objects is within 10,000 items")
	}
	if n := 2 * (1<<20/3 + 1); !WithinItems(big, n) || WithinItems(big, n-1) {
		t.Errorf("a megabyte of empty objects is not counted %d", n)
	}
}

// Items counts a text cut anywhere, in a string, in an escape, as it counts
// it whole.
func TestItemsInPieces(t *testing.T) {
	t.Parallel()
	text := []byte(` [ [ ] , { "k\"[,{" : [ 1 , "\\" ] , "e" : {} } , "a,b" ] `)
	const want = 3 + 1 + 2 + 2 + 1 // the outer array, [ ], the object, its array, {}
	for cut := range len(text) + 1 {
		for _, max := range []int{want, want - 1} {
			var c Items
			got := c.Add(text[:cut], max) && c.Add(text[cut:], max)
			if got != (max >= want) {
				t.Fatalf("cut at %d (%q | %q), max %d: within %v", cut, text[:cut], text[cut:], max, got)
			}
		}
	}
}
