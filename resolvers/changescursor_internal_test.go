package resolvers

import (
	"context"
	"errors"
	"testing"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/store"
)

// changesCursor answers only from the head read before the operation: it is
// UNAUTHENTICATED for an anonymous caller, a bug (never a head of its own)
// when none was read, the read's error when it failed, and the cursor.
func TestChangesCursorFromTheHeadReadBefore(t *testing.T) {
	t.Parallel()
	signedIn := auth.WithUser(context.Background(), &store.User{ID: "00000000-0000-0000-0000-0000000000a1"})
	head := store.SpineCursor{TxID: 41, Seq: 1<<63 - 1}
	if _, err := changesCursor(WithChangesCursor(context.Background(), head, nil)); errs.CodeOf(err) != errs.CodeUnauthenticated {
		t.Errorf("anonymous: %v, want UNAUTHENTICATED", err)
	}
	if _, err := changesCursor(signedIn); !errors.Is(err, errNoChangesCursor) {
		t.Errorf("no head read: %v, want errNoChangesCursor", err)
	}
	failed := errors.New("spine head: connection refused")
	if _, err := changesCursor(WithChangesCursor(signedIn, store.SpineCursor{}, failed)); !errors.Is(err, failed) {
		t.Errorf("failed read: %v, want %v", err, failed)
	}
	got, err := changesCursor(WithChangesCursor(signedIn, head, nil))
	if err != nil || got != head.String() {
		t.Fatalf("= %q, %v; want %q", got, err, head.String())
	}
	if c, err := store.ParseSpineCursor(got); err != nil || c != head {
		t.Fatalf("ParseSpineCursor(%q) = %+v, %v", got, c, err)
	}
}
