package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/httpapi/apitest"
	"taskflow/reqinfo"
	"taskflow/store"
	"taskflow/store/storetest"
)

// requestTrips is a pgx tracer that records, per request id (reqinfo), the
// round trips a request makes to Postgres: each statement sent on its own,
// and each batch, whose statements go together.
type requestTrips struct {
	mu    sync.Mutex
	trips map[string][]string
}

func (r *requestTrips) add(ctx context.Context, sql string) {
	if id := reqinfo.From(ctx).RequestID; id != "" {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.trips[id] = append(r.trips[id], strings.Join(strings.Fields(sql), " "))
	}
}

func (r *requestTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(ctx, d.SQL)
	return ctx
}

func (*requestTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *requestTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, strings.Fields(q.SQL)[0])
	}
	r.add(ctx, "batch: "+strings.Join(sqls, "; "))
	return ctx
}

func (*requestTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*requestTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// of returns the round trips of the request id.
func (r *requestTrips) of(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trips[id]
}

// mutationTrips is how many round trips to Postgres each mutation makes,
// called with an Idempotency-Key by a client whose token the instance
// remembers. One is the whole unit of work (the key's claim, the checks, the
// change, its event, the key's record and COMMIT, pipelined). The others say
// why they make more (docs/decisions/2026-12-01-one-round-trip.md).
var mutationTrips = map[string]int{
	// The user's read, then, after the password's verification in Go
	// (argon2id: tens of milliseconds), the session's writes.
	"login": 2,
	// The role, read with the key's claim before the URL's DNS lookup (so
	// that a non-member learns nothing from it), then the rest.
	"createWebhookEndpoint": 2,
	// A refusal: the checks of inviteMember, then the ROLLBACK of FORBIDDEN.
	"addMember": 2,
	// The claim with the delivery's check and update; River's InsertTx
	// (with a pg_notify for the queue's producers, at most once per fetch
	// cooldown: one statement or two), and its JobRetryTx when the delivery
	// has a job already that has not run (the fixture's; a job that waits
	// after a run is cancelled and a new one inserted: one more); the event
	// and COMMIT.
	"redeliverWebhook": 5,
	// The claim with the workspace's check, the bounds and the export's
	// insert; River's InsertTx (and its pg_notify, one statement or two);
	// the event and COMMIT.
	"startAuditExport": 4,
	// The upload's key registered before the file is streamed (committed on
	// its own, so that a crash leaves no object unaccounted for); the unit
	// of work; then whether the staged object became the blob (else it is
	// deleted: blobs.Store.Release).
	"addAttachment": 3,
}

// Every mutation of the schema makes at most the round trips to Postgres
// its row of mutationTrips allows (one when it has none), with an
// Idempotency-Key: the whole unit of work, COMMIT included, in one round
// trip, whatever the mutation checks.
func TestEveryMutationRoundTrips(t *testing.T) {
	t.Parallel()
	rec := &requestTrips{trips: map[string][]string{}}
	env := apitest.NewOn(t, store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec }), nil))
	for name := range mutationTrips {
		if _, ok := mutationAudits[name]; !ok {
			t.Errorf("mutationTrips has a row for %s, which is not a mutation", name)
		}
	}
	for name, row := range mutationAudits {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newMutationFixture(t, env)
			caller, vars, files := row.args(f)
			if caller.Token != "" {
				// The token remembered, as for a client that made a request
				// in the last ten minutes.
				if res := env.Post(t, caller.Token, `{ me { id } }`, nil); res.Code() != "" {
					t.Fatal(res.Raw)
				}
			}
			id := fmt.Sprintf("trips-%s-%s", name, f.tag)
			headers := []string{"X-Request-ID", id}
			if name != "register" && name != "login" && name != "logout" { // they take no key
				headers = append(headers, "Idempotency-Key", id)
			}
			var res *apitest.Response
			if files != nil {
				res = env.Upload(t, caller.Token, row.query, vars, files, headers...)
			} else {
				res = env.Post(t, caller.Token, row.query, vars, headers...)
			}
			if res.Code() != row.refused {
				t.Fatalf("%s: %s", name, res.Raw)
			}
			var data map[string]any
			if err := json.Unmarshal(res.Body.Data, &data); row.refused == "" && err != nil {
				t.Fatalf("%s: %s", name, res.Raw)
			}
			most, ok := mutationTrips[name]
			if !ok {
				most = 1
			}
			trips := rec.of(id)
			if most > 1 {
				t.Logf("%s: %d round trips:\n  %s", name, len(trips), strings.Join(trips, "\n  "))
			}
			if len(trips) > most || len(trips) == 0 {
				t.Errorf("%s: %d round trips, want at most %d:\n  %s", name, len(trips), most, strings.Join(trips, "\n  "))
			}
		})
	}
}
