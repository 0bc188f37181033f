package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// hookURL is a public address no store test sends to (TEST-NET-3): no
// webhook worker runs here.
const hookURL = "https://203.0.113.10/hook"

// hookFixture is a workspace with an OWNER, a MEMBER and a project.
type hookFixture struct {
	*taskFixture
	owner *store.User
}

func newHookFixture(t *testing.T) *hookFixture {
	t.Helper()
	f := &hookFixture{taskFixture: newTaskFixture(t), owner: &store.User{}}
	ctx := t.Context()
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('o@example.com', 'O', 'x')
		RETURNING id, email, name`).Scan(&f.owner.ID, &f.owner.Email, &f.owner.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`,
		f.workspace, f.owner.ID); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *hookFixture) endpoint(t *testing.T, actions ...string) string {
	t.Helper()
	ep, err := f.db.CreateWebhookEndpoint(t.Context(), f.owner, store.WebhookEndpointInput{
		WorkspaceID: f.workspace, URL: hookURL, Actions: actions})
	if err != nil {
		t.Fatal(err)
	}
	return ep.Endpoint.ID
}

// deliveredEvents returns, per event id, how many deliveries the endpoint has.
func (f *hookFixture) deliveredEvents(t *testing.T, endpoint string) map[string]int {
	t.Helper()
	rows, err := f.db.Pool.Query(t.Context(), `SELECT event_id::text FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id]++
	}
	return out
}

// Writers commit and roll back transactions of task events, their commits
// overtaking each other, while three dispatchers run rounds of 5 at once:
// every committed task.created event gets exactly one delivery and one River
// job, no rolled-back or unsubscribed event gets one, and nothing of before
// the endpoint existed.
func TestDispatcherEnqueuesEveryCommittedEventOnce(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	before, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "before"})
	if err != nil {
		t.Fatal(err)
	}
	ep := f.endpoint(t, "task.created")

	stop := make(chan struct{})
	var dispatchers sync.WaitGroup
	for range 3 {
		dispatchers.Go(func() {
			d := &store.WebhookDispatcher{DB: f.db, Batch: 5}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := d.Round(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	committed := map[string]bool{}
	var writers sync.WaitGroup
	for w := range 6 {
		writers.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 25 {
				var ids []string
				err := f.db.UnitOfWork(ctx, func(ctx context.Context) error {
					for j := range 1 + rnd.IntN(3) {
						task, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: fmt.Sprintf("%d-%d-%d", w, i, j)})
						if err != nil {
							return err
						}
						ids = append(ids, task.ID)
						if _, err := f.db.UpdateTask(ctx, f.member, task.ID, store.TaskPatch{Title: store.Some(ptr(task.Title + "!"))}); err != nil {
							return err
						}
					}
					time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond) // let commits overtake
					if i%5 == 4 {
						return errRollBack
					}
					return nil
				})
				switch {
				case errors.Is(err, errRollBack):
				case err != nil:
					t.Error(err)
				default:
					mu.Lock()
					for _, id := range ids {
						committed[id] = true
					}
					mu.Unlock()
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	dispatchers.Wait()
	storetest.DispatchAll(t, f.db)

	rows, err := f.db.Pool.Query(ctx, `SELECT e.entity_id, count(d.id) FROM audit_events e
		LEFT JOIN webhook_deliveries d ON d.event_id = e.id AND d.endpoint_id = $1
		WHERE e.action = 'task.created' GROUP BY e.entity_id`, ep)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	rows.Close()
	if got[before.ID] != 0 {
		t.Errorf("a task created before the endpoint got %d deliveries", got[before.ID])
	}
	delete(got, before.ID)
	if len(committed) == 0 || len(got) != len(committed) {
		t.Errorf("%d task.created events for %d committed tasks", len(got), len(committed))
	}
	for id := range committed {
		if got[id] != 1 {
			t.Errorf("task %s: %d deliveries, want 1", id, got[id])
		}
	}
	var deliveries, jobs, others int
	if err := f.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_deliveries),
		(SELECT count(DISTINCT args->>'delivery_id') FROM river_job WHERE kind = 'webhook_delivery'),
		(SELECT count(*) FROM webhook_deliveries WHERE action <> 'task.created')`).Scan(&deliveries, &jobs, &others); err != nil {
		t.Fatal(err)
	}
	if deliveries != len(committed) || jobs != deliveries || others != 0 {
		t.Errorf("%d deliveries, %d with a job, %d of other actions; want %d, %d, 0", deliveries, jobs, others, len(committed), len(committed))
	}
}

func ptr[T any](v T) *T { return &v }

// An endpoint gets the events of its own workspace and actions while it is
// enabled; a ping reaches only the pinged endpoint, even disabled; a
// delivery's payload is the versioned envelope of its event.
func TestDispatcherMatching(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	other := newHookFixture(t) // another database: nothing of it may arrive
	_ = other
	ctx := t.Context()
	all := f.endpoint(t)
	projects := f.endpoint(t, "project.*")
	off := f.endpoint(t, "task.*")
	if _, err := f.db.SetWebhookEndpointEnabled(ctx, f.owner, off, false, nil); err != nil {
		t.Fatal(err)
	}
	p, err := f.db.CreateProject(ctx, f.member, f.workspace, "Q", nil)
	if err != nil {
		t.Fatal(err)
	}
	task, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: p.ID, Title: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.db.PingWebhookEndpoint(ctx, f.owner, off); err != nil {
		t.Fatal(err)
	}
	storetest.DispatchAll(t, f.db)
	actions := func(ep string) string {
		var s string
		if err := f.db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(action, ',' ORDER BY created_at, action), '')
			FROM webhook_deliveries WHERE endpoint_id = $1`, ep).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// all was created before projects and off: it sees their webhook.* events.
	if got := actions(all); got != "webhook.created,webhook.created,webhook.disabled,project.created,task.created" {
		t.Errorf("the every-action endpoint got %s", got)
	}
	if got := actions(projects); got != "project.created" {
		t.Errorf("the project.* endpoint got %s", got)
	}
	if got := actions(off); got != "webhook.pinged" {
		t.Errorf("the disabled endpoint got %s, want its ping only", got)
	}
	var payload string
	if err := f.db.Pool.QueryRow(ctx, `SELECT convert_from(payload, 'UTF8') FROM webhook_deliveries
		WHERE endpoint_id = $1 AND action = 'task.created'`, all).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version":1`, `"type":"task.created"`, `"entityId":"` + task.ID + `"`, `"actorId":"` + f.member.ID + `"`,
		`"workspaceId":"` + f.workspace + `"`, `"metadata":{`, `"title":"x"`} {
		if !strings.Contains(payload, want) {
			t.Errorf("payload lacks %s: %s", want, payload)
		}
	}
}

// Only OWNERs and ADMINs manage and see endpoints; bad input is
// BAD_USER_INPUT and changes nothing; the secret is in no audit event.
func TestWebhookEndpointRules(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	in := store.WebhookEndpointInput{WorkspaceID: f.workspace, URL: hookURL}
	if _, err := f.db.CreateWebhookEndpoint(ctx, f.member, in); errs.CodeOf(err) != errs.CodeForbidden {
		t.Errorf("a MEMBER creates an endpoint: %v", err)
	}
	stranger := &store.User{ID: "00000000-0000-0000-0000-000000000001"}
	if _, err := f.db.CreateWebhookEndpoint(ctx, stranger, in); errs.CodeOf(err) != errs.CodeNotFound {
		t.Errorf("a stranger creates an endpoint: %v", err)
	}
	for _, u := range []string{"http://203.0.113.10/", "https://127.0.0.1/", "https://localhost/", "https://10.1.2.3/",
		"https://169.254.169.254/latest", "https://[::1]/", "https://[fd00:ec2::254]/", "https://[::ffff:127.0.0.1]/",
		"https://100.100.100.200/", "https://0.0.0.0/", "ftp://203.0.113.10/", "https://user:pw@203.0.113.10/",
		"https://203.0.113.10/#frag", "/relative", "https://203.0.113.10:0/", "https://203.0.113.10:99999/",
		"https://" + strings.Repeat("a", 3000) + "/"} {
		in.URL = u
		if _, err := f.db.CreateWebhookEndpoint(ctx, f.owner, in); errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("url %.60q: %v, want BAD_USER_INPUT", u, err)
		}
	}
	in.URL = hookURL
	in.Actions = []string{"*.created"}
	if _, err := f.db.CreateWebhookEndpoint(ctx, f.owner, in); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("actions *.created: %v", err)
	}
	in.Actions = []string{"task.*", "task.*", "comment.created"}
	ep, err := f.db.CreateWebhookEndpoint(ctx, f.owner, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ep.Endpoint.Actions, ","); got != "comment.created,task.*" || !strings.HasPrefix(ep.Secret, "whsec_") {
		t.Errorf("endpoint %v, secret %.6s", got, ep.Secret)
	}
	if _, err := f.db.WebhookEndpoints(ctx, f.member, f.workspace); errs.CodeOf(err) != errs.CodeForbidden {
		t.Errorf("a MEMBER lists endpoints: %v", err)
	}
	if _, err := f.db.WebhookEndpoint(ctx, stranger, ep.Endpoint.ID); errs.CodeOf(err) != errs.CodeNotFound {
		t.Errorf("a stranger reads an endpoint: %v", err)
	}
	for name, call := range map[string]func(u *store.User) error{
		"update": func(u *store.User) error {
			_, err := f.db.UpdateWebhookEndpoint(ctx, u, ep.Endpoint.ID, store.WebhookEndpointPatch{URL: ptr("https://127.0.0.1/")})
			return err
		},
		"disable": func(u *store.User) error {
			_, err := f.db.SetWebhookEndpointEnabled(ctx, u, ep.Endpoint.ID, false, nil)
			return err
		},
		"rotate": func(u *store.User) error { _, err := f.db.RotateWebhookSecret(ctx, u, ep.Endpoint.ID); return err },
		"ping":   func(u *store.User) error { return f.db.PingWebhookEndpoint(ctx, u, ep.Endpoint.ID) },
		"delete": func(u *store.User) error { return f.db.DeleteWebhookEndpoint(ctx, u, ep.Endpoint.ID) },
	} {
		before := storetest.Snapshot(t, f.db.Pool)
		if err := call(f.member); errs.CodeOf(err) != errs.CodeForbidden {
			t.Errorf("%s by a MEMBER: %v", name, err)
		}
		if err := call(stranger); errs.CodeOf(err) != errs.CodeNotFound {
			t.Errorf("%s by a stranger: %v", name, err)
		}
		storetest.AssertUnchanged(t, f.db.Pool, before, name+" refused")
	}
	if _, err := f.db.UpdateWebhookEndpoint(ctx, f.owner, ep.Endpoint.ID, store.WebhookEndpointPatch{URL: ptr("https://127.0.0.1/")}); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("update to loopback: %v", err)
	}
	rot, err := f.db.RotateWebhookSecret(ctx, f.owner, ep.Endpoint.ID)
	if err != nil {
		t.Fatal(err)
	}
	var leaks int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE metadata::text LIKE '%' || $1 || '%'
		OR metadata::text LIKE '%' || $2 || '%' OR metadata::text ILIKE '%secret%'`,
		strings.TrimPrefix(ep.Secret, "whsec_")[:20], strings.TrimPrefix(rot.Secret, "whsec_")[:20]).Scan(&leaks); err != nil || leaks != 0 {
		t.Errorf("%d audit events hold a secret (%v)", leaks, err)
	}
	for range store.MaxWebhookEndpoints - 1 {
		if _, err := f.db.CreateWebhookEndpoint(ctx, f.owner, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.db.CreateWebhookEndpoint(ctx, f.owner, in); errs.CodeOf(err) != errs.CodeConflict {
		t.Errorf("endpoint %d: %v, want CONFLICT", store.MaxWebhookEndpoints+1, err)
	}
}

// A redelivery makes a FAILED delivery PENDING with one job; a second one
// while the job waits moves it, never adds one; an attempt in flight makes it
// CONFLICT; a disabled endpoint's delivery is refused.
func TestRedeliver(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	ep, id := f.pingDelivery(t)
	if _, err := f.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'FAILED' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.RedeliverWebhook(ctx, f.member, id); errs.CodeOf(err) != errs.CodeForbidden {
		t.Errorf("a MEMBER redelivers: %v", err)
	}
	for range 2 {
		d, err := f.db.RedeliverWebhook(ctx, f.owner, id)
		if err != nil || d.Status != store.WebhookPending {
			t.Fatalf("redeliver: %+v %v", d, err)
		}
	}
	var waiting int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'available' AND args->>'delivery_id' = $1`, id).Scan(&waiting); err != nil || waiting != 1 {
		t.Errorf("%d jobs wait for the delivery (%v), want 1", waiting, err)
	}
	a, err := f.db.ClaimWebhookAttempt(ctx, id, time.Minute)
	if err != nil || a.Attempt != 1 {
		t.Fatalf("claim: %+v %v", a, err)
	}
	if _, err := f.db.ClaimWebhookAttempt(ctx, id, time.Minute); !errors.As(err, new(*store.WebhookInFlightError)) {
		t.Errorf("a second claim while the first holds: %v", err)
	}
	if _, err := f.db.RedeliverWebhook(ctx, f.owner, id); errs.CodeOf(err) != errs.CodeConflict {
		t.Errorf("redeliver while in flight: %v", err)
	}
	if err := f.db.RecordWebhookAttempt(ctx, id, store.WebhookOutcome{Error: "HTTP 500"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.SetWebhookEndpointEnabled(ctx, f.owner, ep, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.RedeliverWebhook(ctx, f.owner, id); errs.CodeOf(err) != errs.CodeConflict {
		t.Errorf("redeliver to a disabled endpoint: %v", err)
	}
}

// cursorLocks is a pgx tracer that counts the webhook dispatcher's rounds
// past its probe: each locks the cursor.
type cursorLocks struct{ n atomic.Int64 }

func (c *cursorLocks) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM webhook_dispatch_cursor WHERE id = 1 FOR UPDATE") {
		c.n.Add(1)
	}
	return ctx
}

func (*cursorLocks) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// With no webhook endpoint anywhere, a running dispatcher follows the spine
// once per DefaultDispatchQuiet, not at each commit of its instance (which
// wakes it); once an endpoint exists, its events are delivered.
func TestDispatcherWithoutEndpointsIsQuiet(t *testing.T) {
	t.Parallel()
	locks := &cursorLocks{}
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = locks }), nil)
	ctx := t.Context()
	owner := mkUser(t, db, "owner@example.com")
	var ws, project string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('W') RETURNING id`).Scan(&ws); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`, ws, owner.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'P') RETURNING id`, ws).Scan(&project); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); (&store.WebhookDispatcher{DB: db}).Run(runCtx) }()
	defer func() { cancel(); <-done }()
	create := func() string {
		t.Helper()
		task, err := db.CreateTask(ctx, owner, store.NewTask{ProjectID: project, Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return task.ID
	}

	start := time.Now()
	const commits = 80
	for range commits {
		create()
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	// A round when the first commit woke it, then one per quiet second (and
	// one at the end).
	if n, most := locks.n.Load(), 2+int64(elapsed/store.DefaultDispatchQuiet); n > most {
		t.Fatalf("%d commits in %v with no endpoint: %d dispatch rounds, want at most %d",
			commits, elapsed.Round(time.Millisecond), n, most)
	}

	ep, err := db.CreateWebhookEndpoint(ctx, owner, store.WebhookEndpointInput{WorkspaceID: ws, URL: hookURL})
	if err != nil {
		t.Fatal(err)
	}
	task := create()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries d JOIN audit_events e ON e.id = d.event_id
			WHERE d.endpoint_id = $1 AND e.entity_id = $2`, ep.Endpoint.ID, task).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task created after the endpoint has %d deliveries, want 1", n)
		}
	}
}

// A delivery of an ENABLED endpoint, held by an attempt whose hold ends while
// the next claim runs (here the claim statement waits a moment on a lock, as
// any slow statement may; a job snoozed until exactly the hold's end, as Work
// does, hits the same window): ClaimWebhookAttempt sees the hold in its first
// statement, unclaimable sees it expired in its second and takes "PENDING and
// free" for "the endpoint is disabled", marking the delivery FAILED, and the
// worker returned nil (ErrWebhookGone): the delivery was lost although its
// endpoint is enabled (found in review, 2026-12-04). It is now an attempt to
// make after the worker's short snooze.
func TestClaimRaceKeepsDeliveryOfEnabledEndpoint(t *testing.T) {
	f := newHookFixture(t)
	ctx := t.Context()
	_, id := f.pingDelivery(t)
	// Something holds webhook_endpoints for a moment (stands for a slow claim).
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// A first attempt holds the delivery for 700 ms (its connection, idle
	// again, has the claim statement prepared: the next claim takes it).
	if _, err := f.db.ClaimWebhookAttempt(ctx, id, 700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_endpoints IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	type claim struct {
		a   *store.WebhookAttempt
		err error
	}
	done := make(chan claim, 1)
	go func() {
		a, err := f.db.ClaimWebhookAttempt(ctx, id, time.Minute)
		done <- claim{a, err}
	}()
	time.Sleep(1200 * time.Millisecond) // the first hold ends meanwhile
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-done
	if c.a != nil {
		t.Logf("second claim: attempt %d", c.a.Attempt)
	}
	t.Logf("second claim err: %v", c.err)
	var status, lastError string
	var enabled bool
	if err := f.db.Pool.QueryRow(ctx, `SELECT d.status, coalesce(d.last_error, ''), e.enabled FROM webhook_deliveries d
		JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.id = $1`, id).Scan(&status, &lastError, &enabled); err != nil {
		t.Fatal(err)
	}
	if !enabled {
		t.Fatal("the endpoint is disabled: the test is wrong")
	}
	if status != string(store.WebhookPending) || errors.Is(c.err, store.ErrWebhookGone) {
		t.Errorf("delivery of an enabled endpoint is %s (%q), claim: %v; want it still PENDING and retried", status, lastError, c.err)
	}
}

// The paused-instance case the hold is for: attempt A's hold ends while A is
// paused, attempt B claims and sends; A wakes and records its (timed-out)
// failure. Until 2026-12-04 (found in review) A's record cleared B's hold
// (in_flight_until = NULL), so a third attempt (the job's retry, or a
// redelivery) could start while B was still in flight: two attempts of one
// delivery at once. A's outcome, of an attempt claimed again since, is not
// recorded.
func TestStaleAttemptRecordKeepsAnotherAttemptsHold(t *testing.T) {
	f := newHookFixture(t)
	ctx := t.Context()
	_, id := f.pingDelivery(t)
	a, err := f.db.ClaimWebhookAttempt(ctx, id, 100*time.Millisecond) // A
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)                                        // A is paused past its hold
	if _, err := f.db.ClaimWebhookAttempt(ctx, id, time.Minute); err != nil { // B, in flight for up to a minute
		t.Fatal(err)
	}
	next := time.Now().Add(time.Second)
	if err := f.db.RecordWebhookAttempt(ctx, id, store.WebhookOutcome{Error: "no answer within 15s", NextAttemptAt: &next, Attempt: a.Attempt}); err != nil { // A's record
		t.Fatal(err)
	}
	if _, err := f.db.ClaimWebhookAttempt(ctx, id, time.Minute); !errors.As(err, new(*store.WebhookInFlightError)) {
		t.Errorf("a third claim while B holds the delivery: %v; want *WebhookInFlightError", err)
	}
}

// pingDelivery pings a new endpoint of the owner and returns the endpoint's
// id and that of the PENDING delivery the dispatcher made of the ping.
func (f *hookFixture) pingDelivery(t *testing.T) (endpoint, delivery string) {
	t.Helper()
	ctx := t.Context()
	ep := f.endpoint(t, "webhook.pinged")
	if err := f.db.PingWebhookEndpoint(ctx, f.owner, ep); err != nil {
		t.Fatal(err)
	}
	storetest.DispatchAll(t, f.db)
	var id string
	if err := f.db.Pool.QueryRow(ctx, `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, ep).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return ep, id
}

// jobsOf returns the state, attempt and max attempts of the delivery's jobs,
// oldest first, as "state attempt/max" joined by commas.
func (f *hookFixture) jobsOf(t *testing.T, delivery string) string {
	t.Helper()
	var s string
	if err := f.db.Pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(format('%s %s/%s', state, attempt, max_attempts), ',' ORDER BY id), '')
		FROM river_job WHERE args->>'delivery_id' = $1`, delivery).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// lastAttemptClaimed gives the delivery ten failed attempts and claims its
// last for lease (nothing records it: its instance died during it).
func (f *hookFixture) lastAttemptClaimed(t *testing.T, delivery string, lease time.Duration) {
	t.Helper()
	if _, err := f.db.Pool.Exec(t.Context(), `UPDATE webhook_deliveries SET attempts = $2 - 1, last_attempt_at = now(),
		last_status_code = 500, last_latency_ms = 12, last_error = 'HTTP 500' WHERE id = $1`, delivery, store.WebhookMaxAttempts); err != nil {
		t.Fatal(err)
	}
	if a, err := f.db.ClaimWebhookAttempt(t.Context(), delivery, lease); err != nil || a.Attempt != store.WebhookMaxAttempts {
		t.Fatalf("claim of the last attempt: %+v %v", a, err)
	}
}

// deliveryState returns the delivery's status, last status code (0: none) and
// last error.
func (f *hookFixture) deliveryState(t *testing.T, delivery string) (store.WebhookDeliveryStatus, int, string) {
	t.Helper()
	var status store.WebhookDeliveryStatus
	var code int
	var lastErr string
	if err := f.db.Pool.QueryRow(t.Context(), `SELECT status, coalesce(last_status_code, 0), coalesce(last_error, '')
		FROM webhook_deliveries WHERE id = $1`, delivery).Scan(&status, &code, &lastErr); err != nil {
		t.Fatal(err)
	}
	return status, code, lastErr
}

// A delivery's job has one run more than the delivery's attempts, for a last
// attempt that does not end it; GiveUpWebhookDelivery, that run, waits while
// the attempt holds the delivery, then marks it FAILED, saying whether the
// attempt was interrupted (claimed, never recorded) or not made; a delivery
// that is not PENDING is left as it is.
func TestGiveUpWebhookDelivery(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	_, id := f.pingDelivery(t)
	if got, want := f.jobsOf(t, id), fmt.Sprintf("available 0/%d", store.WebhookMaxAttempts+1); got != want {
		t.Errorf("the delivery's job: %s, want %s", got, want)
	}
	f.lastAttemptClaimed(t, id, 300*time.Millisecond)
	var inFlight *store.WebhookInFlightError
	if err := f.db.GiveUpWebhookDelivery(ctx, id); !errors.As(err, &inFlight) {
		t.Fatalf("give up while the last attempt holds the delivery: %v, want *WebhookInFlightError", err)
	}
	time.Sleep(time.Until(inFlight.Until) + 50*time.Millisecond)
	if err := f.db.GiveUpWebhookDelivery(ctx, id); err != nil {
		t.Fatal(err)
	}
	if status, code, lastErr := f.deliveryState(t, id); status != store.WebhookFailed || code != 0 || lastErr != store.WebhookLastAttemptInterrupted {
		t.Errorf("after giving up: %s, %d, %q; want FAILED, no status, interrupted", status, code, lastErr)
	}
	if err := f.db.GiveUpWebhookDelivery(ctx, id); !errors.Is(err, store.ErrWebhookGone) {
		t.Errorf("give up a FAILED delivery: %v, want ErrWebhookGone", err)
	}

	// The last attempt was never claimed (its claim failed): not made.
	_, id2 := f.pingDelivery(t)
	if _, err := f.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET attempts = $2 - 1, last_status_code = 503,
		last_error = 'HTTP 503' WHERE id = $1`, id2, store.WebhookMaxAttempts); err != nil {
		t.Fatal(err)
	}
	if err := f.db.GiveUpWebhookDelivery(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if status, code, lastErr := f.deliveryState(t, id2); status != store.WebhookFailed || code != 503 || lastErr != store.WebhookLastAttemptNotMade {
		t.Errorf("after giving up: %s, %d, %q; want FAILED, 503 kept, not made", status, code, lastErr)
	}
}

// FailStrandedWebhookDeliveries marks FAILED the PENDING deliveries with no
// job waiting or running and no hold (a job of an earlier version, with no
// run after the last attempt, that River discarded), and no other: not one
// whose job waits, nor one an attempt may still hold; a redelivered one has
// a job again.
func TestFailStrandedWebhookDeliveries(t *testing.T) {
	t.Parallel()
	f := newHookFixture(t)
	ctx := t.Context()
	discard := func(id string) {
		t.Helper()
		if _, err := f.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', attempt = $2, max_attempts = $2,
			finalized_at = now() WHERE args->>'delivery_id' = $1`, id, store.WebhookMaxAttempts); err != nil {
			t.Fatal(err)
		}
	}
	_, interrupted := f.pingDelivery(t) // its instance died during the last attempt
	f.lastAttemptClaimed(t, interrupted, time.Millisecond)
	discard(interrupted)
	_, notMade := f.pingDelivery(t) // the last claim failed
	discard(notMade)
	_, held := f.pingDelivery(t) // the attempt may still be in flight
	f.lastAttemptClaimed(t, held, time.Minute)
	discard(held)
	_, waiting := f.pingDelivery(t) // its job waits
	f.lastAttemptClaimed(t, waiting, time.Millisecond)
	time.Sleep(10 * time.Millisecond)

	n, err := f.db.FailStrandedWebhookDeliveries(ctx)
	if err != nil || n != 2 {
		t.Errorf("FailStrandedWebhookDeliveries: %d, %v; want 2", n, err)
	}
	for id, want := range map[string]string{interrupted: store.WebhookLastAttemptInterrupted, notMade: store.WebhookLastAttemptNotMade} {
		if status, _, lastErr := f.deliveryState(t, id); status != store.WebhookFailed || lastErr != want {
			t.Errorf("a stranded delivery: %s %q, want FAILED %q", status, lastErr, want)
		}
	}
	for name, id := range map[string]string{"held": held, "waiting": waiting} {
		if status, _, _ := f.deliveryState(t, id); status != store.WebhookPending {
			t.Errorf("the %s delivery is %s, want PENDING", name, status)
		}
	}

	if _, err := f.db.RedeliverWebhook(ctx, f.owner, interrupted); err != nil {
		t.Fatal(err)
	}
	if n, err := f.db.FailStrandedWebhookDeliveries(ctx); err != nil || n != 0 {
		t.Errorf("FailStrandedWebhookDeliveries after the redelivery: %d, %v; want 0", n, err)
	}
	if status, _, _ := f.deliveryState(t, interrupted); status != store.WebhookPending {
		t.Errorf("the redelivered delivery is %s, want PENDING", status)
	}
}

// A redelivery while the delivery's job waits, for a retry or for its run
// after the last attempt (the delivery still PENDING: that attempt's
// instance died, or its record failed), moved that job to now: it made only
// the attempts left of its runs (the run after the last attempt makes none,
// it only ends the delivery FAILED). It cancels that job and inserts one
// with every attempt instead; the delivery's attempts count on.
func TestRedeliverReplacesAWaitingJob(t *testing.T) {
	t.Parallel()
	runs := store.WebhookMaxAttempts + 1
	for name, attempt := range map[string]int{"a retry": 4, "the run after the last attempt": store.WebhookMaxAttempts} {
		t.Run(name, func(t *testing.T) {
			f := newHookFixture(t)
			ctx := t.Context()
			_, id := f.pingDelivery(t)
			if attempt == store.WebhookMaxAttempts {
				f.lastAttemptClaimed(t, id, time.Millisecond)
			} else if _, err := f.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET attempts = $2, last_attempt_at = now(),
				last_status_code = 500, last_error = 'HTTP 500', next_attempt_at = now() + interval '1 minute' WHERE id = $1`,
				id, attempt); err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'retryable', attempt = $2,
				scheduled_at = now() + interval '1 minute' WHERE args->>'delivery_id' = $1`, id, attempt); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			d, err := f.db.RedeliverWebhook(ctx, f.owner, id)
			if err != nil || d.Status != store.WebhookPending || d.Attempts != attempt {
				t.Fatalf("redeliver: %+v %v; want PENDING, %d attempts", d, err, attempt)
			}
			if got, want := f.jobsOf(t, id), fmt.Sprintf("cancelled %d/%d,available 0/%d", attempt, runs, runs); got != want {
				t.Errorf("the delivery's jobs after the redelivery: %s, want %s", got, want)
			}
			// Again, before the new job runs: it is moved to now, not replaced.
			if _, err := f.db.RedeliverWebhook(ctx, f.owner, id); err != nil {
				t.Fatal(err)
			}
			if got, want := f.jobsOf(t, id), fmt.Sprintf("cancelled %d/%d,available 0/%d", attempt, runs, runs); got != want {
				t.Errorf("the delivery's jobs after a second redelivery: %s, want %s", got, want)
			}
		})
	}
}
