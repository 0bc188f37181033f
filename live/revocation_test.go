package live_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// A token revoked by SQL before the instance's revocation feed made its
// first poll (an instance just started, its clients reconnecting) is a
// change the feed never reads: its streams end once that poll returns, as
// the streams of a token revoked later do. They used to run until the
// token's old expiry.
func TestTokenRevokedBeforeTheFeedsFirstPoll(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{})
	ctx := t.Context()
	ch, end := e.watch(t, e.hub, e.token)
	if _, err := e.db.Pool.Exec(ctx, `UPDATE tokens SET revoked_at = now() WHERE token_hash = $1`, e.token); err != nil {
		t.Fatal(err)
	}
	go e.db.RunRevocationFeed(ctx)
	endsUnauthenticated(t, "revoked before the first poll", ch, end)
}

// A stream that ends (here: its token expires) while it catches up over
// events none of which it delivers ends there, not after reading the rest of
// the catch-up, however long: the end used to wait for the catch-up's last
// read.
func TestEndDuringACatchUpThatSendsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, live.Options{})
	ctx := t.Context()
	from, err := e.db.SpineHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.db.CreateProject(ctx, e.user, e.ws, "Other", nil)
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 events the subscription reads (its workspace's) and delivers none of (another project's).
	if err := e.db.UnitOfWork(ctx, func(ctx context.Context) error {
		for i := range 1000 {
			if _, err := e.db.CreateTask(ctx, e.user, store.NewTask{ProjectID: other.ID, Title: fmt.Sprint(i)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The spine shows the events once every transaction older than theirs
	// has ended, in any database of the cluster (other tests run beside this one).
	var all *store.SpineRead
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		all, err = e.db.ReadSpine(ctx, from, store.SpineFilter{ChainKeys: []string{e.ws}}, 2000)
		if err != nil {
			t.Fatal(err)
		}
		if len(all.Events) >= 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events visible on the spine after 30s, want 1000", len(all.Events))
		}
	}
	last := all.Events[len(all.Events)-1].Cursor

	// The catch-up's first read waits on a lock until the token has expired;
	// the lock is an operator's (the server's role may not take it).
	cfg := e.db.Pool.Config().ConnConfig.Copy()
	cfg.User, cfg.Password = "postgres", ""
	op, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(context.WithoutCancel(ctx))
	lock, err := op.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Pool.Exec(ctx, `UPDATE tokens SET expires_at = now() + interval '1 second' WHERE token_hash = $1`, e.token); err != nil {
		t.Fatal(err)
	}
	sctx, end := live.WithEnd(ctx)
	ch, err := live.Subscribe(sctx, e.hub, live.Spec{Kind: live.TaskChanges, User: e.user, TokenHash: e.token,
		ProjectID: e.project, After: from.String()}, func(ev *live.Event) *live.Event { return ev })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the expiry (1 s) has ended the stream, which waits for its first read
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	endsUnauthenticated(t, "expired during the catch-up", ch, end)
	at, _ := end.Err().Extensions["cursor"].(string)
	pos, err := store.ParseSpineCursor(at)
	if err != nil {
		t.Fatalf("end cursor %q: %v", at, err)
	}
	if pos.TxID > last.TxID || pos.TxID == last.TxID && pos.Seq >= last.Seq {
		t.Fatalf("the stream ended at %v, after the catch-up's last event %v: it read the whole catch-up first", pos, last)
	}
}
