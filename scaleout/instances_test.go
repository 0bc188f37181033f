package scaleout_test

import (
	"os"
	"sync"
	"testing"

	"github.com/peterldowns/pgtestdb"

	"taskflow/ratelimit/ratelimittest"
	"taskflow/store/storetest"
)

// postKeyed sends a keyed createTask until it gets an answer other than
// IDEMPOTENCY_IN_PROGRESS (a concurrent twin still running past the wait bound).
func postKeyed(in *instance, token string, vars map[string]any) (*response, error) {
	for {
		r, err := in.post(token, createTask, vars)
		if err != nil || r.code() != "IDEMPOTENCY_IN_PROGRESS" {
			return r, err
		}
	}
}

// Three instances started at the same moment on one empty database migrate it
// once between them, and a keyed workload spread over them, with some keys sent
// to two or three instances at once, has exactly one effect per key.
func TestThreeInstancesOneDatabase(t *testing.T) {
	t.Parallel()
	dbURL := pgtestdb.Custom(t, storetest.Config(t), pgtestdb.NoopMigrator{}).URL()
	// Each instance's pool holds at most 3 connections (pool sizing by URL).
	ins := startInstances(t, 3, "DATABASE_URL="+dbURL+"&pool_max_conns=3&application_name=taskflow-scaleout")

	pool := openPool(t, dbURL)
	files, err := os.ReadDir("../store/migrations")
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM schema_migrations`); n != len(files) {
		t.Fatalf("schema_migrations has %d rows for %d migration files", n, len(files))
	}

	_, token := newUser(t, pool, "ann")
	project := newProject(t, ins[0], token)

	const keys = 90
	type answer struct {
		key int
		id  any
	}
	answers := make(chan answer, keys*3)
	errs := make(chan string, keys*3)
	sem := make(chan struct{}, 12)
	var wg sync.WaitGroup
	for i := range keys {
		targets := []*instance{ins[i%3]}
		switch i % 5 {
		case 0: // the same key on all three instances at once
			targets = ins
		case 1: // on two
			targets = append(targets, ins[(i+1)%3])
		}
		for _, in := range targets {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				r, err := postKeyed(in, token, taskVars(project, i))
				switch {
				case err != nil:
					errs <- err.Error()
				case r.code() != "":
					errs <- r.String()
				default:
					answers <- answer{i, r.field("createTask")["id"]}
				}
			})
		}
	}
	wg.Wait()
	close(answers)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	ids := map[int]any{}
	for a := range answers {
		if prev, ok := ids[a.key]; ok && prev != a.id {
			t.Errorf("key %d answered with two tasks: %v and %v", a.key, prev, a.id)
		}
		ids[a.key] = a.id
	}
	if len(ids) != keys {
		t.Fatalf("%d keys answered, want %d", len(ids), keys)
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
	conns := count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'taskflow-scaleout'`)
	if conns < 1 || conns > 3*3 {
		t.Errorf("%d Postgres connections of three instances with pool_max_conns=3", conns)
	}
	for _, in := range ins {
		if in.exited() {
			t.Errorf("%s exited:\n%s", in.addr, in.stderr)
		}
	}
}

// Three instances on one Redis share every rate-limit budget, with cost-budget
// leases (the default) and without them (exact answers on every instance).
func TestThreeInstancesShareBudgets(t *testing.T) {
	t.Parallel()
	for name, exact := range map[string]bool{"leases": false, "exact": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rds := ratelimittest.StartRedis(t)
			dbURL := storetest.URL(t)
			env := append([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=redis://" + rds.Addr() + "/0"}, budgetEnv...)
			if exact {
				env = append(env, "RATE_LIMIT_LEASE=0")
			}
			checkBudgetsShared(t, startInstances(t, 3, env...), openPool(t, dbURL), exact)
		})
	}
}
