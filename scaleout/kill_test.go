package scaleout_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"taskflow/store/storetest"
)

// Three instances take a concurrent keyed write load (a third of the keys sent
// to two instances at once); all three are SIGKILLed in the middle of it and
// started again, and every request is retried with its key on another
// instance: every key ends with exactly one task and one audit event, and a key
// answered before the kill is replayed with the same task.
func TestSIGKILLDuringWriteLoad(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	pool := openPool(t, dbURL)
	ins := startInstances(t, 3, "DATABASE_URL="+dbURL)
	_, token := newUser(t, pool, "ann")
	project := newProject(t, ins[0], token)

	const keys = 150
	var mu sync.Mutex
	first := make([]any, keys)
	var answered atomic.Int64
	killed := make(chan struct{})
	var killOnce sync.Once
	next := make(chan int)
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for i := range next {
				targets := []*instance{ins[(i+w)%3]}
				if i%3 == 0 {
					targets = append(targets, ins[(i+w+1)%3])
				}
				var pair sync.WaitGroup
				for _, in := range targets {
					pair.Go(func() {
						r, err := in.post(token, createTask, taskVars(project, i))
						if err != nil || r.code() != "" {
							return // cut off by the kill, or a twin in progress
						}
						mu.Lock()
						if first[i] == nil {
							first[i] = r.field("createTask")["id"]
						} else if first[i] != r.field("createTask")["id"] {
							t.Errorf("key %d answered with two tasks before the kill", i)
						}
						mu.Unlock()
						if answered.Add(1) == keys/4 {
							killOnce.Do(func() {
								for _, in := range ins {
									in.signalKill()
								}
								close(killed)
							})
						}
					})
				}
				pair.Wait()
			}
		})
	}
	for i := range keys {
		select {
		case next <- i:
		case <-killed:
		}
	}
	close(next)
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("the load ended before the kill")
	}

	for _, in := range ins {
		in.launch()
	}
	for _, in := range ins {
		in.waitReady()
	}
	replays := 0
	var rmu sync.Mutex
	sem := make(chan struct{}, 12)
	var retry sync.WaitGroup
	for i := range keys {
		retry.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			in := ins[(i+1)%3]
			r, err := postKeyed(in, token, taskVars(project, i))
			if err != nil || r.code() != "" {
				t.Errorf("retry of key %d: %v %v", i, err, r)
				return
			}
			id := r.field("createTask")["id"]
			mu.Lock()
			before := first[i]
			mu.Unlock()
			if before != nil && (id != before || r.Header.Get("Idempotent-Replayed") != "true") {
				t.Errorf("key %d answered %v before the kill, after it: %s", i, before, r)
			}
			if r.Header.Get("Idempotent-Replayed") == "true" {
				rmu.Lock()
				replays++
				rmu.Unlock()
			}
		})
	}
	retry.Wait()
	answeredKeys := 0
	for _, id := range first {
		if id != nil {
			answeredKeys++
		}
	}
	if answeredKeys == 0 || answeredKeys == keys {
		t.Errorf("%d of %d keys answered before the kill: the kill did not cut the load", answeredKeys, keys)
	}
	if replays < answeredKeys {
		t.Errorf("%d replays after the restart, want at least the %d keys answered before", replays, answeredKeys)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != keys {
		t.Errorf("%d tasks for %d keys", n, keys)
	}
	if n := count(t, pool, `SELECT count(DISTINCT title) FROM tasks`); n != keys {
		t.Errorf("%d distinct titles for %d keys", n, keys)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_events WHERE action = 'task.created'`); n != keys {
		t.Errorf("%d task.created events for %d keys", n, keys)
	}
	if n := count(t, pool, `SELECT count(*) FROM idempotency_keys`); n < keys {
		t.Errorf("%d idempotency records for %d keys", n, keys)
	}
}
