package webhook_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"taskflow/egress"
	"taskflow/examples/webhookreceiver/receiver"
	"taskflow/store"
	"taskflow/store/storetest"
	"taskflow/webhook"
)

// env is a workspace with an OWNER and a project, on a database whose
// egress policy allows the tests' loopback receivers.
type env struct {
	db        *store.DB
	owner     *store.User
	workspace string
	project   string
}

func setup(t *testing.T) *env {
	t.Helper()
	db := storetest.DB(t)
	db.Egress = egress.Policy{AllowHTTP: true, AllowPrivate: true}
	ctx := t.Context()
	e := &env{db: db, owner: &store.User{}}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ('o@example.com', 'O', 'x')
		RETURNING id, email, name`).Scan(&e.owner.ID, &e.owner.Email, &e.owner.Name); err != nil {
		t.Fatal(err)
	}
	ws, err := db.CreateWorkspace(ctx, e.owner, "W")
	if err != nil {
		t.Fatal(err)
	}
	e.workspace = ws.ID
	p, err := db.CreateProject(ctx, e.owner, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.project = p.ID
	return e
}

// start runs the webhook service on the env's database until the test ends.
func (e *env) start(t *testing.T, o webhook.Options) {
	t.Helper()
	o.DB = e.db
	o.Log = slog.New(slog.DiscardHandler)
	if o.RetryBase == 0 {
		o.RetryBase = 20 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	s, err := webhook.Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// endpoint registers url for actions and returns the endpoint and its secret.
func (e *env) endpoint(t *testing.T, url string, actions ...string) *store.WebhookEndpointSecret {
	t.Helper()
	ep, err := e.db.CreateWebhookEndpoint(t.Context(), e.owner, store.WebhookEndpointInput{
		WorkspaceID: e.workspace, URL: url, Actions: actions})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// sink is a loopback receiver built on the example receiver: it applies
// each webhook-id once, counts the requests of each and the most in flight
// at once, and answers as fault says for the n-th request of an id.
type sink struct {
	t   *testing.T
	srv *httptest.Server
	rec *receiver.Receiver
	// fault, if set, returns the status to answer the n-th request (1 for the
	// first) of a webhook-id with, and how long to wait first; 0 lets the
	// receiver answer.
	fault func(id string, n int) (status int, wait time.Duration)

	mu          sync.Mutex
	requests    map[string]int
	applied     map[string]receiver.Event
	inFlight    map[string]int
	maxInFlight int
	refused     int
}

func newSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{t: t, requests: map[string]int{}, applied: map[string]receiver.Event{}, inFlight: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		s.mu.Lock()
		s.requests[id]++
		n := s.requests[id]
		s.inFlight[id]++
		s.maxInFlight = max(s.maxInFlight, s.inFlight[id])
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight[id]--
			s.mu.Unlock()
		}()
		if s.fault != nil {
			if status, wait := s.fault(id, n); status != 0 {
				// Read the body: the server then notices a sender that gave up.
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-time.After(wait):
				case <-r.Context().Done():
					return
				}
				w.WriteHeader(status)
				return
			}
		}
		rw := &statusWriter{ResponseWriter: w}
		s.rec.ServeHTTP(rw, r)
		if rw.status == http.StatusUnauthorized {
			s.mu.Lock()
			s.refused++
			s.mu.Unlock()
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// verifyWith makes the sink verify with secret (before any delivery).
func (s *sink) verifyWith(secret string) {
	rec, err := receiver.New(secret, func(id string, e receiver.Event) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, dup := s.applied[id]; dup {
			s.t.Errorf("webhook-id %s applied twice", id)
		}
		s.applied[id] = e
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.rec = rec
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// appliedCount returns how many webhook-ids were applied.
func (s *sink) appliedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applied)
}

// waitFor polls cond until it holds, failing the test after a minute (a
// wait for asynchronous delivery, not a timed assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deliveries returns the endpoint's deliveries by status.
func (e *env) deliveries(t *testing.T, endpoint string) map[store.WebhookDeliveryStatus]int {
	t.Helper()
	rows, err := e.db.Pool.Query(t.Context(), `SELECT status, count(*) FROM webhook_deliveries WHERE endpoint_id = $1 GROUP BY 1`, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[store.WebhookDeliveryStatus]int{}
	for rows.Next() {
		var s store.WebhookDeliveryStatus
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

var errRollback = errors.New("roll back")

// Every committed task change arrives and is applied exactly once, across
// receiver 500s and timeouts, while rolled-back ones never arrive; no
// delivery is ever in flight twice at once, every body verifies, and each
// delivery is SUCCEEDED with its attempts counted.
func TestEveryCommittedEventAppliedOnceAcrossFaults(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := newSink(t)
	ep := e.endpoint(t, s.srv.URL+"/hook", "task.*")
	s.verifyWith(ep.Secret)
	s.fault = func(id string, n int) (int, time.Duration) {
		switch {
		case n == 1 && id[len(id)-1]%3 == 0:
			return http.StatusInternalServerError, 0
		case n == 1 && id[len(id)-1]%3 == 1:
			return http.StatusOK, 3 * time.Second // past the 1 s timeout: a timeout, then a retry
		case n == 2 && id[len(id)-1]%2 == 0:
			return http.StatusServiceUnavailable, 0
		}
		return 0, 0
	}
	e.start(t, webhook.Options{Timeout: time.Second})

	ctx := t.Context()
	const tasks = 40
	want := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Go(func() {
			err := e.db.UnitOfWork(ctx, func(ctx context.Context) error {
				task, err := e.db.CreateTask(ctx, e.owner, store.NewTask{ProjectID: e.project, Title: fmt.Sprintf("t%d", i)})
				if err != nil {
					return err
				}
				if i%4 == 3 {
					return errRollback
				}
				mu.Lock()
				want[task.ID] = true
				mu.Unlock()
				return nil
			})
			if err != nil && !errors.Is(err, errRollback) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	waitFor(t, "every committed task", func() bool { return s.appliedCount() >= len(want) })
	// Let retries still scheduled run out: nothing more may be applied.
	waitFor(t, "no delivery pending", func() bool { return e.deliveries(t, ep.Endpoint.ID)[store.WebhookPending] == 0 })

	s.mu.Lock()
	defer s.mu.Unlock()
	got := map[string]bool{}
	for _, ev := range s.applied {
		if ev.Type != "task.created" || ev.Data.WorkspaceID != e.workspace {
			t.Errorf("applied %s in %s", ev.Type, ev.Data.WorkspaceID)
		}
		got[ev.Data.EntityID] = true
	}
	for id := range want {
		if !got[id] {
			t.Errorf("task %s committed, never applied", id)
		}
	}
	for id := range got {
		if !want[id] {
			t.Errorf("task %s applied, never committed", id)
		}
	}
	if s.maxInFlight != 1 {
		t.Errorf("a delivery was in flight %d times at once", s.maxInFlight)
	}
	if s.refused != 0 {
		t.Errorf("%d deliveries did not verify", s.refused)
	}
	retried := 0
	for _, n := range s.requests {
		if n > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Error("no delivery was retried: the faults did not happen")
	}
	var attempts, requests int
	if err := e.db.Pool.QueryRow(ctx, `SELECT coalesce(sum(attempts), 0) FROM webhook_deliveries WHERE status = 'SUCCEEDED'`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.requests {
		requests += n
	}
	if d := e.deliveries(t, ep.Endpoint.ID); d[store.WebhookSucceeded] != len(want) || attempts != requests {
		t.Errorf("deliveries %v with %d attempts; want %d SUCCEEDED, %d attempts (the requests)", d, attempts, len(want), requests)
	}
}

// A delivery whose every attempt fails ends FAILED after WebhookMaxAttempts
// attempts, with the last status and error; an endpoint failing longer than
// DisableAfter is disabled, says why, and webhook.disabled is recorded.
func TestFailingDeliveryGivesUpAndDisablesTheEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := hits.LoadOrStore(r.Header.Get("webhook-id"), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	ep := e.endpoint(t, srv.URL, "project.*")
	e.start(t, webhook.Options{RetryBase: 100 * time.Microsecond, DisableAfter: time.Hour})
	ctx := t.Context()
	if _, err := e.db.CreateProject(ctx, e.owner, e.workspace, "Q", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery to fail", func() bool { return e.deliveries(t, ep.Endpoint.ID)[store.WebhookFailed] == 1 })
	var attempts, code int
	var id, lastErr string
	if err := e.db.Pool.QueryRow(ctx, `SELECT id, attempts, last_status_code, last_error FROM webhook_deliveries`).Scan(&id, &attempts, &code, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != store.WebhookMaxAttempts || code != http.StatusBadGateway || lastErr != "HTTP 502" {
		t.Errorf("FAILED after %d attempts, last %d %q; want %d, 502", attempts, code, lastErr, store.WebhookMaxAttempts)
	}
	// The last attempt cancels the job: it has a run more (for a last attempt
	// that does not end the delivery), which a failed one does not take.
	if state := e.jobState(t, id); state != "cancelled" {
		t.Errorf("the job of the FAILED delivery is %s, want cancelled", state)
	}
	if n, _ := hits.Load(id); n == nil || n.(*atomic.Int64).Load() != store.WebhookMaxAttempts {
		t.Errorf("requests of the FAILED delivery: %v, want %d", n, store.WebhookMaxAttempts)
	}
	got, err := e.db.WebhookEndpoint(ctx, e.owner, ep.Endpoint.ID)
	if err != nil || !got.Enabled || got.FailingSince == nil {
		t.Fatalf("after an hour's failures: %+v %v; want enabled and failing", got, err)
	}

	// Failing for longer than DisableAfter: the next failure disables it.
	if _, err := e.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.CreateProject(ctx, e.owner, e.workspace, "R", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the endpoint to be disabled", func() bool {
		got, err = e.db.WebhookEndpoint(ctx, e.owner, ep.Endpoint.ID)
		return err == nil && !got.Enabled
	})
	if got.DisabledReason == nil || !strings.Contains(*got.DisabledReason, "HTTP 502") {
		t.Errorf("disabled for %v, want the failures named", got.DisabledReason)
	}
	var events int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = 'webhook.disabled' AND actor_id IS NULL
		AND entity_id = $1`, ep.Endpoint.ID).Scan(&events); err != nil || events != 1 {
		t.Errorf("%d webhook.disabled events (%v), want 1", events, err)
	}
}

// Each attempt carries webhook-id, webhook-timestamp and a v1 signature that
// the example receiver's code verifies; a tampered body, an old timestamp or
// another secret do not verify. After a rotation both secrets verify.
func TestSignatures(t *testing.T) {
	t.Parallel()
	e := setup(t)
	type got struct {
		h    http.Header
		body []byte
	}
	reqs := make(chan got, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{r.Header.Clone(), b}
	}))
	t.Cleanup(srv.Close)
	ep := e.endpoint(t, srv.URL)
	e.start(t, webhook.Options{})
	ctx := t.Context()
	if err := e.db.PingWebhookEndpoint(ctx, e.owner, ep.Endpoint.ID); err != nil {
		t.Fatal(err)
	}
	first := <-reqs
	rec, err := receiver.New(ep.Secret, func(string, receiver.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Verify(first.body, first.h); err != nil {
		t.Fatalf("a delivery does not verify: %v (%v)", err, first.h)
	}
	if !strings.Contains(string(first.body), `"type":"webhook.pinged"`) || first.h.Get("Content-Type") != "application/json" {
		t.Errorf("ping: %s %v", first.body, first.h)
	}
	tampered := []byte(strings.Replace(string(first.body), "pinged", "pinged ", 1))
	if err := rec.Verify(tampered, first.h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("a tampered body: %v, want no matching signature", err)
	}
	old := first.h.Clone()
	at := time.Now().Add(-10 * time.Minute)
	sig, err := webhook.Sign([][]byte{secretKey(t, ep.Secret)}, old.Get("webhook-id"), at, first.body)
	if err != nil {
		t.Fatal(err)
	}
	old.Set("webhook-timestamp", fmt.Sprint(at.Unix()))
	old.Set("webhook-signature", sig)
	if err := rec.Verify(first.body, old); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Errorf("a delivery signed 10 minutes ago: %v, want too old", err)
	}

	rotated, err := e.db.RotateWebhookSecret(ctx, e.owner, ep.Endpoint.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == ep.Secret || rotated.Endpoint.PreviousSecretUntil == nil {
		t.Fatalf("rotation: %+v", rotated)
	}
	if err := e.db.PingWebhookEndpoint(ctx, e.owner, ep.Endpoint.ID); err != nil {
		t.Fatal(err)
	}
	second := <-reqs
	if n := len(strings.Fields(second.h.Get("webhook-signature"))); n != 2 {
		t.Errorf("%d signatures after a rotation, want 2", n)
	}
	newRec, err := receiver.New(rotated.Secret, func(string, receiver.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*receiver.Receiver{"old": rec, "new": newRec} {
		if err := r.Verify(second.body, second.h); err != nil {
			t.Errorf("the %s secret does not verify after the rotation: %v", name, err)
		}
	}
	if err := newRec.Verify(first.body, first.h); err == nil {
		t.Error("the new secret verifies a delivery signed before it existed")
	}
}

// secretKey decodes a whsec_ secret.
func secretKey(t *testing.T, secret string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(b) != 32 {
		t.Fatalf("secret %q: %v", secret, err)
	}
	return b
}

// pingDelivery pings the endpoint and returns the PENDING delivery the
// dispatcher made of it, its River job waiting (no service runs yet).
func (e *env) pingDelivery(t *testing.T, endpoint string) string {
	t.Helper()
	ctx := t.Context()
	if err := e.db.PingWebhookEndpoint(ctx, e.owner, endpoint); err != nil {
		t.Fatal(err)
	}
	storetest.DispatchAll(t, e.db)
	var id string
	if err := e.db.Pool.QueryRow(ctx, `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// lastAttemptClaimed makes the delivery's ten first attempts failed ones and
// claims its eleventh, the last, for a millisecond: the claim of an instance
// that dies during the attempt (its hold runs out; nothing is recorded).
func (e *env) lastAttemptClaimed(t *testing.T, id string) {
	t.Helper()
	ctx := t.Context()
	if _, err := e.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET attempts = $2 - 1, last_attempt_at = now() - interval '6 hours',
		last_status_code = 500, last_latency_ms = 12, last_error = 'HTTP 500' WHERE id = $1`, id, store.WebhookMaxAttempts); err != nil {
		t.Fatal(err)
	}
	a, err := e.db.ClaimWebhookAttempt(ctx, id, time.Millisecond)
	if err != nil || a.Attempt != store.WebhookMaxAttempts {
		t.Fatalf("claim of the last attempt: %+v %v", a, err)
	}
	time.Sleep(5 * time.Millisecond) // the hold runs out
}

// claimedLastAttemptOfAPing returns a sink and the id of a ping delivery to
// an endpoint of it whose last attempt was claimed and never recorded (its
// hold ran out), as an instance that died during it leaves it.
func (e *env) claimedLastAttemptOfAPing(t *testing.T) (*sink, string) {
	t.Helper()
	s := newSink(t)
	ep := e.endpoint(t, s.srv.URL+"/hook")
	s.verifyWith(ep.Secret)
	id := e.pingDelivery(t, ep.Endpoint.ID)
	e.lastAttemptClaimed(t, id)
	return s, id
}

// endedInterrupted waits for the delivery to end and checks it ended FAILED
// after WebhookMaxAttempts attempts, its last one interrupted (no status), and
// that s received no request after it.
func (e *env) endedInterrupted(t *testing.T, id string, s *sink) {
	t.Helper()
	status, attempts, code, lastErr := e.ended(t, id)
	if status != store.WebhookFailed || attempts != store.WebhookMaxAttempts || code != 0 || !strings.Contains(lastErr, "interrupted") {
		t.Errorf("delivery %s after %d attempts, last %d %q; want FAILED after %d, no status, the last attempt interrupted",
			status, attempts, code, lastErr, store.WebhookMaxAttempts)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) != 0 {
		t.Errorf("%d requests after the last attempt, want none", len(s.requests))
	}
}

// ended waits for the delivery to leave PENDING and returns its status,
// attempts, last status code (0 for none) and last error.
func (e *env) ended(t *testing.T, id string) (status store.WebhookDeliveryStatus, attempts, code int, lastErr string) {
	t.Helper()
	waitFor(t, "the delivery to end", func() bool {
		if err := e.db.Pool.QueryRow(t.Context(), `SELECT status, attempts, coalesce(last_status_code, 0), coalesce(last_error, '')
			FROM webhook_deliveries WHERE id = $1`, id).Scan(&status, &attempts, &code, &lastErr); err != nil {
			t.Fatal(err)
		}
		return status != store.WebhookPending
	})
	return status, attempts, code, lastErr
}

// jobState returns the state of the delivery's River job once it is final
// (River's completer may write it a moment after the delivery ended).
func (e *env) jobState(t *testing.T, id string) string {
	t.Helper()
	var state string
	waitFor(t, "the job to end", func() bool {
		if err := e.db.Pool.QueryRow(t.Context(), `SELECT string_agg(state::text, ',') FROM river_job
			WHERE args->>'delivery_id' = $1`, id).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state != "running" && state != "available" && state != "retryable" && state != "scheduled"
	})
	return state
}

// The closing run's own statement failed for a reason of the moment (here a
// trigger refuses, as Postgres refuses a deadlock's victim, the update that
// ends the delivery FAILED twice: the last attempt's record, so that the job
// goes on to its closing run, then that run's). The closing run returned the
// error, and as its job had no run left River discarded it: the delivery
// stayed PENDING until the stranded-delivery sweep, up to 5 minutes later.
// Such a run is now snoozed, as an attempt's claim is: it runs again and
// ends the delivery.
func TestTransientGiveUpErrorRunsAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	const refusals = 2
	id, hits := e.pingRefused(t, "end_refusals", "NEW.status = 'FAILED'", refusals)
	if state := e.jobState(t, id); state != "completed" {
		t.Errorf("the job is %s, want completed (by its closing run)", state)
	}
	var status store.WebhookDeliveryStatus
	var attempts int
	var lastErr string
	if err := e.db.Pool.QueryRow(ctx, `SELECT status, attempts, coalesce(last_error, '') FROM webhook_deliveries WHERE id = $1`,
		id).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if n := hits.Load(); status != store.WebhookFailed || attempts != store.WebhookMaxAttempts || n != store.WebhookMaxAttempts {
		t.Errorf("delivery %s after %d attempts, %d requests (%q); want FAILED after %d",
			status, attempts, n, lastErr, store.WebhookMaxAttempts)
	}
	var calls int
	if err := e.db.Pool.QueryRow(ctx, `SELECT last_value FROM end_refusals`).Scan(&calls); err != nil || calls != refusals+1 {
		t.Errorf("updates ending the delivery: %d (%v), want %d refused, then one", calls, err, refusals)
	}
}

// pingRefused pings an endpoint whose receiver answers every delivery 502,
// with the first n updates of webhook_deliveries that match when (a
// trigger's WHEN condition) failing as Postgres fails a deadlock's victim,
// counted by the sequence seq (its last_value: the updates tried), and
// starts the dispatcher. It returns the delivery's id and how many requests
// the receiver had.
func (e *env) pingRefused(t *testing.T, seq, when string, n int) (string, *atomic.Int64) {
	t.Helper()
	hits := new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	ep := e.endpoint(t, srv.URL, "webhook.pinged")
	if _, err := e.db.Pool.Exec(t.Context(), fmt.Sprintf(`CREATE SEQUENCE %[1]s;
		CREATE FUNCTION %[1]s_refuse() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN IF nextval('%[1]s') <= %[2]d THEN
			RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected'; END IF; RETURN NEW; END$$;
		CREATE TRIGGER %[1]s_refuse BEFORE UPDATE ON webhook_deliveries FOR EACH ROW
		WHEN (%[3]s) EXECUTE FUNCTION %[1]s_refuse()`, seq, n, when)); err != nil {
		t.Fatal(err)
	}
	id := e.pingDelivery(t, ep.Endpoint.ID)
	e.start(t, webhook.Options{RetryBase: 100 * time.Microsecond})
	return id, hits
}

// An instance dies during a delivery's last attempt: River's rescuer finds
// its job still running and, as it had no run left, discarded it, so that
// the delivery stayed PENDING for ever with nothing to attempt it (nor to
// redeliver it: it did not show as FAILED). Its job now has a run after the
// last attempt, which sends nothing and ends the delivery FAILED, saying why.
func TestLastAttemptOfADeadInstanceEndsFailed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, id := e.claimedLastAttemptOfAPing(t)
	ctx := t.Context()
	// The job as the dead instance left it: running its last attempt, since
	// an hour ago (longer than RescueStuckJobsAfter).
	if _, err := e.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = $2, attempted_at = now() - interval '1 hour',
		attempted_by = '{dead-instance}' WHERE args->>'delivery_id' = $1`, id, store.WebhookMaxAttempts); err != nil {
		t.Fatal(err)
	}
	e.start(t, webhook.Options{})
	e.endedInterrupted(t, id, s)
	if state := e.jobState(t, id); state != "completed" {
		t.Errorf("the job is %s, want completed", state)
	}
}

// The database fails to record a delivery's last attempt (here a trigger
// refuses it): Work returned the error, River, with no run left, discarded
// the job, and the delivery stayed PENDING for ever. Now the job's run after
// the last attempt waits for that attempt's hold to end and ends the
// delivery FAILED; no twelfth request is sent.
func TestLastAttemptNotRecordedEndsFailed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	ep := e.endpoint(t, srv.URL, "project.*")
	ctx := t.Context()
	if _, err := e.db.Pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'the database fails'; END$$;
		CREATE TRIGGER refuse_last_record BEFORE UPDATE ON webhook_deliveries FOR EACH ROW
		WHEN (OLD.attempts >= %d AND NEW.last_attempt_at IS DISTINCT FROM OLD.last_attempt_at) EXECUTE FUNCTION refuse_record()`,
		store.WebhookMaxAttempts)); err != nil {
		t.Fatal(err)
	}
	e.start(t, webhook.Options{RetryBase: 100 * time.Microsecond, Timeout: time.Second})
	if _, err := e.db.CreateProject(ctx, e.owner, e.workspace, "Q", nil); err != nil {
		t.Fatal(err)
	}
	var id string
	waitFor(t, "the delivery", func() bool {
		return e.db.Pool.QueryRow(ctx, `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, ep.Endpoint.ID).Scan(&id) == nil
	})
	status, attempts, code, lastErr := e.ended(t, id)
	if status != store.WebhookFailed || attempts != store.WebhookMaxAttempts || code != 0 || !strings.Contains(lastErr, "interrupted") {
		t.Errorf("delivery %s after %d attempts, last %d %q; want FAILED after %d, no status, the last attempt interrupted",
			status, attempts, code, lastErr, store.WebhookMaxAttempts)
	}
	if n := hits.Load(); n != store.WebhookMaxAttempts {
		t.Errorf("%d requests, want %d", n, store.WebhookMaxAttempts)
	}
	if state := e.jobState(t, id); state != "completed" {
		t.Errorf("the job is %s, want completed", state)
	}
}

// A job inserted by an earlier version has as many runs as the delivery has
// attempts: its instance died during the last attempt and River discarded
// it. The delivery, PENDING with nothing to attempt it, ends FAILED when the
// service starts (and every SweepInterval).
func TestStrandedDeliveryEndsFailedAtStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, id := e.claimedLastAttemptOfAPing(t)
	ctx := t.Context()
	if _, err := e.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', attempt = $2, max_attempts = $2,
		attempted_at = now() - interval '1 hour', finalized_at = now() WHERE args->>'delivery_id' = $1`, id, store.WebhookMaxAttempts); err != nil {
		t.Fatal(err)
	}
	e.start(t, webhook.Options{})
	e.endedInterrupted(t, id, s)
}

// A delivery failing against a receiver that answers 500 is redelivered
// while its job waits for a retry (here its fifth attempt, its instance
// stopped during the fourth): the redelivery gets the whole schedule,
// WebhookMaxAttempts attempts, then ends FAILED again, with attempts
// counting on. It got only what was left of the job's runs (moved to now).
func TestRedeliveryWhileARetryWaitsGetsTheWholeSchedule(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const before = 4 // attempts before the redelivery
	var hits atomic.Int64
	fourth := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if hits.Add(1) == before {
			close(fourth)
			<-r.Context().Done() // until the instance stops
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	ep := e.endpoint(t, srv.URL, "webhook.pinged") // not webhook.redelivered
	ctx := t.Context()
	id := e.pingDelivery(t, ep.Endpoint.ID)

	// An instance makes three failed attempts and stops during the fourth:
	// the job waits for the fifth.
	first, err := webhook.Start(ctx, webhook.Options{DB: e.db, Log: slog.New(slog.DiscardHandler),
		RetryBase: 100 * time.Microsecond, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-fourth:
	case <-time.After(time.Minute):
		t.Fatal("no fourth attempt after a minute")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := first.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	var state string
	var runs, attempts int
	if err := e.db.Pool.QueryRow(ctx, `SELECT j.state::text, j.attempt, d.attempts FROM river_job j
		JOIN webhook_deliveries d ON j.args->>'delivery_id' = d.id::text WHERE d.id = $1`, id).Scan(&state, &runs, &attempts); err != nil {
		t.Fatal(err)
	}
	if (state != "retryable" && state != "available") || runs != before || attempts != before {
		t.Fatalf("before the redelivery: job %s after %d runs, %d attempts; want waiting after %d", state, runs, attempts, before)
	}

	if _, err := e.db.RedeliverWebhook(ctx, e.owner, id); err != nil {
		t.Fatal(err)
	}
	e.start(t, webhook.Options{RetryBase: 100 * time.Microsecond})
	status, attempts, code, _ := e.ended(t, id)
	if n := hits.Load() - before; status != store.WebhookFailed || n != store.WebhookMaxAttempts ||
		attempts != before+store.WebhookMaxAttempts || code != http.StatusInternalServerError {
		t.Errorf("after the redelivery: %s, %d requests, attempts %d, last %d; want FAILED, %d requests, attempts %d, 500",
			status, n, attempts, code, store.WebhookMaxAttempts, before+store.WebhookMaxAttempts)
	}
}

// A claim that fails for a reason of the moment (here a trigger refuses the
// claim of the fourth attempt twice, as Postgres refuses a deadlock's
// victim) used up a run of the delivery's job without an attempt, so that
// the delivery ended FAILED after 9 attempts. Such a run is now snoozed
// (River gives the run back): the delivery gets its 11 attempts.
func TestTransientClaimErrorUsesNoAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	const refusals = 2
	id, hits := e.pingRefused(t, "claim_refusals", "OLD.attempts = 3 AND NEW.attempts = 4", refusals)
	status, attempts, code, lastErr := e.ended(t, id)
	if n := hits.Load(); status != store.WebhookFailed || attempts != store.WebhookMaxAttempts || n != store.WebhookMaxAttempts ||
		code != http.StatusBadGateway || lastErr != "HTTP 502" {
		t.Errorf("delivery %s after %d attempts, %d requests, last %d %q; want FAILED after %d, HTTP 502",
			status, attempts, n, code, lastErr, store.WebhookMaxAttempts)
	}
	var calls int
	if err := e.db.Pool.QueryRow(ctx, `SELECT last_value FROM claim_refusals`).Scan(&calls); err != nil || calls != refusals+1 {
		t.Errorf("the fourth attempt's claims: %d (%v), want %d refused, then one", calls, err, refusals)
	}
	if state := e.jobState(t, id); state != "cancelled" {
		t.Errorf("the job is %s, want cancelled (after its last attempt)", state)
	}
}
