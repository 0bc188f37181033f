// Command webhookreceiver is a small runnable TaskFlow webhook receiver: it
// verifies every delivery's signature (Standard Webhooks) with the endpoint's
// secret, refuses stale timestamps, applies each webhook-id once and prints
// the events it applies, one JSON line each.
//
// Usage:
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/webhookreceiver -addr 127.0.0.1:9000
//
// then register http://127.0.0.1:9000/ as an endpoint (a TaskFlow with
// WEBHOOK_ALLOW_HTTP=true and WEBHOOK_ALLOW_PRIVATE=true, as on a laptop).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"taskflow/examples/webhookreceiver/receiver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	flag.Parse()
	secret := os.Getenv("WEBHOOK_SECRET")
	if secret == "" {
		fmt.Fprintln(os.Stderr, "webhookreceiver: set WEBHOOK_SECRET to the endpoint's secret (whsec_...)")
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	r, err := receiver.New(secret, func(id string, e receiver.Event) error {
		return enc.Encode(map[string]any{"webhookId": id, "type": e.Type, "entityId": e.Data.EntityID, "occurredAt": e.Data.OccurredAt})
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "webhookreceiver: WEBHOOK_SECRET: %v\n", err)
		os.Exit(2)
	}
	srv := &http.Server{Addr: *addr, Handler: r, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
	log.Printf("receiving TaskFlow webhooks on http://%s/", *addr)
	log.Fatal(srv.ListenAndServe())
}
