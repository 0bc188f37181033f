package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"taskflow/egress"
	"taskflow/store"
)

// MaxResponseBody is the most of an answer's body an attempt reads (and
// throws away): enough to reuse the connection, bounded whatever the
// receiver sends.
const MaxResponseBody = 64 << 10

// userAgent is the User-Agent of deliveries.
const userAgent = "TaskFlow-Webhooks/1"

// worker makes one attempt of a delivery per River job run.
type worker struct {
	river.WorkerDefaults[store.WebhookDeliveryArgs]
	db                 *store.DB
	log                *slog.Logger
	client             *http.Client
	timeout, retryBase time.Duration
	disableAfter       time.Duration
	metrics            *metrics
	// next holds, by job id, when the attempt after a failed one is due, as
	// Work recorded it, until NextRetry hands it to River.
	next sync.Map
}

// Timeout is River's bound on a run: the attempt's own timeout plus the
// database work around it.
func (w *worker) Timeout(*river.Job[store.WebhookDeliveryArgs]) time.Duration {
	return w.timeout + leaseMargin
}

// NextRetry is when River runs the job again after a failed attempt: the
// time Work recorded as the delivery's next attempt (or now, if that has
// passed already: River would take a time in the past for a bug and use its
// own schedule).
//
// After the last attempt (River rescued the job from a dead instance, or the
// run returned an error: the delivery is still PENDING) comes the job's
// closing run, which only ends the delivery: after the first retry's wait.
func (w *worker) NextRetry(job *river.Job[store.WebhookDeliveryArgs]) time.Time {
	now := time.Now()
	if at, ok := w.next.LoadAndDelete(job.ID); ok {
		if t := at.(time.Time); t.After(now) {
			return t
		}
		return now
	}
	if job.Attempt >= store.WebhookMaxAttempts {
		return now.Add(RetryWait(w.retryBase, 1, job.ID))
	}
	return now.Add(RetryWait(w.retryBase, job.Attempt, job.ID))
}

// Work claims the delivery, makes one attempt and records it. It returns nil
// when there is nothing more to do (success, or the delivery gone), a
// cancellation when its last attempt failed (River keeps the error and runs
// the job no more), a snooze when no attempt could start (another holds the
// delivery, or the claim failed for a reason of the moment: store.Transient),
// which does not use up a run, and an error for River to retry the job at
// NextRetry.
// The run after the last attempt (the job has one more than the delivery's
// attempts) makes none: it ends the delivery, which that attempt left
// PENDING (giveUp).
func (w *worker) Work(ctx context.Context, job *river.Job[store.WebhookDeliveryArgs]) error {
	if job.Attempt > store.WebhookMaxAttempts {
		return w.giveUp(ctx, job)
	}
	a, err := w.db.ClaimWebhookAttempt(ctx, job.Args.DeliveryID, w.timeout+leaseMargin)
	var inFlight *store.WebhookInFlightError
	switch {
	case errors.Is(err, store.ErrWebhookGone):
		return nil
	case errors.As(err, &inFlight):
		// Only when an attempt outlived River's rescue of its job: wait for
		// its hold to end rather than send a second one alongside it.
		return snoozeWhile(inFlight)
	case store.Transient(err):
		// No attempt was made (or one was claimed and not sent, when only
		// the answer to the claim was lost: its hold then delays the next
		// claim). Snoozed, the run is not used up (River gives it back), so
		// that the delivery still has all its attempts, the last one
		// counted by the job's runs; after the first retry's wait.
		return w.snoozeAfter(ctx, job, "webhook attempt's claim failed; retried without using an attempt", err)
	case err != nil:
		// A failure of the claim's statement itself, which may come again:
		// the run is used up, so that the delivery ends (its job's closing
		// run, or the sweep) rather than retry for ever.
		return err
	}
	res := w.attempt(ctx, a)
	// The delivery's last attempt, counted by the job's runs (its job has
	// one more, the closing run; one inserted by an earlier version has as
	// many runs as attempts).
	last := job.Attempt >= min(job.MaxAttempts, store.WebhookMaxAttempts)
	o := store.WebhookOutcome{Succeeded: res.ok, StatusCode: res.status, Latency: res.latency, Error: res.err,
		DisableAfter: w.disableAfter, Attempt: a.Attempt}
	if !res.ok && !last {
		next := time.Now().Add(RetryWait(w.retryBase, job.Attempt, job.ID))
		o.NextAttemptAt = &next
	}
	// Recorded even when River has given up on the run (a detached context):
	// the attempt happened.
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.db.RecordWebhookAttempt(recordCtx, a.DeliveryID, o); err != nil {
		return err
	}
	if o.NextAttemptAt != nil {
		w.next.Store(job.ID, *o.NextAttemptAt)
	}
	w.metrics.attempted(res)
	switch {
	case res.ok:
		w.metrics.finished(store.WebhookSucceeded)
		return nil
	case last:
		w.metrics.finished(store.WebhookFailed)
		return river.JobCancel(fmt.Errorf("webhook delivery %s failed its last attempt: %s", a.DeliveryID, res.err))
	}
	return fmt.Errorf("webhook delivery %s: %s", a.DeliveryID, res.err)
}

// snoozeAfter snoozes the job after a failure of the moment (err, logged as
// msg unless the instance is stopping), for the first retry's wait: River
// gives the run back, so that it does not count.
func (w *worker) snoozeAfter(ctx context.Context, job *river.Job[store.WebhookDeliveryArgs], msg string, err error) error {
	if ctx.Err() == nil {
		w.log.WarnContext(ctx, msg, "delivery", job.Args.DeliveryID, "err", err)
	}
	return river.JobSnooze(RetryWait(w.retryBase, 1, job.ID))
}

// snoozeWhile snoozes the job while another attempt holds its delivery (at
// least a second).
func snoozeWhile(held *store.WebhookInFlightError) error {
	return river.JobSnooze(max(time.Until(held.Until), time.Second))
}

// giveUp is the job's closing run, after the delivery's last attempt: that
// attempt did not end the delivery (its instance died during it and River
// rescued the job, or recording it failed), which would otherwise stay
// PENDING with nothing left to attempt it. It marks it FAILED, saying why;
// while the attempt may still be in flight (its hold has not ended: an
// instance paused, not dead), it waits for the hold to end, and after a
// failure of the moment (store.Transient) it runs again. Nothing is sent.
func (w *worker) giveUp(ctx context.Context, job *river.Job[store.WebhookDeliveryArgs]) error {
	err := w.db.GiveUpWebhookDelivery(ctx, job.Args.DeliveryID)
	var inFlight *store.WebhookInFlightError
	switch {
	case errors.Is(err, store.ErrWebhookGone):
		return nil
	case errors.As(err, &inFlight):
		return snoozeWhile(inFlight)
	case store.Transient(err):
		// A failure of the moment: snoozed, the run is given back and made
		// again, rather than leave the delivery PENDING until the sweep.
		return w.snoozeAfter(ctx, job, "webhook delivery's closing run failed; run again", err)
	case err != nil:
		// No run is left: FailStrandedWebhookDeliveries ends it later.
		return err
	}
	w.metrics.finished(store.WebhookFailed)
	return nil
}

// result is how one attempt went.
type result struct {
	ok      bool
	status  int
	latency time.Duration
	// outcome is the metrics label: success, status, timeout, refused or error.
	outcome string
	err     string
}

// Sign returns the webhook-signature header of a delivery: "v1," and the
// base64 HMAC-SHA256 of "id.timestamp.body" under each key (Standard
// Webhooks), separated by spaces.
func Sign(keys [][]byte, id string, at time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		wh, err := standardwebhooks.NewWebhookRaw(k)
		if err != nil {
			return "", err
		}
		s, err := wh.Sign(id, at, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, s)
	}
	return strings.Join(sigs, " "), nil
}

// attempt sends the delivery once.
func (w *worker) attempt(ctx context.Context, a *store.WebhookAttempt) result {
	now := time.Now()
	sig, err := Sign(a.Keys, a.DeliveryID, now, a.Payload)
	if err != nil {
		return result{outcome: "error", err: "signing failed"}
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, bytes.NewReader(a.Payload))
	if err != nil {
		return result{outcome: "error", err: "the URL cannot be requested"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(standardwebhooks.HeaderWebhookID, a.DeliveryID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	res, err := w.client.Do(req)
	if err != nil {
		r := result{latency: time.Since(now), outcome: "error", err: "could not deliver: " + transportError(err)}
		switch {
		case egress.Refused(err) || egress.Unresolved(err):
			// One text for both, naming neither the address nor the
			// resolver: the workspace's admins read it, and a name of theirs
			// that now resolves to an internal one (a CNAME, rebinding) must
			// not map the server's network for them.
			if egress.Refused(err) {
				r.outcome = "refused"
			}
			r.err = "could not deliver: " + egress.NotPublicHost(req.URL.Hostname())
		case errors.Is(err, egress.ErrPlainHTTP): // an http:// URL registered while WEBHOOK_ALLOW_HTTP was on
			r.outcome = "refused"
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			r.outcome, r.err = "timeout", fmt.Sprintf("no answer within %s", w.timeout)
		}
		return r
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, MaxResponseBody))
	res.Body.Close()
	r := result{status: res.StatusCode, latency: time.Since(now), outcome: "status"}
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		r.ok, r.outcome = true, "success"
	case res.StatusCode >= 300 && res.StatusCode < 400:
		r.err = fmt.Sprintf("HTTP %d: redirects are not followed; register the final URL", res.StatusCode)
	default:
		r.err = fmt.Sprintf("HTTP %d", res.StatusCode)
	}
	return r
}

// transportError is err without the request's method and URL.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
