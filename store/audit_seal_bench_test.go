package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"taskflow/audit"
	"taskflow/store"
	"taskflow/store/storetest"
)

// BenchmarkCheckpointFarPastItsLast measures signing a chain 100,000 seals
// past its last checkpoint: Checkpoint and Round by a sealer that checked
// none of them (a restarted one), and Checkpoint by the one that checked
// them all, one event later. Each iteration makes its own chain (not
// timed). Run with -run '^$' -bench CheckpointFarPast -benchtime 3x.
func BenchmarkCheckpointFarPastItsLast(b *testing.B) {
	ctx := context.Background()
	db := storetest.DB(b)
	if err := db.EnsureAuditPartitions(ctx); err != nil {
		b.Fatal(err)
	}
	key := audit.GenerateSigningKey()
	chains := 0
	insert := func(chain string, n int) {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, action, entity_type, entity_id, occurred_at, metadata)
			SELECT gen_random_uuid(), $1, 'user.login_failed', 'user', i::text, clock_timestamp(), jsonb_build_object('title', 'event ' || i)
			FROM generate_series(1, $2) i`, chain, n); err != nil {
			b.Fatal(err)
		}
	}
	// farChain returns a chain 100,000 seals past its last checkpoint.
	farChain := func() string {
		chains++
		chain := fmt.Sprintf("bench:%d", chains)
		insert(chain, 1)
		storetest.SealAll(b, &store.AuditSealer{DB: db})
		if _, err := (&store.AuditSealer{DB: db, Key: key}).Checkpoint(ctx, chain); err != nil {
			b.Fatal(err)
		}
		insert(chain, 100_000)
		storetest.SealAll(b, &store.AuditSealer{DB: db, Batch: store.MaxSpineRead})
		return chain
	}
	b.Run("Checkpoint restarted", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			chain := farChain()
			b.StartTimer()
			if _, err := (&store.AuditSealer{DB: db, Key: key}).Checkpoint(ctx, chain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Round restarted", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			farChain()
			b.StartTimer()
			if _, err := (&store.AuditSealer{DB: db, Key: key, CheckpointEvery: time.Nanosecond}).Round(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Checkpoint remembering", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			chain := farChain()
			sealer := &store.AuditSealer{DB: db, Key: key}
			if _, err := sealer.Checkpoint(ctx, chain); err != nil {
				b.Fatal(err)
			}
			insert(chain, 1)
			storetest.SealAll(b, &store.AuditSealer{DB: db})
			b.StartTimer()
			if _, err := sealer.Checkpoint(ctx, chain); err != nil {
				b.Fatal(err)
			}
		}
	})
}
