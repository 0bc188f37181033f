package resolvers

import (
	"context"
	"errors"

	"taskflow/auth"
	"taskflow/store"
)

// changesCursorKey is where WithChangesCursor leaves the spine head of an
// operation that selects changesCursor.
type changesCursorKey struct{}

// changesHead is the head read for changesCursor, or why it could not be.
type changesHead struct {
	cursor store.SpineCursor
	err    error
}

// WithChangesCursor returns ctx carrying the spine head (store.DB.SpineHead)
// that the operation's changesCursor answers, or the error of its read. The
// HTTP layer reads the head before any field of the operation resolves and
// calls this (httpapi's changesCursorExtension: why the order matters is
// there); the resolver never reads the head itself.
func WithChangesCursor(ctx context.Context, head store.SpineCursor, err error) context.Context {
	return context.WithValue(ctx, changesCursorKey{}, &changesHead{cursor: head, err: err})
}

// errNoChangesCursor is a bug: an operation that selects changesCursor ran
// without the head read before it.
var errNoChangesCursor = errors.New("changesCursor: no spine head was read before the operation " +
	"(the HTTP layer's changesCursor extension is not installed)")

// changesCursor answers changesCursor from the head in ctx: UNAUTHENTICATED
// for an anonymous caller, the error of the head's read, or a bug when the
// head was not read before the operation. Reading it here, concurrently with
// the other root fields, would be no cursor at all: it could come after
// their data.
func changesCursor(ctx context.Context) (string, error) {
	if _, err := auth.RequireUser(ctx); err != nil {
		return "", err
	}
	h, _ := ctx.Value(changesCursorKey{}).(*changesHead)
	if h == nil {
		return "", errNoChangesCursor
	}
	if h.err != nil {
		return "", h.err
	}
	return h.cursor.String(), nil
}
