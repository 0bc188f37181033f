package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"taskflow/store"
	"taskflow/store/storetest"
)

// BenchmarkInviteAccountOrNot times inviteMember (the store operation, one at
// a time, so nothing but the e-mail differs) for an e-mail that has an account
// and one that has none, in alternating pairs, and reports the median of each
// and the median and interquartile range of the pairs' differences: what a
// caller could learn about accounts from the invite's timing, next to the
// noise it would have to see through. BENCH_ROUNDS sets the number of pairs (default 2000). Run
// it with -benchtime=1x.
func BenchmarkInviteAccountOrNot(b *testing.B) {
	pairs := 2000
	if v := getenvInt("BENCH_ROUNDS"); v > 0 {
		pairs = v
	}
	for range b.N {
		db := storetest.DB(b)
		ctx := context.Background()
		var owner store.User
		if err := db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('owner@example.com', 'Owner', 'x')
			RETURNING id, email`).Scan(&owner.ID, &owner.Email); err != nil {
			b.Fatal(err)
		}
		// As many accounts as pairs, plus as many again that no pair invites.
		if _, err := db.Pool.Exec(ctx, `INSERT INTO users (email, name, password_hash)
			SELECT 'user-' || g || '@example.com', 'User', 'x' FROM generate_series(1, $1::int * 2) g`, pairs); err != nil {
			b.Fatal(err)
		}
		ws, err := db.CreateWorkspace(ctx, &owner, "Bench")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `ANALYZE`); err != nil {
			b.Fatal(err)
		}
		invite := func(email string) float64 {
			start := time.Now()
			if _, err := db.InviteMember(ctx, &owner, ws.ID, email, store.RoleMember); err != nil {
				b.Fatal(err)
			}
			return float64(time.Since(start).Nanoseconds()) / 1e3
		}
		for i := range 50 { // warm up
			invite(fmt.Sprintf("warm-%d@example.com", i))
		}
		var with, without, diffs []float64
		for i := range pairs {
			known, unknown := fmt.Sprintf("user-%d@example.com", i+1), fmt.Sprintf("nobody-%d@example.com", i+1)
			if i%2 == 0 {
				with, without = append(with, invite(known)), append(without, invite(unknown))
			} else {
				without, with = append(without, invite(unknown)), append(with, invite(known))
			}
			diffs = append(diffs, with[i]-without[i])
			if i%200 == 199 { // stay under the open-invitation bound
				if _, err := db.Pool.Exec(ctx, `DELETE FROM invitations`); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(median(with), "account-µs")
		b.ReportMetric(median(without), "no-account-µs")
		b.ReportMetric(median(diffs), "pair-diff-µs")
		slices.Sort(diffs)
		b.ReportMetric(diffs[len(diffs)*3/4]-diffs[len(diffs)/4], "pair-diff-iqr-µs")
	}
}
