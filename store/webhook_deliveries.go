package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"taskflow/audit"
	"taskflow/errs"
)

// WebhookDeliveryStatus is where a delivery stands.
type WebhookDeliveryStatus string

// Delivery statuses.
const (
	// WebhookPending: an attempt is queued, in flight, or scheduled.
	WebhookPending WebhookDeliveryStatus = "PENDING"
	// WebhookSucceeded: an attempt got a 2xx answer.
	WebhookSucceeded WebhookDeliveryStatus = "SUCCEEDED"
	// WebhookFailed: every attempt failed, or the endpoint was disabled.
	WebhookFailed WebhookDeliveryStatus = "FAILED"
)

// IsValid reports whether s is a known status.
func (s WebhookDeliveryStatus) IsValid() bool {
	return enumValid(s, WebhookPending, WebhookSucceeded, WebhookFailed)
}

// UnmarshalGQL implements graphql.Unmarshaler.
func (s *WebhookDeliveryStatus) UnmarshalGQL(v any) error {
	return unmarshalEnum(s, v, "WebhookDeliveryStatus")
}

// MarshalGQL implements graphql.Marshaler.
func (s WebhookDeliveryStatus) MarshalGQL(w io.Writer) { io.WriteString(w, strconv.Quote(string(s))) }

// WebhookDelivery is one event sent (or to be sent) to one endpoint. Its id
// is the webhook-id header of every attempt.
type WebhookDelivery struct {
	ID          string                `json:"id" audit:"track"`
	EndpointID  string                `json:"endpointId" audit:"track"`
	WorkspaceID string                `json:"workspaceId" audit:"track"`
	EventID     string                `json:"eventId" audit:"track"`
	Action      string                `json:"action" audit:"track"`
	Payload     RawJSON               `json:"payload" audit:"ignore"`
	Status      WebhookDeliveryStatus `json:"status" audit:"track"`
	Attempts    int                   `json:"attempts" audit:"track"`
	// LastAttemptAt, LastStatusCode (nil when no HTTP answer came),
	// LastLatencyMs and LastError describe the latest attempt.
	LastAttemptAt  *time.Time `json:"lastAttemptAt" audit:"ignore"`
	LastStatusCode *int       `json:"lastStatusCode" audit:"ignore"`
	LastLatencyMs  *float64   `json:"lastLatencyMs" audit:"ignore"`
	LastError      *string    `json:"lastError" audit:"ignore"`
	// NextAttemptAt is when the next attempt is due (nil when none is).
	NextAttemptAt *time.Time `json:"nextAttemptAt" audit:"ignore"`
	CreatedAt     time.Time  `json:"createdAt" audit:"ignore"`
}

// webhookDeliveryColumns is the column list scanned by scanWebhookDelivery.
const webhookDeliveryColumns = `d.id, d.endpoint_id, d.workspace_id, d.event_id, d.action, d.payload, d.status, d.attempts,
	d.last_attempt_at, d.last_status_code, d.last_latency_ms, d.last_error, d.next_attempt_at, d.created_at`

// scanWebhookDelivery scans the columns of webhookDeliveryColumns, then extra.
func scanWebhookDelivery(row pgx.Row, extra ...any) (*WebhookDelivery, error) {
	var d WebhookDelivery
	var payload []byte
	dest := append([]any{&d.ID, &d.EndpointID, &d.WorkspaceID, &d.EventID, &d.Action, &payload, &d.Status, &d.Attempts,
		&d.LastAttemptAt, &d.LastStatusCode, &d.LastLatencyMs, &d.LastError, &d.NextAttemptAt, &d.CreatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	d.Payload = RawJSON(payload)
	return &d, nil
}

// WebhookDeliveryConnection is a page of deliveries.
type (
	WebhookDeliveryConnection = Connection[WebhookDelivery]
	// WebhookDeliveryEdge is a delivery with its cursor.
	WebhookDeliveryEdge = Edge[WebhookDelivery]
)

// DefaultWebhookDeliveryPageSize is the first of a delivery list when none
// is given.
const DefaultWebhookDeliveryPageSize = 20

// WebhookDeliveryFilter narrows a list of deliveries; set fields combine with AND.
type WebhookDeliveryFilter struct {
	Status *WebhookDeliveryStatus
	// Actions are exact actions or prefixes ending in "*", as auditEvents'.
	Actions []string
}

// WebhookDeliveries returns one page of the endpoint's deliveries, newest
// first, as viewer may see them. It returns UNAUTHENTICATED for no viewer,
// NOT_FOUND if the endpoint does not exist or viewer is not a member of its
// workspace, FORBIDDEN for a MEMBER or VIEWER, and BAD_USER_INPUT for first
// out of 1..100, a malformed cursor or one of another list or filter, an
// unknown status, or bad action patterns.
func (db *DB) WebhookDeliveries(ctx context.Context, viewer *User, endpointID string, filter WebhookDeliveryFilter,
	first *int, after *string) (*WebhookDeliveryConnection, error) {
	if filter.Status != nil && !filter.Status.IsValid() {
		return nil, errs.Errorf(errs.CodeBadUserInput, "filter.status: not a delivery status")
	}
	f, err := AuditFilter{Actions: filter.Actions}.normalized()
	if err != nil {
		return nil, err
	}
	scope := "webhook-deliveries:" + strings.ToLower(endpointID) + ":" + f.scopeKey()
	if filter.Status != nil {
		scope += ":" + string(*filter.Status)
	}
	page, err := NewPage(first, DefaultWebhookDeliveryPageSize, after, scope)
	if err != nil {
		return nil, err
	}
	e, err := db.WebhookEndpoint(ctx, viewer, endpointID)
	if err != nil {
		return nil, err
	}
	args := []any{e.ID, page.First + 1}
	where := ""
	if page.After != nil {
		args = append(args, page.After.At, page.After.ID)
		where += ` AND (d.created_at, d.id) < ($3, $4)`
	}
	if filter.Status != nil {
		args = append(args, string(*filter.Status))
		where += ` AND d.status = $` + strconv.Itoa(len(args))
	}
	cond, args, _ := f.auditWhere(args)
	rows, err := db.q(ctx).Query(ctx, `SELECT `+webhookDeliveryColumns+` FROM webhook_deliveries d
		WHERE d.endpoint_id = $1`+where+strings.ReplaceAll(cond, "action", "d.action")+`
		ORDER BY d.created_at DESC, d.id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("webhook deliveries: %w", err)
	}
	defer rows.Close()
	var items []*WebhookDelivery
	for rows.Next() {
		d, err := scanWebhookDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("webhook deliveries: %w", err)
		}
		items = append(items, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("webhook deliveries: %w", err)
	}
	return connection(items, page, scope, func(d *WebhookDelivery) (time.Time, string) { return d.CreatedAt, d.ID }), nil
}

// errAttemptInFlight answers a redelivery while an attempt is in flight.
var errAttemptInFlight = errs.Errorf(errs.CodeConflict,
	"an attempt of this delivery is in flight right now: look at the delivery again when it has ended")

// errRedeliverDisabled answers a redelivery of a disabled endpoint's delivery.
var errRedeliverDisabled = errs.Errorf(errs.CodeConflict, "the endpoint is disabled: enable it before redelivering")

// RedeliverWebhook starts a delivery over: it becomes PENDING with a new
// attempt due now and, after it, the whole retry schedule, with the same
// webhook-id and body. A job of the delivery that waits (for a retry, or
// for its run after the last attempt) is cancelled and replaced by a new
// one, in the same transaction, so that the delivery has the whole schedule
// and never two attempts at once; one that has not run yet is moved to now.
// The delivery's attempts count on. It records webhook.redelivered about the
// endpoint (metadata: deliveryId, eventId, action). The actor must be an
// OWNER or ADMIN. It returns UNAUTHENTICATED for no actor, NOT_FOUND if the
// delivery does not exist or is in a workspace the actor is not a member of,
// FORBIDDEN for a weaker role, and CONFLICT while an attempt is in flight or
// when the endpoint is disabled.
func (db *DB) RedeliverWebhook(ctx context.Context, actor *User, deliveryID string) (*WebhookDelivery, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	if !validID(deliveryID) {
		return nil, notFound("webhook delivery")
	}
	canon := mustCanonical(deliveryID)
	out := &WebhookDelivery{}
	err := db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		// The delivery locked with its endpoint, the rules in their order,
		// and the delivery's update, with the key's claim: one round trip
		// (the lock on the delivery keeps an attempt from starting between
		// the check and the update).
		u := unitOfWorkFrom(ctx)
		u.check(`SELECT taskflow_check(CASE WHEN r.role IS NULL THEN 'not_found'
				WHEN NOT (r.role = ANY($3::text[])) THEN 'forbidden'
				WHEN NOT r.enabled THEN 'disabled'
				WHEN r.in_flight_until > now() THEN 'in_flight' END)
			FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT e.enabled, d.in_flight_until, m.role FROM webhook_deliveries d
				JOIN webhook_endpoints e ON e.id = d.endpoint_id
				LEFT JOIN members m ON m.workspace_id = e.workspace_id AND m.user_id = $2
				WHERE d.id = $1 FOR UPDATE OF d FOR NO KEY UPDATE OF e) r ON true`,
			[]any{canon, actor.ID, rolesAtLeast(RoleAdmin)},
			refusals{"not_found": notFound("webhook delivery"), "forbidden": forbidden(webhookAdminAction),
				"disabled": errRedeliverDisabled, "in_flight": errAttemptInFlight})
		queueRow(u, "redeliver", `UPDATE webhook_deliveries d SET status = 'PENDING', next_attempt_at = now()
			WHERE d.id = $1 AND taskflow_ok() RETURNING `+webhookDeliveryColumns, []any{canon}, scanWebhookDelivery, out)
		ptx, err := pgxTxOf(ctx, tx)
		if err != nil {
			return err
		}
		c, err := db.riverInserter()
		if err != nil {
			return fmt.Errorf("river client: %w", err)
		}
		res, err := c.InsertTx(ctx, ptx, WebhookDeliveryArgs{DeliveryID: out.ID}, nil)
		if err != nil {
			return fmt.Errorf("redeliver: %w", err)
		}
		if res.UniqueSkippedAsDuplicate {
			// The delivery has a job already, unless it runs (CONFLICT).
			switch {
			case res.Job.State == rivertype.JobStateRunning:
				return errAttemptInFlight
			case res.Job.Attempt > 0:
				// It waits for a retry, or for its run after the last
				// attempt (webhookJobMaxAttempts): moved to now, it would
				// make only the attempts left of its runs, if any. A new job
				// instead, with every attempt (the last one is counted by the
				// job's runs, not by the delivery's attempts).
				j, err := c.JobCancelTx(ctx, ptx, res.Job.ID)
				if err != nil {
					return fmt.Errorf("redeliver: %w", err)
				}
				if j.State != rivertype.JobStateCancelled {
					return errAttemptInFlight // it began to run meanwhile
				}
				if res, err = c.InsertTx(ctx, ptx, WebhookDeliveryArgs{DeliveryID: out.ID}, nil); err != nil {
					return fmt.Errorf("redeliver: %w", err)
				}
				if res.UniqueSkippedAsDuplicate {
					return errAttemptInFlight
				}
			default:
				// It has not run yet (or snoozed at its first run): every
				// attempt is ahead of it; it runs now.
				if _, err := c.JobRetryTx(ctx, ptx, res.Job.ID); err != nil {
					return fmt.Errorf("redeliver: %w", err)
				}
			}
		}
		return db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &out.WorkspaceID, ActorID: &actor.ID,
			Action: "webhook.redelivered", EntityID: out.EndpointID,
			Metadata: map[string]any{"deliveryId": out.ID, "eventId": out.EventID, "action": out.Action}})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WebhookAttempt is a delivery claimed for one attempt (ClaimWebhookAttempt).
type WebhookAttempt struct {
	DeliveryID, EndpointID, WorkspaceID, EventID, Action, URL string
	// Payload is the body, the same on every attempt.
	Payload []byte
	// Keys are the signing keys: the current secret's, then the previous
	// one's while it still signs.
	Keys [][]byte
	// Attempt is the delivery's attempt number, 1 for the first (counting
	// every job of the delivery).
	Attempt int
}

// ErrWebhookGone is ClaimWebhookAttempt's answer when there is nothing to
// attempt: the delivery (or its endpoint) was deleted, it is not PENDING, or
// its endpoint is disabled (the delivery is then marked FAILED).
var ErrWebhookGone = errors.New("webhook delivery: nothing to attempt")

// WebhookInFlightError is ClaimWebhookAttempt's answer when another attempt
// holds the delivery until Until.
type WebhookInFlightError struct{ Until time.Time }

// Error says until when.
func (e *WebhookInFlightError) Error() string {
	return "webhook delivery: another attempt is in flight until " + e.Until.UTC().Format(time.RFC3339)
}

// ClaimWebhookAttempt takes the delivery for one attempt: it counts the
// attempt and holds the delivery for lease, in which no other attempt of it
// may start (the attempt itself must end sooner: its HTTP timeout is shorter
// than lease). It returns ErrWebhookGone when there is nothing to attempt and
// a *WebhookInFlightError while another attempt holds the delivery, or held
// it until a moment ago (Until is then now: try again shortly). The body of
// a webhook.* delivery with an endpoint URL whole (stored by an instance of
// before the URL redaction) is redacted, in the delivery too
// (redactWebhookBody); another is returned as stored.
func (db *DB) ClaimWebhookAttempt(ctx context.Context, deliveryID string, lease time.Duration) (*WebhookAttempt, error) {
	// The usual case in one statement: a PENDING delivery, not held, of an
	// enabled endpoint (or a ping).
	var a WebhookAttempt
	var key, prev []byte
	err := db.Pool.QueryRow(ctx, `WITH c AS (
			SELECT d.id, e.url, e.secret, CASE WHEN e.previous_until > now() THEN e.previous_secret END AS prev
			FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
			WHERE d.id = $1 AND d.status = 'PENDING' AND (d.in_flight_until IS NULL OR d.in_flight_until <= now())
				AND (e.enabled OR d.action = 'webhook.pinged')
			FOR NO KEY UPDATE OF d)
		UPDATE webhook_deliveries d SET attempts = d.attempts + 1,
			in_flight_until = now() + $2 * interval '1 microsecond', next_attempt_at = NULL
		FROM c WHERE d.id = c.id
		RETURNING d.endpoint_id, d.workspace_id, d.event_id, d.action, d.payload, d.attempts, c.url, c.secret, c.prev`,
		deliveryID, lease.Microseconds()).
		Scan(&a.EndpointID, &a.WorkspaceID, &a.EventID, &a.Action, &a.Payload, &a.Attempt, &a.URL, &key, &prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, db.unclaimable(ctx, deliveryID)
	}
	if err != nil {
		return nil, fmt.Errorf("claim webhook attempt: %w", err)
	}
	// A body an instance of before the URL redaction stored (during a
	// rolling upgrade, after migration 0016 ran) is redacted now, and kept
	// so: what is sent is what the delivery shows. It is sent redacted even
	// when it could not be kept (the next attempt tries again).
	if body, changed := redactWebhookBody(a.Action, a.Payload); changed {
		if _, err := db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET payload = $2 WHERE id = $1`, deliveryID, body); err != nil {
			db.log.WarnContext(ctx, "webhook delivery: its redacted body could not be stored; sent redacted", "delivery", deliveryID, "err", err)
		}
		a.Payload = body
	}
	a.DeliveryID = deliveryID
	a.Keys = [][]byte{key}
	if prev != nil {
		a.Keys = append(a.Keys, prev)
	}
	return &a, nil
}

// unclaimable says why a delivery could not be claimed: ErrWebhookGone (and
// a PENDING delivery of a disabled endpoint becomes FAILED), or a
// *WebhookInFlightError.
func (db *DB) unclaimable(ctx context.Context, deliveryID string) error {
	if err := db.heldOrGone(ctx, deliveryID, "claim webhook attempt"); err != nil {
		return err
	}
	// PENDING and free: its endpoint is disabled, or the hold that stopped
	// the claim ended since. Only the first fails the delivery; the second
	// is an attempt to make, after a short wait (the worker's snooze).
	tag, err := db.Pool.Exec(ctx, `UPDATE webhook_deliveries d SET status = 'FAILED', next_attempt_at = NULL,
		last_error = 'the endpoint is disabled' FROM webhook_endpoints e
		WHERE d.id = $1 AND e.id = d.endpoint_id AND d.status = 'PENDING'
		AND (d.in_flight_until IS NULL OR d.in_flight_until <= now())
		AND NOT e.enabled AND d.action <> 'webhook.pinged'`, deliveryID)
	if err != nil {
		return fmt.Errorf("claim webhook attempt: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return &WebhookInFlightError{Until: time.Now()}
	}
	return ErrWebhookGone
}

// Why a delivery that its last attempt left PENDING ends FAILED
// (GiveUpWebhookDelivery, FailStrandedWebhookDeliveries): its last_error.
const (
	// WebhookLastAttemptInterrupted: the last attempt was claimed and its
	// outcome never recorded (its in_flight_until is still set).
	WebhookLastAttemptInterrupted = "the last attempt was interrupted: its outcome was not recorded " +
		"(the server stopped or its database failed during it); it may have reached the endpoint"
	// WebhookLastAttemptNotMade: no attempt holds the delivery, none is left.
	WebhookLastAttemptNotMade = "the last attempt could not be made (the server's database failed); no attempt is left"
)

// giveUpSet is the SET of a PENDING delivery that no attempt will end,
// made FAILED: $1 and $2 are the reasons (WebhookLastAttemptInterrupted,
// WebhookLastAttemptNotMade). An attempt claimed and not recorded leaves its
// hold: its status code and latency, unknown, are cleared with it.
const giveUpSet = `status = 'FAILED', next_attempt_at = NULL, in_flight_until = NULL,
	last_error = CASE WHEN d.in_flight_until IS NULL THEN $2 ELSE $1 END,
	last_status_code = CASE WHEN d.in_flight_until IS NULL THEN d.last_status_code END,
	last_latency_ms = CASE WHEN d.in_flight_until IS NULL THEN d.last_latency_ms END`

// GiveUpWebhookDelivery marks FAILED a PENDING delivery that has no attempt
// left but was not ended by its last one (the run of its job after the last
// attempt: see webhookJobMaxAttempts), with why in last_error. It returns
// ErrWebhookGone when the delivery is not PENDING (or was deleted): its last
// attempt, or a redelivery's, ended it; and a *WebhookInFlightError while an
// attempt holds it (one that outlived River's rescue of its job may still
// end it), or held it until a moment ago (try again shortly).
func (db *DB) GiveUpWebhookDelivery(ctx context.Context, deliveryID string) error {
	tag, err := db.Pool.Exec(ctx, `UPDATE webhook_deliveries d SET `+giveUpSet+`
		WHERE d.id = $3 AND d.status = 'PENDING' AND (d.in_flight_until IS NULL OR d.in_flight_until <= now())`,
		WebhookLastAttemptInterrupted, WebhookLastAttemptNotMade, deliveryID)
	if err != nil {
		return fmt.Errorf("give up webhook delivery: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if err := db.heldOrGone(ctx, deliveryID, "give up webhook delivery"); err != nil {
		return err
	}
	return &WebhookInFlightError{Until: time.Now()} // the hold ended since the update
}

// heldOrGone reads why a statement that acts on a PENDING delivery no
// attempt holds found none: ErrWebhookGone when it is not PENDING (or was
// deleted), a *WebhookInFlightError while an attempt holds it, the read's
// error (prefixed with op), or nil when it is PENDING and free now.
func (db *DB) heldOrGone(ctx context.Context, deliveryID, op string) error {
	var status WebhookDeliveryStatus
	var inFlight *time.Time
	err := db.Pool.QueryRow(ctx, `SELECT d.status, CASE WHEN d.in_flight_until > now() THEN d.in_flight_until END
		FROM webhook_deliveries d WHERE d.id = $1`, deliveryID).Scan(&status, &inFlight)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && status != WebhookPending:
		return ErrWebhookGone
	case err != nil:
		return fmt.Errorf("%s: %w", op, err)
	case inFlight != nil:
		return &WebhookInFlightError{Until: *inFlight}
	}
	return nil
}

// strandedBatch is the most deliveries a statement of
// FailStrandedWebhookDeliveries takes.
const strandedBatch = 1000

// activeJobOf is the SQL of a delivery d's waiting or running job, with
// param the parameter of activeJobStates.
func activeJobOf(param string) string {
	return `SELECT FROM river_job j WHERE j.kind = '` + WebhookDeliveryArgs{}.Kind() + `'
		AND j.args->>'delivery_id' = d.id::text AND j.state = ANY(` + param + `::river_job_state[])`
}

// FailStrandedWebhookDeliveries marks FAILED the PENDING deliveries that
// nothing will attempt again: no attempt holds them and no job of theirs
// waits or runs. A job ends so only when its last run failed to end its
// delivery with no run left: one inserted with WebhookMaxAttempts runs
// (before webhookJobMaxAttempts) whose last attempt's instance died or could
// not record it, one whose closing run failed too, or one deleted by hand.
// Each gets why in last_error (WebhookLastAttemptInterrupted or
// WebhookLastAttemptNotMade) and can be redelivered. It returns how many it
// marked. Package webhook runs it every few minutes.
func (db *DB) FailStrandedWebhookDeliveries(ctx context.Context) (int64, error) {
	states := make([]string, len(activeJobStates))
	for i, s := range activeJobStates {
		states[i] = string(s)
	}
	var total int64
	for more := true; more; {
		var n int64
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			// Lock them first (skipping those a redelivery or a claim holds),
			// then look again for a job in a statement of its own: its
			// snapshot, taken under the locks, sees the job of a redelivery
			// that committed before them (one statement would not).
			rows, err := tx.Query(ctx, `SELECT d.id::text FROM webhook_deliveries d
				WHERE d.status = 'PENDING' AND (d.in_flight_until IS NULL OR d.in_flight_until <= now())
				AND NOT EXISTS (`+activeJobOf("$1")+`)
				ORDER BY d.created_at LIMIT $2 FOR NO KEY UPDATE OF d SKIP LOCKED`, states, strandedBatch)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			more = len(ids) == strandedBatch
			if len(ids) == 0 {
				return nil
			}
			tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries d SET `+giveUpSet+`
				WHERE d.id = ANY($4::uuid[]) AND d.status = 'PENDING'
				AND (d.in_flight_until IS NULL OR d.in_flight_until <= now()) AND NOT EXISTS (`+activeJobOf("$3")+`)`,
				WebhookLastAttemptInterrupted, WebhookLastAttemptNotMade, states, ids)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("fail stranded webhook deliveries: %w", err)
		}
		total += n
	}
	return total, nil
}

// WebhookOutcome is how an attempt ended.
type WebhookOutcome struct {
	Succeeded bool
	// StatusCode is the HTTP status of the answer (0: none came).
	StatusCode int
	Latency    time.Duration
	// Error says why a failed attempt failed, for the endpoint's admins.
	Error string
	// NextAttemptAt is when the next attempt is due; nil when none is: the
	// delivery is then FAILED (a failed attempt) or SUCCEEDED.
	NextAttemptAt *time.Time
	// DisableAfter disables the endpoint when this attempt failed and every
	// attempt since the last success failed, for at least this long (zero:
	// never).
	DisableAfter time.Duration
	// Attempt is the attempt's number (WebhookAttempt.Attempt): when the
	// delivery was claimed again since (this attempt outlived its hold), the
	// outcome is not recorded, so that it does not release the newer
	// attempt's hold. Zero records it whatever the delivery's count.
	Attempt int
}

// RecordWebhookAttempt records the outcome of an attempt of a delivery
// claimed by ClaimWebhookAttempt and releases it. A success ends the
// endpoint's failure streak; a failure starts one or, when the streak is
// older than DisableAfter, disables the endpoint with the reason and records
// webhook.disabled (no actor: the server did it). A delivery deleted
// meanwhile, or claimed again since (o.Attempt), records nothing.
func (db *DB) RecordWebhookAttempt(ctx context.Context, deliveryID string, o WebhookOutcome) error {
	status := WebhookPending
	switch {
	case o.Succeeded:
		status = WebhookSucceeded
	case o.NextAttemptAt == nil:
		status = WebhookFailed
	}
	var code *int
	if o.StatusCode != 0 {
		code = &o.StatusCode
	}
	var errText *string
	if o.Error != "" {
		e := audit.CleanText(o.Error)
		errText = &e
	}
	if o.Succeeded {
		// One statement: the delivery, and the end of the endpoint's streak.
		_, err := db.Pool.Exec(ctx, `WITH d AS (UPDATE webhook_deliveries SET status = 'SUCCEEDED', last_attempt_at = now(),
				last_status_code = $2, last_latency_ms = $3, last_error = NULL, next_attempt_at = NULL, in_flight_until = NULL
			WHERE id = $1 AND ($4 = 0 OR attempts = $4) RETURNING endpoint_id)
			UPDATE webhook_endpoints e SET failing_since = NULL FROM d WHERE e.id = d.endpoint_id AND e.failing_since IS NOT NULL`,
			deliveryID, code, float64(o.Latency.Microseconds())/1000, o.Attempt)
		if err != nil {
			return fmt.Errorf("record webhook attempt: %w", err)
		}
		return nil
	}
	return db.UnitOfWork(ctx, func(ctx context.Context) error {
		tx := TxFrom(ctx)
		var endpointID string
		err := tx.QueryRow(ctx, `UPDATE webhook_deliveries SET status = $2, last_attempt_at = now(), last_status_code = $3,
				last_latency_ms = $4, last_error = $5, next_attempt_at = $6, in_flight_until = NULL
			WHERE id = $1 AND ($7 = 0 OR attempts = $7) RETURNING endpoint_id`,
			deliveryID, status, code, float64(o.Latency.Microseconds())/1000, errText, o.NextAttemptAt, o.Attempt).Scan(&endpointID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record webhook attempt: %w", err)
		}
		var since time.Time
		var enabled bool
		var workspaceID string
		if err := tx.QueryRow(ctx, `UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, now())
			WHERE id = $1 RETURNING failing_since, enabled, workspace_id`, endpointID).Scan(&since, &enabled, &workspaceID); err != nil {
			return fmt.Errorf("record webhook attempt: %w", err)
		}
		if !enabled || o.DisableAfter <= 0 || time.Since(since) < o.DisableAfter {
			return nil
		}
		reason := fmt.Sprintf("disabled by the server: every attempt failed since %s; the last one: %s",
			since.UTC().Format(time.RFC3339), o.Error)
		if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2,
			disabled_at = clock_timestamp(), updated_at = clock_timestamp() WHERE id = $1`, endpointID, reason); err != nil {
			return fmt.Errorf("disable webhook endpoint: %w", err)
		}
		// Its other PENDING deliveries end FAILED now, as an admin's
		// disabling ends them (SetWebhookEndpointEnabled).
		if _, err := tx.Exec(ctx, failDisabledDeliveriesSQL, endpointID); err != nil {
			return fmt.Errorf("disable webhook endpoint: %w", err)
		}
		db.log.WarnContext(ctx, "webhook endpoint disabled", "endpoint_id", endpointID, "failing_since", since)
		return db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &workspaceID, Action: "webhook.disabled", EntityID: endpointID,
			Metadata: map[string]any{"changes": map[string]any{
				"enabled":        audit.Change{From: true, To: false},
				"disabledReason": audit.Change{From: nil, To: reason}}}})
	})
}

// enqueueDeliveries returns the River jobs of new deliveries.
func enqueueDeliveries(ids []string) []river.InsertManyParams {
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: WebhookDeliveryArgs{DeliveryID: id}}
	}
	return params
}

// WebhookDeliveryRetention is how long finished deliveries are kept.
const WebhookDeliveryRetention = 30 * 24 * time.Hour

// PurgeWebhookDeliveries deletes the SUCCEEDED and FAILED deliveries created
// more than retention ago, and returns how many.
func (db *DB) PurgeWebhookDeliveries(ctx context.Context, retention time.Duration) (int64, error) {
	tag, err := db.Pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE status <> 'PENDING'
		AND created_at < now() - $1 * interval '1 second'`, int64(retention/time.Second))
	if err != nil {
		return 0, fmt.Errorf("purge webhook deliveries: %w", err)
	}
	return tag.RowsAffected(), nil
}

// WebhookQueueStats is what waits to be delivered.
type WebhookQueueStats struct {
	// Pending is the number of PENDING deliveries.
	Pending int
	// Oldest is when the oldest of them was made (zero when none).
	Oldest time.Time
}

// WebhookQueueStats returns the deliveries that wait, for monitoring.
func (db *DB) WebhookQueueStats(ctx context.Context) (WebhookQueueStats, error) {
	var s WebhookQueueStats
	var oldest *time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM webhook_deliveries WHERE status = 'PENDING'`).
		Scan(&s.Pending, &oldest); err != nil {
		return s, fmt.Errorf("webhook queue: %w", err)
	}
	if oldest != nil {
		s.Oldest = *oldest
	}
	return s, nil
}
