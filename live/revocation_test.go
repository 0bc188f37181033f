package live_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/live"
	"taskflow/store"
)

// endBound bounds the wait for a stream to end: a failure past it, not a
// measure of speed (the revocation feed polls every store.RevocationPoll).
const endBound = 10 * time.Second

// watch starts a taskChanges subscription on hub with the token tok.
func (e *env) watch(t *testing.T, hub *live.Hub, tok []byte) (<-chan *live.Event, *live.End) {
	t.Helper()
	ctx, end := live.WithEnd(t.Context())
	ch, err := live.Subscribe(ctx, hub, live.Spec{Kind: live.TaskChanges, User: e.user, TokenHash: tok, ProjectID: e.project},
		func(ev *live.Event) *live.Event { return ev })
	if err != nil {
		t.Fatal(err)
	}
	return ch, end
}

// endsUnauthenticated waits (up to endBound) for the stream ch to end, and
// checks it ended with UNAUTHENTICATED.
func endsUnauthenticated(t *testing.T, what string, ch <-chan *live.Event, end *live.End) {
	t.Helper()
	timeout := time.After(endBound)
	for {
		select {
		case _, ok := <-ch:
			if ok {
				continue
			}
			if err := end.Err(); err == nil || err.Code != errs.CodeUnauthenticated {
				t.Fatalf("%s: the stream ended with %v, want UNAUTHENTICATED", what, err)
			}
			return
		case <-timeout:
			t.Fatalf("%s: the stream still runs %s later", what, endBound)
		}
	}
}

// A token revoked or made to expire sooner by SQL (no logout, no audit
// event) ends its streams on every instance with UNAUTHENTICATED, each
// through its own revocation feed; a change that leaves the token valid (its
// user renamed) ends nothing.
func TestTokenChangedBySQLEndsStreamsOnEveryInstance(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{})
	ctx := t.Context()
	other := store.New(e.db.Pool, nil) // a second instance
	hub := live.New(live.Options{DB: other, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hub.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	go e.db.RunRevocationFeed(ctx)
	go other.RunRevocationFeed(ctx)

	short := auth.HashToken(auth.NewToken())
	if _, err := e.db.Pool.Exec(ctx, `INSERT INTO tokens (token_hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 day')`,
		short, e.user.ID); err != nil {
		t.Fatal(err)
	}
	here, hereEnd := e.watch(t, e.hub, e.token)
	there, thereEnd := e.watch(t, hub, e.token)
	soon, soonEnd := e.watch(t, hub, short)
	time.Sleep(2 * store.RevocationPoll) // the feeds have begun

	if _, err := e.db.Pool.Exec(ctx, `UPDATE users SET name = 'renamed' WHERE id = $1`, e.user.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * store.RevocationPoll) // learnt, checked again, still valid
	id, err := e.createTask(ctx, "after the rename", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan *live.Event{here, there, soon} {
		select {
		case ev, ok := <-ch:
			if !ok || ev.Record.EntityID != id {
				t.Fatalf("after the user's rename: %v %v, want task %s", ev, ok, id)
			}
		case <-time.After(endBound):
			t.Fatal("no event after the user's rename")
		}
	}

	if _, err := e.db.Pool.Exec(ctx, `UPDATE tokens SET revoked_at = now() WHERE token_hash = $1`, e.token); err != nil {
		t.Fatal(err)
	}
	endsUnauthenticated(t, "revoked, this instance", here, hereEnd)
	endsUnauthenticated(t, "revoked, another instance", there, thereEnd)

	// Not expired yet when learnt: the stream ends at the new expiry.
	if _, err := e.db.Pool.Exec(ctx, `UPDATE tokens SET expires_at = now() + interval '1 second' WHERE token_hash = $1`, short); err != nil {
		t.Fatal(err)
	}
	endsUnauthenticated(t, "expiry moved to a second from now", soon, soonEnd)
}
