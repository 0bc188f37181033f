package store_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// spineInsert inserts an event of chain into q's transaction and returns its id.
func spineInsert(t *testing.T, q store.Querier, chain, action string) string {
	t.Helper()
	var id string
	if err := q.QueryRow(context.Background(), `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at)
		VALUES (gen_random_uuid(), $1, $2, split_part($2, '.', 1), 'e', now()) RETURNING id::text`, chain, action).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// spineIDs returns the ids of a read's events.
func spineIDs(r *store.SpineRead) []string {
	var ids []string
	for _, e := range r.Events {
		ids = append(ids, e.Record.ID)
	}
	return ids
}

// readSpineUntil reads on from cur in pages of limit until n events came (or
// fails after a minute: the horizon is the cluster's, which other databases'
// transactions hold back) and returns them with the cursor after them.
func readSpineUntil(t *testing.T, db *store.DB, cur store.SpineCursor, limit, n int) ([]store.SpineEvent, store.SpineCursor) {
	t.Helper()
	var out []store.SpineEvent
	deadline := time.Now().Add(time.Minute)
	for len(out) < n {
		r, err := db.ReadSpine(context.Background(), cur, store.SpineFilter{}, limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Next.TxID < cur.TxID || r.Next.TxID == cur.TxID && r.Next.Seq < cur.Seq {
			t.Fatalf("the cursor went back from %+v to %+v", cur, r.Next)
		}
		out, cur = append(out, r.Events...), r.Next
		if len(r.Events) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d events read after a minute, want %d", len(out), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return out, cur
}

// Transactions commit out of the order of their ids: a reader does not see a
// committed event while an older transaction is still open, then sees both in
// (tx_id, seq) order; a rolled-back event never shows; pages of one event
// skip nothing and repeat nothing.
func TestSpineInterleavings(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	t1, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback(context.WithoutCancel(ctx))
	a := spineInsert(t, t1, "c", "task.created") // T1 holds the older id
	t2, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := spineInsert(t, t2, "c", "task.updated")
	c := spineInsert(t, t2, "d", "task.deleted")
	if err := t2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t3, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spineInsert(t, t3, "c", "task.created")
	if err := t3.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := db.ReadSpine(ctx, store.SpineCursor{}, store.SpineFilter{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Events) != 0 {
		t.Fatalf("read %v while T1 was open: T2 committed past the horizon", spineIDs(r))
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	all, end := readSpineUntil(t, db, store.SpineCursor{}, 1, 3)
	var got []string
	for i, e := range all {
		got = append(got, e.Record.ID)
		if i > 0 && !(all[i-1].Cursor.TxID < e.Cursor.TxID || all[i-1].Cursor.TxID == e.Cursor.TxID && all[i-1].Cursor.Seq < e.Cursor.Seq) {
			t.Fatalf("event %d is not after the one before it in spine order", i)
		}
	}
	if strings.Join(got, ",") != strings.Join([]string{a, b, c}, ",") {
		t.Fatalf("read %v, want T1's then T2's: %v", got, []string{a, b, c})
	}
	if all[1].Cursor.TxID != all[2].Cursor.TxID || all[0].Cursor.TxID >= all[1].Cursor.TxID {
		t.Fatalf("cursors %+v: T2's events share its id, after T1's", all)
	}
	if e := all[0].Record; e.ChainKey != "c" || e.Action != "task.created" || e.EntityType != "task" || e.Metadata == nil {
		t.Fatalf("record read back: %+v", e)
	}
	// Nothing more, ever: the rolled-back event does not come later.
	r, err = db.ReadSpine(ctx, end, store.SpineFilter{}, 100)
	if err != nil || len(r.Events) != 0 {
		t.Fatalf("after the end: %v, %v", spineIDs(r), err)
	}
	// Filters: one chain, actions by prefix.
	for _, c := range []struct {
		f    store.SpineFilter
		want []string
	}{
		{store.SpineFilter{ChainKeys: []string{"d"}}, []string{c}},
		{store.SpineFilter{Actions: []string{"task.updated", "task.d*"}}, []string{b, c}},
		{store.SpineFilter{ChainKeys: []string{"c"}, Actions: []string{"task.c*"}}, []string{a}},
	} {
		r, err := db.ReadSpine(ctx, store.SpineCursor{}, c.f, 100)
		if err != nil || strings.Join(spineIDs(r), ",") != strings.Join(c.want, ",") {
			t.Errorf("filter %+v: %v, %v; want %v", c.f, spineIDs(r), err, c.want)
		}
		// A read that is not full moves the cursor past what it scanned,
		// and the next read starts there without losing anything.
		if !(r.Next.TxID >= all[2].Cursor.TxID) {
			t.Errorf("filter %+v: next %+v is before the last event read", c.f, r.Next)
		}
	}
	if _, err := db.ReadSpine(ctx, store.SpineCursor{}, store.SpineFilter{Actions: []string{"*.created"}}, 10); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("bad action pattern: %v", err)
	}
	for _, n := range []int{0, store.MaxSpineRead + 1} {
		if _, err := db.ReadSpine(ctx, store.SpineCursor{}, store.SpineFilter{}, n); errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("limit %d: %v", n, err)
		}
	}
}

// Many writers commit and roll back events while a reader follows the spine:
// the reader sees every committed event exactly once and no rolled-back one.
func TestSpineReaderUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	const writers, txs = 6, 40
	var mu sync.Mutex
	committed, rolledBack := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for range txs {
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					var ids []string
					for range 1 + rnd.IntN(3) {
						ids = append(ids, spineInsert(t, tx, fmt.Sprint("chain-", rnd.IntN(3)), "task.created"))
					}
					time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond) // commits overtake each other
					mu.Lock()
					defer mu.Unlock()
					rollBack := rnd.IntN(5) == 0
					for _, id := range ids {
						if rollBack {
							rolledBack[id] = true
						} else {
							committed[id] = true
						}
					}
					if rollBack {
						return errRollBack
					}
					return nil
				})
				if err != nil && err != errRollBack {
					t.Error(err)
				}
			}
		})
	}
	seen := map[string]int{}
	cur := store.SpineCursor{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		r, err := db.ReadSpine(ctx, cur, store.SpineFilter{}, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			seen[e.Record.ID]++
		}
		cur = r.Next
		mu.Lock()
		complete := finished && len(seen) >= len(committed)
		mu.Unlock()
		if complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d events of %d committed after two minutes", len(seen), len(committed))
		}
		if len(r.Events) == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s read %d times", id, n)
		}
		if rolledBack[id] || !committed[id] {
			t.Errorf("event %s read, but it was not committed", id)
		}
	}
	for id := range committed {
		if seen[id] == 0 {
			t.Errorf("committed event %s was skipped", id)
		}
	}
	if len(committed) == 0 || len(rolledBack) == 0 {
		t.Fatalf("%d committed, %d rolled back: the test did not mix them", len(committed), len(rolledBack))
	}
}

// errRollBack makes pgx.BeginFunc roll back.
var errRollBack = fmt.Errorf("roll back")

// A cursor goes to clients as an opaque string and comes back; anything else
// is BAD_USER_INPUT.
func TestSpineCursorString(t *testing.T) {
	t.Parallel()
	for _, c := range []store.SpineCursor{{}, {TxID: 1, Seq: 2}, {TxID: 1<<64 - 1, Seq: 1<<63 - 1}} {
		got, err := store.ParseSpineCursor(c.String())
		if err != nil || got != c {
			t.Errorf("%+v → %q → %+v, %v", c, c.String(), got, err)
		}
	}
	valid := store.SpineCursor{TxID: 5, Seq: 6}.String()
	raw := func(version byte, seqHigh byte) string {
		b := make([]byte, 17)
		b[0], b[8], b[9], b[16] = version, 5, seqHigh, 6
		return base64.RawURLEncoding.EncodeToString(b)
	}
	if raw(1, 0) != valid {
		t.Fatalf("the encoding changed: %q, was %q", valid, raw(1, 0))
	}
	for _, s := range []string{"", "garbage", valid + "A", valid[:22], strings.Repeat("_", 23),
		raw(2, 0), raw(1, 0x80), // version 2; seq over int64
		valid[:10] + "+" + valid[11:], // another alphabet
	} {
		if _, err := store.ParseSpineCursor(s); errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// A filtered read with MaxScan looks at no more than MaxScan events past its
// cursor: one that keeps too few of them stops there (Cut), with Next at the
// last event it looked at and Examined saying how many it did; reading on
// from Next finds what follows, nothing skipped. Without MaxScan a read
// scanned the whole spine past its cursor in one statement, whatever it
// kept. Audit filters in the read's SQL, with Actions kept besides.
func TestSpineScanIsBounded(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := t.Context()
	// From the spine's end before the events of the test.
	var start store.SpineCursor
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(max(tx_id)::text::bigint, 0), coalesce(max(seq), 0) FROM audit_events`).
		Scan(&start.TxID, &start.Seq); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at)
		SELECT gen_random_uuid(), 'noise', 'task.created', 'task', 'e', now() FROM generate_series(1, 2500)`); err != nil {
		t.Fatal(err)
	}
	kept := spineInsert(t, db.Pool, "mine", "task.created")
	logout := spineInsert(t, db.Pool, "mine", "user.logged_out")
	var last string
	if err := db.Pool.QueryRow(ctx, `SELECT max(tx_id)::text FROM audit_events`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	for passed := false; !passed; time.Sleep(5 * time.Millisecond) {
		if err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, last).Scan(&passed); err != nil {
			t.Fatal(err)
		}
	}
	filter := store.SpineFilter{ChainKeys: []string{"mine"}, MaxScan: 1000}
	cur := start
	var got []string
	var examined []int
	for range 10 {
		r, err := db.ReadSpine(ctx, cur, filter, 10)
		if err != nil {
			t.Fatal(err)
		}
		got, examined = append(got, spineIDs(r)...), append(examined, r.Examined)
		if r.Cut && !cur.Before(r.Next) {
			t.Fatalf("a cut read did not move its cursor from %+v", cur)
		}
		cur = r.Next
		if !r.Cut {
			break
		}
	}
	if fmt.Sprint(examined) != "[1000 1000 502]" || strings.Join(got, ",") != kept+","+logout {
		t.Fatalf("looked at %v events a read and kept %v, want [1000 1000 502] and [%s %s]", examined, got, kept, logout)
	}
	// Audit: task events of the chain, with logouts kept besides.
	task := "task"
	r, err := db.ReadSpine(ctx, start, store.SpineFilter{ChainKeys: []string{"mine"},
		Audit: &store.AuditFilter{EntityType: &task}, Actions: []string{"user.logged_out"}, MaxScan: 5000}, 10)
	if err != nil || strings.Join(spineIDs(r), ",") != kept+","+logout || r.Cut {
		t.Fatalf("audit filter: %v %+v", err, r)
	}
	task = "project"
	r, err = db.ReadSpine(ctx, start, store.SpineFilter{ChainKeys: []string{"mine"},
		Audit: &store.AuditFilter{EntityType: &task}, MaxScan: 5000}, 10)
	if err != nil || len(r.Events) != 0 {
		t.Fatalf("audit filter that keeps nothing: %v %+v", err, r)
	}
}
