// Package receiver is a TaskFlow webhook receiver, as a customer would write
// one: it verifies each delivery's Standard Webhooks signature with the
// endpoint's secret (github.com/standard-webhooks/standard-webhooks), refuses
// a timestamp more than five minutes from now (a replayed old delivery), and
// applies each delivery once, de-duplicating by its webhook-id (TaskFlow
// retries a delivery with the same webhook-id until it gets a 2xx). It needs
// nothing of TaskFlow's code.
package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// MaxBody is the largest body accepted.
const MaxBody = 1 << 20

// Event is the JSON envelope of a delivery (version 1).
type Event struct {
	Version   int    `json:"version"`
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		EventID     string         `json:"eventId"`
		WorkspaceID string         `json:"workspaceId"`
		Action      string         `json:"action"`
		EntityType  string         `json:"entityType"`
		EntityID    string         `json:"entityId"`
		ActorID     *string        `json:"actorId"`
		OccurredAt  string         `json:"occurredAt"`
		RequestID   *string        `json:"requestId"`
		Metadata    map[string]any `json:"metadata"`
	} `json:"data"`
}

// Receiver is an http.Handler for one endpoint's deliveries.
type Receiver struct {
	wh *standardwebhooks.Webhook
	// apply does the work of a delivery; an error makes the answer a 500, so
	// TaskFlow retries it.
	apply func(id string, e Event) error

	mu sync.Mutex
	// done holds the webhook-ids applied; a real receiver keeps them in its
	// database, in the transaction of the work (a unique key).
	done map[string]bool
	// busy holds the webhook-ids being applied now.
	busy map[string]*sync.Mutex
}

// New returns a receiver that verifies with secret (whsec_...) and calls
// apply once per webhook-id.
func New(secret string, apply func(id string, e Event) error) (*Receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	return &Receiver{wh: wh, apply: apply, done: map[string]bool{}, busy: map[string]*sync.Mutex{}}, nil
}

// Verify checks a delivery's signature and timestamp; the error says why it
// is refused.
func (r *Receiver) Verify(body []byte, h http.Header) error { return r.wh.Verify(body, h) }

// ServeHTTP answers 401 for a delivery whose signature or timestamp does
// not verify, 400 for a body that is not an event, 200 for one applied now or
// before, 500 when apply failed.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if err := r.Verify(body, req.Header); err != nil {
		http.Error(w, "signature or timestamp does not verify", http.StatusUnauthorized)
		return
	}
	var e Event
	if err := json.Unmarshal(body, &e); err != nil || e.Version != 1 {
		http.Error(w, "not a version 1 event", http.StatusBadRequest)
		return
	}
	id := req.Header.Get(standardwebhooks.HeaderWebhookID)
	if err := r.once(id, e); err != nil {
		http.Error(w, "could not apply", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// once calls apply for id unless it was applied; concurrent calls for one id
// wait for each other.
func (r *Receiver) once(id string, e Event) error {
	r.mu.Lock()
	l := r.busy[id]
	if l == nil {
		l = &sync.Mutex{}
		r.busy[id] = l
	}
	r.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	r.mu.Lock()
	applied := r.done[id]
	r.mu.Unlock()
	if applied {
		return nil
	}
	if err := r.apply(id, e); err != nil {
		return err
	}
	r.mu.Lock()
	r.done[id] = true
	r.mu.Unlock()
	return nil
}
