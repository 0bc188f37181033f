// Package bench holds TaskFlow's benchmarks. They need the test Postgres and run
// only with -bench (go test ./bench -run '^$' -bench Audit -benchtime 200x); a
// plain go test ./... compiles them and runs nothing.
package bench

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/store"
	"taskflow/store/storetest"
)

// auditWorld is one workspace filled with AUDIT_BENCH_EVENTS (default 1,000,000)
// events spread over the current month and the two after it (three partitions).
type auditWorld struct {
	db      *store.DB
	owner   *store.User
	actor   string
	ws      string
	deepAt  time.Time
	deepID  string
	events  int
	fillDur time.Duration
}

var (
	auditOnce sync.Once
	auditW    *auditWorld
)

func setupAudit(b *testing.B) *auditWorld {
	auditOnce.Do(func() {
		n := 1_000_000
		if s := os.Getenv("AUDIT_BENCH_EVENTS"); s != "" {
			n, _ = strconv.Atoi(s)
		}
		ctx := context.Background()
		// Not b: the database must outlive this first sub-benchmark.
		pool, err := pgxpool.New(ctx, storetest.URL(b))
		if err != nil {
			b.Fatal(err)
		}
		db := store.New(pool, nil)
		w := &auditWorld{db: db, events: n}
		var users []string
		for i := range 20 {
			var id string
			if err := pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, 'u', 'x') RETURNING id`,
				"u"+strconv.Itoa(i)+"@example.com").Scan(&id); err != nil {
				b.Fatal(err)
			}
			users = append(users, id)
		}
		w.owner = &store.User{ID: users[0]}
		w.actor = users[5]
		if err := pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('big') RETURNING id`).Scan(&w.ws); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`, w.ws, users[0]); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		now := time.Now().UTC()
		from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		span := from.AddDate(0, 3, 0).Sub(from)
		// Valid-looking rows, unsealed (as a unit of work inserts them): enough
		// for reading.
		_, err = pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type,
			entity_id, occurred_at, ip, user_agent, request_id, metadata)
			SELECT gen_random_uuid(), $1, $2::uuid, ($3::uuid[])[1 + i % 20], a.action, split_part(a.action, '.', 1),
				'ent-' || (i % 50000), $4::timestamptz + ($5::float8 * i / $6) * interval '1 microsecond',
				'203.0.113.' || (i % 250), 'bench', md5(i::text), jsonb_build_object('i', i, 'title', 'task ' || i)
			FROM generate_series(1, $6) AS i
			CROSS JOIN LATERAL (SELECT (ARRAY['user.registered','user.logged_in','workspace.created','member.added',
				'member.role_changed','member.removed','project.created','project.updated','project.archived',
				'task.created','task.updated','task.deleted','comment.created','comment.updated','comment.deleted',
				'task.updated'])[1 + (i * 7) % 16] AS action) a`,
			w.ws, w.ws, users, from, float64(span.Microseconds()), n)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE audit_events`); err != nil {
			b.Fatal(err)
		}
		w.fillDur = time.Since(start)
		if err := pool.QueryRow(ctx, `SELECT occurred_at, id::text FROM audit_events WHERE workspace_id = $1
			ORDER BY occurred_at DESC, id DESC OFFSET $2 LIMIT 1`, w.ws, n*9/10).Scan(&w.deepAt, &w.deepID); err != nil {
			b.Fatal(err)
		}
		b.Logf("filled %d events in %s", n, w.fillDur)
		auditW = w
	})
	if auditW == nil {
		b.Fatal("setup failed")
	}
	return auditW
}

// deepCursor rewrites a cursor the store made for filter so that it points at
// the event 90% down the log: the store's cursor is base64url JSON {t, i, s}.
func (w *auditWorld) deepCursor(b *testing.B, filter store.AuditFilter) *string {
	one := 1
	c, err := w.db.AuditEvents(context.Background(), w.owner, w.ws, filter, &one, nil)
	if err != nil || c.PageInfo.EndCursor() == nil {
		b.Fatal(err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(*c.PageInfo.EndCursor())
	var cur map[string]any
	if err := json.Unmarshal(raw, &cur); err != nil {
		b.Fatal(err)
	}
	cur["t"], cur["i"] = w.deepAt, w.deepID
	raw, _ = json.Marshal(cur)
	s := base64.RawURLEncoding.EncodeToString(raw)
	return &s
}

// rawPage runs sql with args and scans the rows as the store does, without it.
func rawPage(b *testing.B, pool *pgxpool.Pool, want int, sql string, args ...any) {
	rows, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id, action, etype, eid string
		var ws, actor, ip, ua, rid *string
		var at time.Time
		var meta, prev, hash []byte
		var pos *int64
		if err := rows.Scan(&id, &ws, &actor, &action, &etype, &eid, &at, &ip, &ua, &rid, &meta, &pos, &prev, &hash); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if rows.Err() != nil || n != want {
		b.Fatalf("%d rows, %v", n, rows.Err())
	}
}

const rawColumns = `SELECT id, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, ip, user_agent, request_id, metadata,
	s.position, s.prev_hash, s.hash FROM audit_events
	LEFT JOIN LATERAL (SELECT position, prev_hash, hash FROM audit_seals WHERE event_id = audit_events.id) s ON true `

// pair times the store method and the raw SQL alternately in each iteration
// (so that the load of the machine hits both alike), after a warm-up, and
// reports the median of each and their ratio.
func auditPair(b *testing.B, store, raw func()) {
	for range 20 {
		store()
		raw()
	}
	var ts, tr []time.Duration
	for b.Loop() {
		t0 := time.Now()
		store()
		t1 := time.Now()
		raw()
		t2 := time.Now()
		ts, tr = append(ts, t1.Sub(t0)), append(tr, t2.Sub(t1))
	}
	ms, mr := auditMedian(ts), auditMedian(tr)
	b.ReportMetric(float64(ms.Microseconds()), "store-p50-µs")
	b.ReportMetric(float64(mr.Microseconds()), "raw-p50-µs")
	b.ReportMetric(float64(ms)/float64(mr), "store/raw")
}

func auditMedian(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkAudit compares store.AuditEvents (role check, filter, keyset page,
// decoding) with the same page SQL run directly on the pool: the first page of
// a filtered listing (task.* by one actor), a page 90% deep (unfiltered and
// filtered), and one entity's history; 50 events a page.
func BenchmarkAudit(b *testing.B) {
	w := setupAudit(b)
	ctx := context.Background()
	fifty := 50
	filter := store.AuditFilter{Actions: []string{"task.*"}, ActorID: &w.actor}
	check := func(want int) func(c *store.AuditEventConnection, err error) {
		return func(c *store.AuditEventConnection, err error) {
			if err != nil || len(c.Edges) != want {
				b.Fatalf("%v, %d events", err, len(c.Edges))
			}
		}
	}
	b.Run("filtered_first_page", func(b *testing.B) {
		auditPair(b, func() { check(50)(w.db.AuditEvents(ctx, w.owner, w.ws, filter, &fifty, nil)) }, func() {
			rawPage(b, w.db.Pool, 51, rawColumns+`WHERE workspace_id = $1 AND (action LIKE $2) AND actor_id = $3
				ORDER BY occurred_at DESC, id DESC LIMIT 51`, w.ws, "task.%", w.actor)
		})
	})
	deep := w.deepCursor(b, store.AuditFilter{})
	b.Run("deep_page", func(b *testing.B) {
		auditPair(b, func() { check(50)(w.db.AuditEvents(ctx, w.owner, w.ws, store.AuditFilter{}, &fifty, deep)) }, func() {
			rawPage(b, w.db.Pool, 51, rawColumns+`WHERE workspace_id = $1 AND (occurred_at, id) < ($2, $3)
				ORDER BY occurred_at DESC, id DESC LIMIT 51`, w.ws, w.deepAt, w.deepID)
		})
	})
	deepFiltered := w.deepCursor(b, filter)
	b.Run("filtered_deep_page", func(b *testing.B) {
		auditPair(b, func() { check(50)(w.db.AuditEvents(ctx, w.owner, w.ws, filter, &fifty, deepFiltered)) }, func() {
			rawPage(b, w.db.Pool, 51, rawColumns+`WHERE workspace_id = $1 AND (action LIKE $2) AND actor_id = $3
				AND (occurred_at, id) < ($4, $5) ORDER BY occurred_at DESC, id DESC LIMIT 51`,
				w.ws, "task.%", w.actor, w.deepAt, w.deepID)
		})
	})
	// ent-15 is touched by task.created events only (i = 15 mod 50000 gives
	// action 1 + (15*7) % 16 = 10), one per 50,000 events.
	entity := store.AuditFilter{EntityType: auditPtr("task"), EntityID: auditPtr("ent-15")}
	b.Run("entity_history", func(b *testing.B) {
		auditPair(b, func() { check(w.events / 50000)(w.db.AuditEvents(ctx, w.owner, w.ws, entity, &fifty, nil)) }, func() {
			rawPage(b, w.db.Pool, w.events/50000, rawColumns+`WHERE workspace_id = $1 AND entity_type = $2 AND entity_id = $3
				ORDER BY occurred_at DESC, id DESC LIMIT 51`, w.ws, "task", "ent-15")
		})
	})
}

func auditPtr[T any](v T) *T { return &v }
