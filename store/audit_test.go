package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/reqinfo"
	"taskflow/store"
	"taskflow/store/storetest"
)

// auditFixture is a test database with helpers for audit tests.
type auditFixture struct {
	t   *testing.T
	db  *store.DB
	url string
}

var auditFixtureSeq atomic.Int64

func newAuditFixture(t *testing.T) *auditFixture {
	t.Helper()
	url := storetest.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := store.New(pool, nil)
	// The template may have been migrated in an earlier month: make this
	// month's partitions as the server does at start.
	if err := db.EnsureAuditPartitions(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &auditFixture{t: t, db: db, url: url}
}

// user inserts a user.
func (f *auditFixture) user(name string) *store.User {
	f.t.Helper()
	u := &store.User{Name: name, Email: fmt.Sprintf("%s-%d@example.com", strings.ToLower(name), auditFixtureSeq.Add(1))}
	err := f.db.Pool.QueryRow(context.Background(), `INSERT INTO users (email, name, password_hash) VALUES ($1, $2, 'x')
		RETURNING id, created_at`, u.Email, u.Name).Scan(&u.ID, &u.CreatedAt)
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

// workspace inserts a workspace with members (user, role pairs).
func (f *auditFixture) workspace(members map[*store.User]store.Role) string {
	f.t.Helper()
	ctx := context.Background()
	var id string
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('w') RETURNING id`).Scan(&id); err != nil {
		f.t.Fatal(err)
	}
	for u, r := range members {
		if _, err := f.db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, $3)`, id, u.ID, r); err != nil {
			f.t.Fatal(err)
		}
	}
	return id
}

// append appends ev in its own transaction, at now (nil: the clock).
func (f *auditFixture) append(ctx context.Context, ev audit.Event, at func() time.Time) {
	f.t.Helper()
	if err := f.tryAppend(ctx, ev, at); err != nil {
		f.t.Fatal(err)
	}
}

func (f *auditFixture) tryAppend(ctx context.Context, ev audit.Event, at func() time.Time) error {
	if at == nil {
		at = time.Now
	}
	return store.AppendAuditAt(ctx, f.db, ev, at)
}

// ownedWorkspace inserts an owner and a workspace with events task.created
// events (entities "0", "1", ...; metadata {"title": "t<i>"}), unsealed.
func (f *auditFixture) ownedWorkspace(events int) (*store.User, string) {
	f.t.Helper()
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	for i := range events {
		// Odd events were traced; the others have no trace id, as every event
		// written before trace ids existed.
		ctx := context.Background()
		if i%2 == 1 {
			ctx = reqinfo.With(ctx, reqinfo.Info{TraceID: fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e473%d", i)})
		}
		f.append(ctx, auditWsEvent(ws, owner, "task.created", fmt.Sprint(i), map[string]any{"title": fmt.Sprint("t", i)}), nil)
	}
	return owner, ws
}

// seal seals every committed event of the fixture's database.
func (f *auditFixture) seal() {
	f.t.Helper()
	storetest.Seal(f.t, f.db)
}

// superuser returns a pool on the same database as the postgres superuser.
func (f *auditFixture) superuser() *pgxpool.Pool {
	f.t.Helper()
	u, err := url.Parse(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	conf := storetest.Config(f.t)
	su := fmt.Sprintf("postgres://%s@%s:%s%s?sslmode=disable", url.UserPassword(conf.User, conf.Password), conf.Host, conf.Port, u.Path)
	pool, err := pgxpool.New(context.Background(), su)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(pool.Close)
	var super bool
	if err := pool.QueryRow(context.Background(), `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil || !super {
		f.t.Fatalf("%s is not a superuser (%v)", conf.User, err)
	}
	return pool
}

// events returns the ids of the chain's events, oldest first.
func (f *auditFixture) chainIDs(chain string) []string {
	f.t.Helper()
	rows, _ := f.db.Pool.Query(context.Background(), `SELECT id::text FROM audit_events WHERE chain_key = $1 ORDER BY occurred_at, id`, chain)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatal(err)
	}
	return ids
}

func auditPtr[T any](v T) *T { return &v }

func auditWsEvent(ws string, actor *store.User, action, entity string, meta map[string]any) audit.Event {
	var a *string
	if actor != nil {
		a = &actor.ID
	}
	return audit.Event{WorkspaceID: &ws, ActorID: a, Action: action, EntityID: entity, Metadata: meta}
}

// Metadata of every JSON shape survives the jsonb round trip with its hash: the
// chain verifies, and the values read back are the ones appended.
func TestAuditMetadataRoundTripVerifies(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	ctx := reqinfo.With(context.Background(), reqinfo.Info{IP: "203.0.113.7", UserAgent: "agent \xff\x00 bad", RequestID: "req-1",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"})
	metas := []map[string]any{
		nil,
		{},
		{"title": "héllo wörld ✓ 日本語 🎉", "quote": `"'\<>&`, "ctrl": "tab\tnl\n\u2028"},
		{"int": 42, "neg": -7, "big": int64(1) << 62, "float": 3.14159, "exp": 1e21, "tiny": 1e-9, "zero": 0.0, "whole": 100.0},
		{"nested": map[string]any{"a": []any{1, "two", nil, true, map[string]any{"deep": []any{}}}}, "null": nil},
		{"changes": map[string]any{"title": audit.Change{From: "a", To: "b"}, "dueDate": audit.Change{From: nil, To: "2026-01-01T00:00:00Z"}}},
		{"nul": "a\x00b", "k\x00": 1},
		{"<k>": "\u2029&", "num": json.Number("1.50"), "list": []any{json.Number("15e-1"), json.Number("-0")}},
	}
	for i, m := range metas {
		f.append(ctx, auditWsEvent(ws, owner, "task.updated", fmt.Sprint("e", i), m), nil)
	}
	f.seal()
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Valid || v.CheckedEvents != len(metas) || v.FirstInvalidEventID != nil || v.HeadHash == nil {
		t.Fatalf("verify = %+v", v)
	}
	page, err := f.db.AuditEvents(ctx, owner, ws, store.AuditFilter{}, auditPtr(100), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Edges) != len(metas) {
		t.Fatalf("%d events", len(page.Edges))
	}
	// Newest first: the last appended comes first.
	decode := func(raw store.RawJSON) map[string]any {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("metadata %s: %v", raw, err)
		}
		return m
	}
	got := decode(page.Edges[len(metas)-1-3].Node.Metadata)
	if got["int"] != json.Number("42") || got["big"] != json.Number("4611686018427387904") || got["exp"] != json.Number("1000000000000000000000") {
		t.Errorf("numbers read back: %#v", got)
	}
	text := decode(page.Edges[len(metas)-1-2].Node.Metadata)
	if text["title"] != "héllo wörld ✓ 日本語 🎉" || text["quote"] != `"'\<>&` {
		t.Errorf("text read back: %#v", text)
	}
	e := page.Edges[0].Node
	if e.IP == nil || *e.IP != "203.0.113.7" || e.RequestID == nil || *e.RequestID != "req-1" ||
		e.UserAgent == nil || *e.UserAgent != "agent \uFFFD\uFFFD bad" {
		t.Errorf("context = %v %v %v", e.IP, e.UserAgent, e.RequestID)
	}
	if e.TraceID == nil || *e.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id = %v", e.TraceID)
	}
	if e.EntityType != "task" || e.ActorID == nil || *e.ActorID != owner.ID || e.WorkspaceID == nil || *e.WorkspaceID != ws {
		t.Errorf("event = %+v", e)
	}
}

// Concurrent appends to one chain do not wait for each other, and the sealer
// chains them all: positions 1..n with no gap, each seal linked to the one
// before it, every event sealed once, even with a clock that goes backwards.
func TestAuditChainOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	ctx := context.Background()
	var tick atomic.Int64
	base := time.Now()
	clock := func() time.Time { return base.Add(-time.Duration(tick.Add(1)) * time.Millisecond) }
	var wg sync.WaitGroup
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.tryAppend(ctx, auditWsEvent(ws, owner, "task.created", fmt.Sprint(i), nil), clock)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f.seal()
	rows, _ := f.db.Pool.Query(ctx, `SELECT position, event_id::text, prev_hash, hash FROM audit_seals WHERE chain_key = $1 ORDER BY position`, ws)
	var prevHash []byte
	seen := map[string]bool{}
	count := 0
	for rows.Next() {
		var pos int64
		var id string
		var p, h []byte
		if err := rows.Scan(&pos, &id, &p, &h); err != nil {
			t.Fatal(err)
		}
		if pos != int64(count+1) || seen[id] {
			t.Fatalf("seal %d at position %d of event %s (seen: %v)", count, pos, id, seen[id])
		}
		if string(p) != string(prevHash) {
			t.Fatalf("seal %d does not link to the one before it", pos)
		}
		seen[id], prevHash = true, h
		count++
	}
	if err := rows.Err(); err != nil || count != n {
		t.Fatalf("%d seals, %v", count, err)
	}
	for _, id := range f.chainIDs(ws) {
		if !seen[id] {
			t.Fatalf("event %s has no seal", id)
		}
	}
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil || !v.Valid || v.CheckedEvents != n || v.SealedEvents != n || v.UnsealedEvents != 0 || v.HeadPosition == nil || *v.HeadPosition != n {
		t.Fatalf("verify = %+v, %v", v, err)
	}
}

// An event whose transaction rolls back leaves nothing: no row, no head move.
func TestAuditRolledBackAppendLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	ctx := context.Background()
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "1", nil), nil)
	boom := fmt.Errorf("refused")
	err := f.db.WithTx(ctx, func(ctx context.Context, tx store.Querier) error {
		if err := store.AppendAudit(ctx, f.db, tx, auditWsEvent(ws, owner, "task.created", "2", nil)); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatal(err)
	}
	if ids := f.chainIDs(ws); len(ids) != 1 {
		t.Fatalf("%d events after a rolled-back append", len(ids))
	}
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "3", nil), nil)
	f.seal()
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || !v.Valid || v.CheckedEvents != 2 || v.SealedEvents != 2 {
		t.Fatalf("verify = %+v, %v", v, err)
	}
}

// Events, seals and checkpoints can't be changed or deleted through the
// server's role: UPDATE, DELETE and TRUNCATE fail on the tables and on the
// partitions of the events.
func TestAuditAppendOnlyForServerRole(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	ctx := context.Background()
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "1", nil), nil)
	sealer := &store.AuditSealer{DB: f.db, Key: audit.GenerateSigningKey()}
	storetest.SealAll(t, sealer)
	if cp, err := sealer.Checkpoint(ctx, ws); err != nil || cp == nil {
		t.Fatalf("checkpoint: %v %v", cp, err)
	}
	for table, update := range map[string]string{
		"audit_seals":       `UPDATE audit_seals SET hash = sha256(hash)`,
		"audit_checkpoints": `UPDATE audit_checkpoints SET signature = sha256(signature)`,
	} {
		for _, stmt := range []string{update, `DELETE FROM ` + table, `TRUNCATE ` + table} {
			if _, err := f.db.Pool.Exec(ctx, stmt); err == nil {
				t.Errorf("%s succeeded", stmt)
			}
		}
		if _, err := f.db.Pool.Exec(ctx, `GRANT UPDATE, DELETE, TRUNCATE ON `+table+` TO CURRENT_USER`); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{update, `DELETE FROM ` + table, `TRUNCATE ` + table} {
			if _, err := f.db.Pool.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s with grants: %v, want the append-only trigger", stmt, err)
			}
		}
	}
	var part string
	if err := f.db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM audit_events LIMIT 1`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if part == "audit_events_default" {
		t.Fatal("the event went to the DEFAULT partition: no partition for this month")
	}
	for _, table := range []string{"audit_events", part, "audit_events_default"} {
		for _, stmt := range []string{
			`UPDATE ` + table + ` SET action = 'task.deleted'`,
			`DELETE FROM ` + table,
			`TRUNCATE ` + table,
			`TRUNCATE ` + table + ` CASCADE`,
		} {
			if _, err := f.db.Pool.Exec(ctx, stmt); err == nil {
				t.Errorf("%s succeeded", stmt)
			}
		}
	}
	// Even with the grants back (an owner can re-grant), the triggers refuse.
	for _, table := range []string{"audit_events", part} {
		if _, err := f.db.Pool.Exec(ctx, `GRANT UPDATE, DELETE, TRUNCATE ON `+table+` TO CURRENT_USER`); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{`UPDATE ` + table + ` SET action = 'x.y'`, `DELETE FROM ` + table, `TRUNCATE ` + table} {
			_, err := f.db.Pool.Exec(ctx, stmt)
			if err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s with grants: %v, want the append-only trigger", stmt, err)
			}
		}
	}
	if ids := f.chainIDs(ws); len(ids) != 1 {
		t.Fatalf("%d events left", len(ids))
	}
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || !v.Valid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
}

// tamperer is a superuser pool that changes audit rows with the triggers off.
type tamperer struct{ su *pgxpool.Pool }

// run runs the statements in one transaction with triggers off; each must
// change one row.
func (x tamperer) run(t *testing.T, stmts ...tamperStmt) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, x.su, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		for _, s := range stmts {
			tag, err := tx.Exec(ctx, s.sql, s.args...)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("%s: %d rows changed", s.sql, tag.RowsAffected())
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tamperStmt is one statement of a tampering.
type tamperStmt struct {
	sql  string
	args []any
}

// sealedChain is a workspace with five sealed events, ids in chain order.
func sealedChain(t *testing.T) (*auditFixture, string, []string) {
	t.Helper()
	ctx := context.Background()
	f := newAuditFixture(t)
	_, ws := f.ownedWorkspace(5)
	f.seal()
	rows, _ := f.db.Pool.Query(ctx, `SELECT event_id::text FROM audit_seals WHERE chain_key = $1 ORDER BY position`, ws)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 5 {
		t.Fatalf("%d seals, %v", len(ids), err)
	}
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || !v.Valid || v.CheckedEvents != 5 || v.SealedEvents != 5 {
		t.Fatalf("before tampering: %+v, %v", v, err)
	}
	return f, ws, ids
}

// A superuser who edits or deletes rows with triggers disabled is caught by the
// chain walk, at the right event: edited events, forged or missing seals,
// missing events, events moved to another chain or slipped in with no seal.
func TestAuditTamperDetected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stray := "0190c0de-0000-7000-8000-000000000001"
	ev := func(sql string) func(ids []string, v int) tamperStmt {
		return func(ids []string, v int) tamperStmt { return tamperStmt{sql, []any{ids[v]}} }
	}
	for _, c := range []struct {
		name    string
		stmts   []func(ids []string, v int) tamperStmt
		victim  int // index of the changed event
		invalid int // index of the event reported; -1: the stray
	}{
		{"edit metadata", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET metadata = '{"title":"forged"}' WHERE id = $1`)}, 2, 2},
		{"edit actor", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET actor_id = NULL WHERE id = $1`)}, 0, 0},
		{"edit time", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET occurred_at = occurred_at + interval '1 microsecond' WHERE id = $1`)}, 3, 3},
		{"move to another chain", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET chain_key = 'anonymous' WHERE id = $1`)}, 1, 1},
		{"edit trace id", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET trace_id = '4bf92f3577b34da6a3ce929d0e0e4739' WHERE id = $1`)}, 3, 3},
		{"remove trace id", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET trace_id = NULL WHERE id = $1`)}, 1, 1},
		{"add trace id", []func([]string, int) tamperStmt{ev(`UPDATE audit_events SET trace_id = '4bf92f3577b34da6a3ce929d0e0e4739' WHERE id = $1`)}, 2, 2},
		{"forged seal hash", []func([]string, int) tamperStmt{ev(`UPDATE audit_seals SET hash = sha256(hash) WHERE event_id = $1`)}, 1, 1},
		{"forged seal link", []func([]string, int) tamperStmt{ev(`UPDATE audit_seals SET prev_hash = sha256(prev_hash) WHERE event_id = $1`)}, 2, 2},
		{"delete middle event", []func([]string, int) tamperStmt{ev(`DELETE FROM audit_events WHERE id = $1`)}, 2, 2},
		{"delete middle event and seal", []func([]string, int) tamperStmt{ev(`DELETE FROM audit_events WHERE id = $1`),
			ev(`DELETE FROM audit_seals WHERE event_id = $1`)}, 2, 3},
		{"delete first event", []func([]string, int) tamperStmt{ev(`DELETE FROM audit_events WHERE id = $1`)}, 0, 0},
		{"delete first event and seal", []func([]string, int) tamperStmt{ev(`DELETE FROM audit_events WHERE id = $1`),
			ev(`DELETE FROM audit_seals WHERE event_id = $1`)}, 0, 1},
		{"delete newest event", []func([]string, int) tamperStmt{ev(`DELETE FROM audit_events WHERE id = $1`)}, 4, 4},
		{"delete newest event and seal", []func([]string, int) tamperStmt{ev(`DELETE FROM audit_events WHERE id = $1`),
			ev(`DELETE FROM audit_seals WHERE event_id = $1`)}, 4, 4},
		{"slip in an event", []func([]string, int) tamperStmt{func(ids []string, v int) tamperStmt {
			return tamperStmt{`INSERT INTO audit_events (id, chain_key, workspace_id, action, entity_type, entity_id, occurred_at, tx_id, seq)
				SELECT $1, chain_key, workspace_id, 'task.deleted', 'task', 'x', occurred_at, '3', 1 FROM audit_events WHERE id = $2`,
				[]any{stray, ids[v]}}
		}}, 2, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f, ws, ids := sealedChain(t)
			var stmts []tamperStmt
			for _, s := range c.stmts {
				stmts = append(stmts, s(ids, c.victim))
			}
			tamperer{f.superuser()}.run(t, stmts...)
			want := stray
			if c.invalid >= 0 {
				want = ids[c.invalid]
			}
			v, err := f.db.VerifyChain(ctx, ws)
			if err != nil {
				t.Fatal(err)
			}
			if v.Valid || v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != want {
				t.Fatalf("verify = %+v, want invalid at %s", v, want)
			}
		})
	}
}

// Retention drops whole past partitions (the triggers do not stop it) and the
// chain of what remains still verifies from the anchor the drop left.
func TestAuditRetentionDropsOldPartitions(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	ctx := context.Background()
	old := time.Date(2020, 1, 10, 0, 0, 0, 0, time.UTC)
	if err := store.EnsureAuditPartitionOf(ctx, f.db, old); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		at := old.Add(time.Duration(i) * time.Hour)
		f.append(ctx, auditWsEvent(ws, owner, "task.created", fmt.Sprint("old", i), nil), func() time.Time { return at })
	}
	for i := range 2 {
		f.append(ctx, auditWsEvent(ws, owner, "task.created", fmt.Sprint("new", i), nil), nil)
	}
	// Events the sealer has not reached keep their partition past retention.
	if dropped, err := f.db.DropExpiredAuditPartitions(ctx, 365*24*time.Hour, time.Now()); err != nil || len(dropped) != 0 {
		t.Fatalf("a partition of unsealed events was dropped: %v, %v", dropped, err)
	}
	f.seal()
	var oldPart string
	if err := f.db.Pool.QueryRow(ctx, `SELECT DISTINCT tableoid::regclass::text FROM audit_events WHERE entity_id = 'old0'`).Scan(&oldPart); err != nil {
		t.Fatal(err)
	}
	if oldPart != "audit_events_p202001" {
		t.Fatalf("old events in %s", oldPart)
	}
	// Forever (0) keeps everything.
	if dropped, err := f.db.DropExpiredAuditPartitions(ctx, 0, time.Now()); err != nil || len(dropped) != 0 {
		t.Fatalf("retention 0 dropped %v, %v", dropped, err)
	}
	// A retention that reaches into January 2020 keeps it.
	if dropped, err := f.db.DropExpiredAuditPartitions(ctx, 24*time.Hour, time.Date(2020, 2, 1, 12, 0, 0, 0, time.UTC)); err != nil || len(dropped) != 0 {
		t.Fatalf("partition not yet expired was dropped: %v, %v", dropped, err)
	}
	dropped, err := f.db.DropExpiredAuditPartitions(ctx, 365*24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dropped, "audit_events_p202001") {
		t.Fatalf("dropped %v", dropped)
	}
	var exists bool
	if err := f.db.Pool.QueryRow(ctx, `SELECT to_regclass('audit_events_p202001') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("partition still exists: %v %v", exists, err)
	}
	if ids := f.chainIDs(ws); len(ids) != 2 {
		t.Fatalf("%d events left, want 2", len(ids))
	}
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil || !v.Valid || v.CheckedEvents != 2 || v.SealedEvents != 2 || v.HeadPosition == nil || *v.HeadPosition != 5 {
		t.Fatalf("verify after retention = %+v, %v", v, err)
	}
	// The seals of the dropped events stay; a seal missing after the anchor
	// is still found.
	var anchor int64
	if err := f.db.Pool.QueryRow(ctx, `SELECT events FROM audit_chain_anchors WHERE chain_key = $1`, ws).Scan(&anchor); err != nil || anchor != 3 {
		t.Fatalf("anchor at %d (%v), want position 3", anchor, err)
	}
	// The current months are never dropped by a retention of a day.
	if dropped, err := f.db.DropExpiredAuditPartitions(ctx, 24*time.Hour, time.Now()); err != nil || len(dropped) != 0 {
		t.Fatalf("dropped current partitions: %v, %v", dropped, err)
	}
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "after", nil), nil)
	f.seal()
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || !v.Valid || v.CheckedEvents != 3 {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	ids := f.chainIDs(ws)
	tamperer{f.superuser()}.run(t, tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[0]}})
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || v.Valid || v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != ids[1] {
		t.Fatalf("verify with the seal after the anchor gone = %+v, %v", v, err)
	}
}

// Partitions are made ahead for this month and the next ones, idempotently; a
// month whose rows already sit in the DEFAULT partition is skipped, not an error.
func TestAuditEnsurePartitions(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	now := time.Now()
	if err := f.db.EnsureAuditPartitions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.db.EnsureAuditPartitions(ctx); err != nil {
		t.Fatalf("second run: %v", err)
	}
	names, err := store.AuditPartitionNames(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= store.AuditMonthsAhead; i++ {
		if n := store.AuditPartitionName(time.Date(now.UTC().Year(), now.UTC().Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, i, 0)); !slices.Contains(names, n) {
			t.Errorf("missing partition %s (have %v)", n, names)
		}
	}
	// A row of 2099-05 lands in DEFAULT: that month is then skipped.
	future := time.Date(2099, 5, 3, 0, 0, 0, 0, time.UTC)
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, hash)
		VALUES (gen_random_uuid(), 'x', 'task.created', 'task', 'e', $1, '\x00')`, future); err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureAuditPartitionsAt(ctx, f.db, future.AddDate(0, -1, 0)); err != nil {
		t.Fatalf("a blocked month is an error: %v", err)
	}
	names, _ = store.AuditPartitionNames(ctx, f.db)
	if slices.Contains(names, "audit_events_p209905") {
		t.Error("partition created over DEFAULT rows")
	}
	for _, n := range []string{"audit_events_p209904", "audit_events_p209906", "audit_events_p209907"} {
		if !slices.Contains(names, n) {
			t.Errorf("missing %s", n)
		}
	}
	// New partitions carry the spine's defaults and index.
	var spine int
	if err := f.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_indexes WHERE tablename = 'audit_events_p209906' AND indexdef LIKE '%(tx_id, seq)%')
		+ (SELECT count(*) FROM information_schema.columns WHERE table_name = 'audit_events_p209906'
			AND column_name IN ('tx_id', 'seq') AND column_default IS NOT NULL)`).Scan(&spine); err != nil || spine != 3 {
		t.Errorf("the new partition has %d of the spine index and two defaults (%v)", spine, err)
	}
	// New partitions carry the grants and triggers of the table.
	for _, stmt := range []string{`DELETE FROM audit_events_p209906`, `TRUNCATE audit_events_p209906`, `UPDATE audit_events_p209906 SET action = 'a.b'`} {
		if _, err := f.db.Pool.Exec(ctx, stmt); err == nil {
			t.Errorf("%s succeeded", stmt)
		}
	}
	if _, err := f.db.Pool.Exec(ctx, `GRANT TRUNCATE ON audit_events_p209906 TO CURRENT_USER`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `TRUNCATE audit_events_p209906`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("TRUNCATE of a new partition with the grant: %v", err)
	}
}
