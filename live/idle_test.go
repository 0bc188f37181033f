package live_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/live"
	"taskflow/store"
	"taskflow/store/storetest"
)

// With no subscriber open, this instance's commits do not wake the tailer:
// it follows the spine's head on its poll only, not with a read per commit.
func TestIdleTailerIgnoresCommits(t *testing.T) {
	t.Parallel()
	reads := &storetest.Statements{Match: func(sql string) bool { // store.DB.SpineHead
		return strings.Contains(sql, "pg_snapshot_xmin(pg_current_snapshot())") && !strings.Contains(sql, "audit_events")
	}}
	pool := storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = reads })
	db := store.New(pool, nil)
	ctx := t.Context()
	user := &store.User{}
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('a@example.com', 'A', 'x') RETURNING id`).
		Scan(&user.ID); err != nil {
		t.Fatal(err)
	}
	ws, err := db.CreateWorkspace(ctx, user, "W")
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, user, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	hub := live.New(live.Options{DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: time.Hour})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hub.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	for reads.Count() == 0 { // the tailer's start reads the head
		time.Sleep(5 * time.Millisecond)
	}
	start := reads.Count()
	for i := range 20 {
		if _, err := db.CreateTask(ctx, user, store.NewTask{ProjectID: p.ID, Title: "t"}); err != nil {
			t.Fatal(i, err)
		}
		time.Sleep(2 * time.Millisecond) // time for a woken tailer to read
	}
	// Its first round, at once after the start, may fall in the loop.
	if n := reads.Count() - start; n > 1 {
		t.Errorf("the idle tailer read the spine's head %d times over 20 commits, want at most once (its first round; its poll is an hour)", n)
	}
}
