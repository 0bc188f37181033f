package receiver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"taskflow/examples/webhookreceiver/receiver"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// post sends body as delivery id with the signature of signed at at.
func post(t *testing.T, h http.Handler, id string, at time.Time, body, signed []byte) int {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, at, signed)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", fmt.Sprint(at.Unix()))
	req.Header.Set("webhook-signature", sig)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// The receiver applies a verified delivery once per webhook-id (a retry is
// acknowledged, not applied again) and refuses a tampered body and a stale
// timestamp.
func TestReceiver(t *testing.T) {
	t.Parallel()
	applied := 0
	r, err := receiver.New(secret, func(string, receiver.Event) error { applied++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"version":1,"type":"task.created","timestamp":"2026-12-01T00:00:00Z","data":{"entityId":"x"}}`)
	now := time.Now()
	for range 2 {
		if code := post(t, r, "msg_1", now, body, body); code != http.StatusOK {
			t.Fatalf("a delivery: %d", code)
		}
	}
	if applied != 1 {
		t.Errorf("applied %d times, want once", applied)
	}
	tampered := bytes.Replace(body, []byte("created"), []byte("deleted"), 1)
	if code := post(t, r, "msg_2", now, tampered, body); code != http.StatusUnauthorized {
		t.Errorf("a tampered body: %d, want 401", code)
	}
	if code := post(t, r, "msg_3", now.Add(-10*time.Minute), body, body); code != http.StatusUnauthorized {
		t.Errorf("a stale timestamp: %d, want 401", code)
	}
	if applied != 1 {
		t.Errorf("applied %d times after refusals", applied)
	}
}
