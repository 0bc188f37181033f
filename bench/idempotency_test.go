// Package bench holds benchmarks of TaskFlow over real HTTP and a real Postgres.
package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/httpapi/apitest"
)

// project signs a user up and makes a workspace with one project in it.
func project(b *testing.B, env *apitest.Env) (token, projectID string) {
	b.Helper()
	u := env.SignUp(b, "bench")
	ws := env.Post(b, u.Token, `mutation { createWorkspace(input: {name: "Bench"}) { id } }`, nil)
	var w struct{ CreateWorkspace struct{ ID string } }
	if err := json.Unmarshal(ws.Body.Data, &w); err != nil || w.CreateWorkspace.ID == "" {
		b.Fatalf("workspace: %s", ws.Raw)
	}
	pr := env.Post(b, u.Token, `mutation($w: ID!) { createProject(input: {workspaceId: $w, name: "P"}) { id } }`,
		map[string]any{"w": w.CreateWorkspace.ID})
	var p struct{ CreateProject struct{ ID string } }
	if err := json.Unmarshal(pr.Body.Data, &p); err != nil || p.CreateProject.ID == "" {
		b.Fatalf("project: %s", pr.Raw)
	}
	return u.Token, p.CreateProject.ID
}

// BenchmarkCreateTask measures createTask throughput over HTTP with 8 parallel
// clients per CPU, without an idempotency key and with a fresh key per call (the
// cost of claiming the key and storing the result in the mutation's
// transaction). "hot": every client writes to one workspace, whose audit chain
// serialises the commits; "spread": each client has its own workspace.
func BenchmarkCreateTask(b *testing.B) {
	for _, spread := range []bool{false, true} {
		for _, keyed := range []bool{false, true} {
			name := map[bool]string{false: "hot", true: "spread"}[spread] + "/" + map[bool]string{false: "no-key", true: "key"}[keyed]
			b.Run(name, func(b *testing.B) {
				env := apitest.New(b)
				// One workspace per client goroutine (8 per GOMAXPROCS) when spread.
				clients := 1
				if spread {
					clients = 8 * runtime.GOMAXPROCS(0)
				}
				tokens, projects := make([]string, clients), make([]string, clients)
				for i := range clients {
					tokens[i], projects[i] = project(b, env)
				}
				var next atomic.Int64
				q := `mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title } }`
				var seq atomic.Int64
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					c := int(next.Add(1)-1) % clients
					token, projectID := tokens[c], projects[c]
					for pb.Next() {
						i := seq.Add(1)
						vars := map[string]any{"in": map[string]any{"projectId": projectID, "title": fmt.Sprintf("task %d", i)}}
						if keyed {
							vars["key"] = fmt.Sprintf("bench-%d", i)
						}
						if r := env.Post(b, token, q, vars); r.Code() != "" || r.Status != 200 {
							b.Fatalf("createTask: %s", r.Raw)
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			})
		}
	}
}

func getenvInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func getenvDuration(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}

// alternatingRounds returns how many rounds an alternating benchmark runs and
// how long each lasts: BENCH_ROUNDS and BENCH_ROUND when set, else rounds and
// round.
func alternatingRounds(rounds int, round time.Duration) (int, time.Duration) {
	if v := getenvInt("BENCH_ROUNDS"); v > 0 {
		rounds = v
	}
	if v := getenvDuration("BENCH_ROUND"); v > 0 {
		round = v
	}
	return rounds, round
}
