package auditexport_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"taskflow/auditexport"
	"taskflow/httpapi/apitest"
	"taskflow/webhook"
)

// The instance's River client (webhook.Start's, with the jobs of New) works
// an export started through the API to SUCCEEDED, in the audit exports
// queue, with no hand of the test on the job.
func TestRiverWorksAnExport(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	owner := env.NewUser(t, "Owner")
	r := env.Post(t, owner.Token, `mutation { createWorkspace(input: {name: "w"}) { id } }`, nil)
	var ws struct{ CreateWorkspace struct{ ID string } }
	if err := json.Unmarshal(r.Body.Data, &ws); err != nil || ws.CreateWorkspace.ID == "" {
		t.Fatalf("createWorkspace: %s", r.Raw)
	}
	r = env.Post(t, owner.Token, `mutation($ws: ID!) { startAuditExport(input: {workspaceId: $ws, format: CSV}) { id } }`,
		map[string]any{"ws": ws.CreateWorkspace.ID})
	var started struct{ StartAuditExport struct{ ID string } }
	if err := json.Unmarshal(r.Body.Data, &started); err != nil || started.StartAuditExport.ID == "" {
		t.Fatalf("startAuditExport: %s", r.Raw)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	j := auditexport.New(auditexport.Options{DB: env.DB, Blobs: env.Blobs, Log: log})
	svc, err := webhook.Start(t.Context(), webhook.Options{DB: env.DB, Log: log,
		More: []webhook.Jobs{{Register: j.Register, Queues: j.Queues, Periodic: j.Periodic}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		var events int
		if err := env.DB.Pool.QueryRow(t.Context(), `SELECT state, events_written FROM audit_exports WHERE id = $1`,
			started.StartAuditExport.ID).Scan(&state, &events); err != nil {
			t.Fatal(err)
		}
		if state == "SUCCEEDED" {
			// workspace.created and audit.export_started.
			if events != 2 {
				t.Fatalf("%d events written, want 2", events)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export is %s after 30 s", state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
