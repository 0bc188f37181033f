package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// Defaults of WebhookDispatcher.
const (
	// DefaultDispatchBatch is the most events one round reads.
	DefaultDispatchBatch = 1000
	// DefaultDispatchIdle is how often an idle dispatcher looks for events
	// committed by other instances (its own instance wakes it at once).
	DefaultDispatchIdle = 100 * time.Millisecond
	// DefaultDispatchGap is the least time between two rounds that found
	// events (unless the first was full): under a write load, one round
	// takes the events of many commits instead of one transaction each.
	DefaultDispatchGap = 50 * time.Millisecond
	// DefaultDispatchQuiet is the least time between two rounds while no
	// webhook endpoint exists: the cursor then only follows the spine, and
	// following it at each commit took 3-4.5% of the server's CPU under
	// createTask (docs/decisions/2026-12-02-wakeups.md). An endpoint's first
	// deliveries come at most this much later.
	DefaultDispatchQuiet = time.Second
)

// ErrDispatchCursorMissing is returned by WebhookDispatcher.Round and
// WebhookDispatchBacklog when the dispatcher's cursor, row 1 of
// webhook_dispatch_cursor (made by migration 0011), is gone: the server's
// database role may delete it. No delivery is made until an operator
// restores it (docs/operations.md); the dispatcher does not make it again, as
// a cursor anywhere but after the newest dispatched event would enqueue
// events a second time or skip some.
var ErrDispatchCursorMissing = errs.Errorf(errs.CodeInternal,
	"the webhook dispatcher's cursor (row id = 1 of webhook_dispatch_cursor) is missing: no delivery is made until it is restored (docs/operations.md)")

// WebhookPayloadVersion is the version of the JSON envelope of deliveries.
const WebhookPayloadVersion = 1

// WebhookPayload is the body of a delivery: version 1 of the envelope, in
// the shape Standard Webhooks recommends (type, timestamp, data).
type WebhookPayload struct {
	Version int `json:"version"`
	// Type is the event's action ("task.created").
	Type string `json:"type"`
	// Timestamp is the event's occurredAt.
	Timestamp time.Time        `json:"timestamp"`
	Data      WebhookEventData `json:"data"`
}

// WebhookEventData is the event a delivery carries, as the audit log has it.
type WebhookEventData struct {
	EventID     string         `json:"eventId"`
	WorkspaceID *string        `json:"workspaceId"`
	Action      string         `json:"action"`
	EntityType  string         `json:"entityType"`
	EntityID    string         `json:"entityId"`
	ActorID     *string        `json:"actorId"`
	OccurredAt  time.Time      `json:"occurredAt"`
	RequestID   *string        `json:"requestId"`
	TraceID     *string        `json:"traceId"`
	Metadata    map[string]any `json:"metadata"`
}

// webhookPayload returns the body of the deliveries of an event, with the
// endpoint URLs of a webhook.* event redacted (redactWebhookURLs).
func webhookPayload(r audit.Record) ([]byte, error) {
	return json.Marshal(WebhookPayload{Version: WebhookPayloadVersion, Type: r.Action, Timestamp: r.OccurredAt.UTC(),
		Data: WebhookEventData{EventID: r.ID, WorkspaceID: r.WorkspaceID, Action: r.Action, EntityType: r.EntityType,
			EntityID: r.EntityID, ActorID: r.ActorID, OccurredAt: r.OccurredAt.UTC(), RequestID: r.RequestID,
			TraceID: r.TraceID, Metadata: redact(r.Action, r.Metadata)}})
}

// redact is redactWebhookURLs without its report.
func redact(action string, metadata map[string]any) map[string]any {
	m, _ := redactWebhookURLs(action, metadata)
	return m
}

// redactWebhookBody returns a delivery's body with the URLs of its event's
// metadata redacted (redactWebhookURLs) and true, or body itself and false
// when there is nothing to redact (then not decoded again: byte for byte).
// A body whose metadata is redacted is encoded again, its keys sorted (as
// migration 0016 did, in jsonb's order).
func redactWebhookBody(action string, body []byte) ([]byte, bool) {
	if !strings.HasPrefix(action, "webhook.") {
		return body, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var env map[string]any
	if dec.Decode(&env) != nil {
		return body, false
	}
	data, _ := env["data"].(map[string]any)
	meta, _ := data["metadata"].(map[string]any)
	redacted, changed := redactWebhookURLs(action, meta)
	if !changed {
		return body, false
	}
	data["metadata"] = redacted
	out, err := json.Marshal(env)
	if err != nil {
		return body, false
	}
	return out, true
}

// redactWebhookURLs returns the metadata of an event of action with its
// endpoint URLs as the log records them since 2026-12-04 (audit.OptionURL):
// a webhook.* event recorded before then (by a server of before, also one
// still running during a rolling upgrade) has the whole URL in url, or in
// changes.url's from and to, which its deliveries would send to the
// workspace's other endpoints. Those become audit.RedactURL of the URL, with
// audit.URLSha256 of it beside them (urlSha256), as migration 0016 made
// them in the bodies stored before it. Metadata that has urlSha256 already
// (recorded redacted), and that of other events, is returned as it is, so
// its body is what it always was byte for byte; metadata is never changed
// (a changed copy is returned, and true).
func redactWebhookURLs(action string, metadata map[string]any) (map[string]any, bool) {
	if !strings.HasPrefix(action, "webhook.") {
		return metadata, false
	}
	const sha = "url" + audit.URLSha256Suffix
	if u, ok := metadata["url"].(string); ok {
		if _, done := metadata[sha]; done {
			return metadata, false
		}
		m := maps.Clone(metadata)
		m["url"], m[sha] = audit.RedactedURL(u)
		return m, true
	}
	changes, ok := metadata["changes"].(map[string]any)
	if !ok {
		return metadata, false
	}
	diff, ok := changes["url"].(map[string]any)
	if _, done := changes[sha]; !ok || done {
		return metadata, false
	}
	redacted, sums := map[string]any{}, map[string]any{}
	for _, end := range []string{"from", "to"} {
		redacted[end], sums[end] = audit.RedactedURL(diff[end])
	}
	c := maps.Clone(changes)
	c["url"], c[sha] = redacted, sums
	m := maps.Clone(metadata)
	m["changes"] = c
	return m, true
}

// WebhookDispatcher turns committed audit events into webhook deliveries, in
// spine order, shortly after they commit. Every instance runs one (Run); the
// dispatching transaction locks the one cursor row with SKIP LOCKED, so one
// dispatcher advances at a time and the others skip the round, and no lock
// outlives a transaction (PgBouncer in transaction mode stays possible).
//
// Each event is enqueued exactly once: a round reads the committed events
// past the cursor (readSpine: none skipped, none twice), inserts their
// deliveries and River jobs and moves the cursor past them, all in one
// transaction: either all of it commits or none of it, and the next round
// starts where the last committed one ended. A dispatcher killed mid-round
// leaves nothing (its transaction rolls back with its connection).
// docs/decisions/2026-12-01-webhooks.md says more.
type WebhookDispatcher struct {
	DB *DB
	// Batch is the most events a round reads (zero: DefaultDispatchBatch).
	Batch int
	// Idle is the poll interval when no wake-up comes (zero: DefaultDispatchIdle).
	Idle time.Duration
	// Gap is the least time between two rounds that found events (zero:
	// DefaultDispatchGap).
	Gap time.Duration
	// Quiet is the least time between two rounds while there is no endpoint
	// (zero: DefaultDispatchQuiet).
	Quiet time.Duration
}

// DispatchRound is what one round of a dispatcher did.
type DispatchRound struct {
	// Busy reports that another dispatcher held the cursor: nothing was done.
	Busy bool
	// Events is the number of events read, Deliveries the deliveries made.
	Events, Deliveries int
	// Full reports that the round read a whole batch: more may be waiting.
	Full bool
	// Cursor is the cursor after the round; zero when the round only looked.
	Cursor SpineCursor
	// NoEndpoint reports that the round moved the cursor with no endpoint
	// to deliver to (none exists).
	NoEndpoint bool
}

func (d *WebhookDispatcher) batch() int {
	if d.Batch > 0 {
		return min(d.Batch, MaxSpineRead)
	}
	return DefaultDispatchBatch
}

func (d *WebhookDispatcher) idle() time.Duration {
	if d.Idle > 0 {
		return d.Idle
	}
	return DefaultDispatchIdle
}

func (d *WebhookDispatcher) gap() time.Duration {
	if d.Gap > 0 {
		return d.Gap
	}
	return DefaultDispatchGap
}

func (d *WebhookDispatcher) quiet() time.Duration {
	if d.Quiet > 0 {
		return d.Quiet
	}
	return DefaultDispatchQuiet
}

// Run dispatches until ctx ends: a round at once after a full one, else
// after a wake-up from this instance's units of work or after Idle, not
// before Gap after a round that found events, and not before Quiet after one
// that found no endpoint. Errors are logged and retried after a backoff that
// grows to 30 s.
func (d *WebhookDispatcher) Run(ctx context.Context) {
	RunSpineConsumer(ctx, d.DB, "webhook dispatcher", d.DB.dispatchWake, d.idle(), d.gap(), func(ctx context.Context) (bool, bool, error) {
		r, err := d.Round(ctx)
		if err == nil && r.NoEndpoint {
			// The wake-ups of the commits meanwhile wait, one for all.
			select {
			case <-ctx.Done():
			case <-time.After(d.quiet()):
			}
		}
		return r.Events > 0, r.Full, err
	})
}

// RunSpineConsumer runs round until ctx ends: at once again after a full
// round; after one that found events (and was not full), not before gap, so
// that under a write load a round takes the events of many commits instead
// of a transaction for each; then after a wake-up on wake or after idle. An
// error is logged (under name) and waits out a backoff that grows to 30 s.
// The sealer, the webhook dispatcher and the live tailer (package live) run
// on it.
func RunSpineConsumer(ctx context.Context, db *DB, name string, wake <-chan struct{}, idle, gap time.Duration,
	round func(context.Context) (found, full bool, err error)) {
	timer := time.NewTimer(idle)
	defer timer.Stop()
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		found, full, err := round(ctx)
		wait, w := idle, wake
		switch {
		case err != nil && ctx.Err() == nil:
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			wait, w = backoff, nil // an error waits out its backoff
			db.log.ErrorContext(ctx, name, "err", err, "retry_in", backoff.String())
		case err == nil:
			backoff = 0
			if full {
				continue
			}
			if found && gap > 0 {
				timer.Reset(gap)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w:
		case <-timer.C:
		}
	}
}

// dispatchPendingSQL tells whether the dispatcher's cursor exists and
// whether committed events wait past it, without a lock or a transaction id.
var dispatchPendingSQL = spineLookSQLFor("webhook_dispatch_cursor")

// dispatchEndpoint is what the dispatcher knows of an endpoint.
type dispatchEndpoint struct {
	id, workspaceID string
	actions         []string
	enabled         bool
	createdTx       uint64
}

// wants reports whether the endpoint gets a delivery of ev: an event of its
// workspace after its creating transaction (in spine order), whose action it subscribes to
// while it is enabled; or a ping of it, always.
func (e *dispatchEndpoint) wants(ev SpineEvent) bool {
	r := ev.Record
	if r.WorkspaceID == nil || *r.WorkspaceID != e.workspaceID || ev.Cursor.TxID <= e.createdTx {
		return false
	}
	if r.Action == "webhook.pinged" {
		return r.EntityID == e.id
	}
	return e.enabled && matchAction(e.actions, r.Action)
}

// Round runs one dispatching transaction: it locks the cursor (or returns
// Busy when another dispatcher holds it), reads up to Batch committed events
// past it of the workspaces that have endpoints, inserts a delivery and its
// River job for every endpoint that wants each, moves the cursor and commits.
// When no event waits it only looks (one read, no transaction). A round that
// fails or is cut off changes nothing; the next one starts from the same
// cursor. Without a cursor (row 1 of webhook_dispatch_cursor deleted) it
// returns ErrDispatchCursorMissing (wrapped), at every round, and makes no
// delivery.
func (d *WebhookDispatcher) Round(ctx context.Context) (DispatchRound, error) {
	var out DispatchRound
	pending, err := lookSpineCursor(ctx, d.DB, dispatchPendingSQL, ErrDispatchCursorMissing)
	if err != nil {
		return out, fmt.Errorf("webhook dispatch: %w", err)
	}
	if !pending {
		return out, nil
	}
	err = pgx.BeginFunc(ctx, d.DB.Pool, func(tx pgx.Tx) error {
		cur, busy, err := lockSpineCursor(ctx, tx, "webhook_dispatch_cursor", ErrDispatchCursorMissing)
		if busy || err != nil {
			out.Busy = busy
			return err
		}
		endpoints, chains, err := dispatchEndpoints(ctx, tx)
		if err != nil {
			return err
		}
		// Only the chains of workspaces with endpoints; with none, no chain
		// (an empty, non-nil list), and the cursor moves past everything.
		read, err := readSpine(ctx, tx, cur, SpineFilter{ChainKeys: chains}, d.batch())
		if err != nil {
			return err
		}
		w := deliveryWrites{}
		for _, ev := range read.Events {
			var payload []byte
			for _, e := range endpoints[*ev.Record.WorkspaceID] {
				if !e.wants(ev) {
					continue
				}
				if payload == nil {
					if payload, err = webhookPayload(ev.Record); err != nil {
						return fmt.Errorf("webhook payload of event %s: %w", ev.Record.ID, err)
					}
				}
				w.add(e, ev.Record, payload)
			}
		}
		b := &pgx.Batch{}
		if len(w.id) > 0 {
			b.Queue(`INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, action, payload, next_attempt_at)
				SELECT i, e, w, ev, a, p, now() FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::bytea[])
					AS u(i, e, w, ev, a, p)`, w.id, w.endpoint, w.workspace, w.event, w.action, w.payload)
		}
		if read.Next != cur {
			b.Queue(`UPDATE webhook_dispatch_cursor SET tx_id = $1, seq = $2, moved_at = now() WHERE id = 1`, read.Next.TxID, read.Next.Seq)
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("write deliveries: %w", err)
			}
		}
		if len(w.id) > 0 {
			if _, err := d.DB.insertJobs(ctx, tx, enqueueDeliveries(w.id)); err != nil {
				return err
			}
		}
		out.Events, out.Deliveries, out.Full, out.Cursor = len(read.Events), len(w.id), len(read.Events) == d.batch(), read.Next
		out.NoEndpoint = len(chains) == 0 && read.Next != cur
		return nil
	})
	if err != nil {
		return DispatchRound{}, fmt.Errorf("webhook dispatch: %w", err)
	}
	return out, nil
}

// dispatchEndpoints returns every endpoint by workspace, and the workspaces'
// chain keys (non-nil, empty when there is no endpoint).
func dispatchEndpoints(ctx context.Context, tx pgx.Tx) (map[string][]*dispatchEndpoint, []string, error) {
	rows, err := tx.Query(ctx, `SELECT id, workspace_id, actions, enabled, created_tx FROM webhook_endpoints`)
	if err != nil {
		return nil, nil, fmt.Errorf("read webhook endpoints: %w", err)
	}
	defer rows.Close()
	out := map[string][]*dispatchEndpoint{}
	chains := []string{}
	for rows.Next() {
		var e dispatchEndpoint
		if err := rows.Scan(&e.id, &e.workspaceID, &e.actions, &e.enabled, &e.createdTx); err != nil {
			return nil, nil, fmt.Errorf("read webhook endpoints: %w", err)
		}
		if out[e.workspaceID] == nil {
			chains = append(chains, e.workspaceID)
		}
		out[e.workspaceID] = append(out[e.workspaceID], &e)
	}
	return out, chains, rows.Err()
}

// deliveryWrites are the deliveries of a round, column by column.
type deliveryWrites struct {
	id, endpoint, workspace, event, action []string
	payload                                [][]byte
}

// add adds the delivery of event r to endpoint e.
func (w *deliveryWrites) add(e *dispatchEndpoint, r audit.Record, payload []byte) {
	w.id = append(w.id, uuid.Must(uuid.NewV7()).String())
	w.endpoint = append(w.endpoint, e.id)
	w.workspace = append(w.workspace, e.workspaceID)
	w.event = append(w.event, r.ID)
	w.action = append(w.action, r.Action)
	w.payload = append(w.payload, payload)
}

// WebhookDispatchBacklog returns the events the dispatcher has not reached
// yet (committed, or in transactions still open): its lag, for monitoring
// and for tests that wait for it. It returns ErrDispatchCursorMissing
// (wrapped) when the dispatcher has no cursor: then it reaches none of them
// (a count of 0 would say all is well).
func (db *DB) WebhookDispatchBacklog(ctx context.Context) (int, error) {
	var n int
	var cursor bool
	err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_dispatch_cursor WHERE id = 1), (SELECT count(*)
		FROM webhook_dispatch_cursor c CROSS JOIN LATERAL
		(SELECT 1 FROM audit_events e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq)) x WHERE c.id = 1)`).Scan(&cursor, &n)
	if err == nil && !cursor {
		err = ErrDispatchCursorMissing
	}
	if err != nil {
		return 0, fmt.Errorf("webhook dispatch backlog: %w", err)
	}
	return n, nil
}
