package idempotency_test

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi/apitest"
	"taskflow/idempotency"
	"taskflow/store/storetest"
)

func TestPurgerDeletesExpiredKeysInBatches(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	env := &apitest.Env{DB: db}
	u := env.NewUser(t, "ann")
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO idempotency_keys (user_id, key, field, fingerprint, result, expires_at)
		SELECT $1::uuid, 'old-' || i, 'createTask', '\x00'::bytea, 'true'::jsonb, now() - interval '1 minute' FROM generate_series(1, 25) i
		UNION ALL
		SELECT $1::uuid, 'live-' || i, 'createTask', '\x00'::bytea, 'true'::jsonb, now() + interval '1 hour' FROM generate_series(1, 5) i`, u.ID); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	// Three purgers at once with batches of 2, as several instances would.
	var wg sync.WaitGroup
	totals := make([]int64, 3)
	for i := range totals {
		p := idempotency.NewPurger(idempotency.PurgerOptions{DB: db, Batch: 2, Registerer: reg, Log: silent()})
		wg.Go(func() {
			n, err := p.PurgeOnce(t.Context())
			if err != nil {
				t.Error(err)
			}
			totals[i] = n
		})
	}
	wg.Wait()
	var left, live int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE key LIKE 'live-%') FROM idempotency_keys`).
		Scan(&left, &live); err != nil {
		t.Fatal(err)
	}
	if left != 5 || live != 5 || totals[0]+totals[1]+totals[2] != 25 {
		t.Fatalf("left %d (live %d), purged %v", left, live, totals)
	}
	if got := counters(t, reg)["taskflow_idempotency_purged_total"]; got != 25 {
		t.Fatalf("purged counter %v", got)
	}
}
