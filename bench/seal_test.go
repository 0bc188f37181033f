package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// BenchmarkAuditSeal measures how fast one sealer chains a backlog, the
// capacity that bench/load -seal compares with the write rate. Each iteration
// inserts AUDIT_SEAL_EVENTS (default 20,000) unsealed task.created events with
// a task's snapshot as metadata, spread over 100 workspace chains, outside the
// timer, then seals them in rounds of the default batch (1000) with a signing
// key. It reports the events sealed per second of the rounds that sealed
// something (a round that finds nothing waits for the cluster's horizon, which
// other databases' transactions hold back on a shared server).
//
//	go test ./bench -run '^$' -bench AuditSeal -benchtime 5x
func BenchmarkAuditSeal(b *testing.B) {
	n := 20_000
	if s := os.Getenv("AUDIT_SEAL_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, storetest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	db := store.New(pool, nil)
	if err := db.EnsureAuditPartitions(ctx); err != nil {
		b.Fatal(err)
	}
	sealer := &store.AuditSealer{DB: db, Key: audit.GenerateSigningKey()}
	var sealed, rounds int
	var busy time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type,
				entity_id, occurred_at, ip, user_agent, request_id, metadata)
			SELECT gen_random_uuid(), w.id::text, w.id, gen_random_uuid(), 'task.created', 'task', gen_random_uuid()::text,
				clock_timestamp(), '203.0.113.' || (i % 250), 'Mozilla/5.0 (bench)', gen_random_uuid()::text,
				jsonb_build_object('id', gen_random_uuid(), 'projectId', gen_random_uuid(), 'title', 'task ' || i,
					'description', repeat('words ', 20), 'status', 'TODO', 'priority', 'MEDIUM', 'assigneeId', NULL,
					'dueDate', NULL, 'createdById', gen_random_uuid())
			FROM generate_series(1, $1) AS i
			JOIN (SELECT k, gen_random_uuid() AS id FROM generate_series(0, 99) AS k) w ON w.k = i % 100`, n); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for done := 0; done < n; {
			t0 := time.Now()
			r, err := sealer.Round(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if r.Events == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			busy += time.Since(t0)
			done += r.Events
			rounds++
		}
		sealed += n
	}
	b.ReportMetric(float64(sealed)/busy.Seconds(), "events/s")
	b.ReportMetric(float64(busy.Microseconds())/float64(rounds)/1000, "ms/round")
}
