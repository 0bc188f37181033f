package bench

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/bench/loadgen"
	"taskflow/httpapi/apitest"
)

// BenchmarkCreateTaskKeyOverhead compares createTask throughput with and without
// an idempotency key in alternating rounds (so both modes see the same machine
// load, which matters on a shared box) and reports the median of each and the
// throughput the key costs. 16 clients, each with its own workspace. Run it
// with -benchtime=1x; BENCH_ROUNDS and BENCH_ROUND (a duration) tune it.
func BenchmarkCreateTaskKeyOverhead(b *testing.B) {
	rounds, round := alternatingRounds(8, 1500*time.Millisecond)
	for range b.N {
		env := apitest.New(b)
		const clients = 16
		tokens, projects := make([]string, clients), make([]string, clients)
		for i := range clients {
			tokens[i], projects[i] = project(b, env)
		}
		// A day of earlier keys, as on a server that has been up.
		if err := loadgen.EarlierKeys(b.Context(), env.DB, 250); err != nil {
			b.Fatal(err)
		}
		if _, err := env.DB.Pool.Exec(b.Context(), `ANALYZE`); err != nil {
			b.Fatal(err)
		}
		q := `mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title } }`
		var seq atomic.Int64
		run := func(keyed bool) float64 {
			var done atomic.Int64
			stop := time.Now().Add(round)
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					for time.Now().Before(stop) {
						i := seq.Add(1)
						vars := map[string]any{"in": map[string]any{"projectId": projects[c], "title": fmt.Sprintf("task %d", i)}}
						if keyed {
							vars["key"] = fmt.Sprintf("bench-%d", i)
						}
						if r := env.Post(b, tokens[c], q, vars); r.Code() != "" || r.Status != 200 {
							b.Errorf("createTask: %s", r.Raw)
							return
						}
						done.Add(1)
					}
				})
			}
			start := time.Now()
			wg.Wait()
			return float64(done.Load()) / time.Since(start).Seconds()
		}
		run(false) // warm up
		var plain, keyed []float64
		for r := range rounds {
			if r%2 == 0 {
				plain, keyed = append(plain, run(false)), append(keyed, run(true))
			} else {
				keyed, plain = append(keyed, run(true)), append(plain, run(false))
			}
		}
		mp, mk := median(plain), median(keyed)
		b.ReportMetric(mp, "no-key-tasks/s")
		b.ReportMetric(mk, "key-tasks/s")
		b.ReportMetric(100*(mp-mk)/mp, "key-cost-%")
		b.Logf("no key: %.0f, key: %.0f tasks/s (rounds %v / %v)", mp, mk, plain, keyed)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
