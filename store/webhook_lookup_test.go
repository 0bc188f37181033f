package store_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"taskflow/errs"
	"taskflow/store"
)

// Only a caller allowed to change an endpoint gets its new URL looked up:
// a stranger or a MEMBER learns nothing of the URL, and cannot make the
// server send DNS queries of their choosing. Not parallel: it swaps the
// process's resolver for one that counts lookups (parallel tests start
// only after it returned).
func TestWebhookURLLookedUpOnlyForAnAdmin(t *testing.T) {
	f := newHookFixture(t)
	ctx := t.Context()
	id := f.endpoint(t)
	var lookups atomic.Int64
	prev := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		lookups.Add(1)
		return nil, errors.New("no DNS in this test")
	}}
	t.Cleanup(func() { net.DefaultResolver = prev })

	stranger := &store.User{ID: "00000000-0000-0000-0000-000000000001"}
	patch := store.WebhookEndpointPatch{URL: ptr("https://hooks.example.com/taskflow")}
	for who, c := range map[*store.User]errs.Code{stranger: errs.CodeNotFound, f.member: errs.CodeForbidden} {
		if _, err := f.db.UpdateWebhookEndpoint(ctx, who, id, patch); errs.CodeOf(err) != c {
			t.Errorf("%s: %v, want %s", who.ID, err, c)
		}
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("refused callers' URL was looked up (%d DNS queries)", n)
	}
	// The owner's is (and this resolver answers nothing): the count can move.
	if _, err := f.db.UpdateWebhookEndpoint(ctx, f.owner, id, patch); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("owner: %v, want BAD_USER_INPUT (does not resolve)", err)
	}
	if lookups.Load() == 0 {
		t.Error("the owner's URL was not looked up: this test cannot see lookups")
	}
}
