package main

import (
	"bytes"
	"strings"
	"testing"

	"taskflow/httpapi/apitest"
)

// TestRun runs the example against a real TaskFlow server and checks that what
// it reports is what happened: one task despite the retry, the retry marked as
// a replay, and the workspace's audit log as stored.
func TestRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	var out bytes.Buffer
	if err := run(t.Context(), env.Server.URL, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())

	facts := map[string][]string{} // first word of a line → its lines' other words
	var audit [][]string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		w := strings.Fields(line)
		if len(w) < 2 {
			t.Fatalf("odd output line %q", line)
		}
		if w[0] == "audit:" {
			audit = append(audit, w[1:])
			continue
		}
		facts[w[0]] = w[1:]
	}
	for _, k := range []string{"user:", "workspace:", "project:", "task:", "retry:", "task-events:"} {
		if facts[k] == nil {
			t.Fatalf("no %q line in the output", k)
		}
	}
	userID, wsID, projectID := facts["user:"][0], facts["workspace:"][0], facts["project:"][0]
	taskID, retryID := facts["task:"][0], facts["retry:"][0]
	if retryID != taskID {
		t.Errorf("retry returned task %s, first call %s", retryID, taskID)
	}
	if got := facts["task:"][len(facts["task:"])-1]; got == `"true")` {
		t.Errorf("first createTask has Idempotent-Replayed %s, want it not replayed", got)
	}
	if got := facts["retry:"][len(facts["retry:"])-1]; got != `"true")` {
		t.Errorf("retried createTask has Idempotent-Replayed %s, want \"true\"", got)
	}
	if got := strings.Join(facts["task:"][1:3], " "); got != "TODO MEDIUM" {
		t.Errorf("task status and priority = %s, want the schema defaults TODO MEDIUM", got)
	}

	if got := facts["task-events:"][0]; got != "1" {
		t.Errorf("auditEvents filtered on task.* gave %s events, want 1 (one task.created, none for the replay)", got)
	}

	ctx := t.Context()
	var tasks int
	if err := env.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE project_id = $1`, projectID).Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	if tasks != 1 {
		t.Errorf("project has %d tasks after a create and its retry, want 1", tasks)
	}
	var owner string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT user_id FROM members WHERE workspace_id = $1 AND role = 'OWNER'`, wsID).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != userID {
		t.Errorf("workspace owner = %s, want the registered user %s", owner, userID)
	}

	// The audit lines are the workspace's events, newest first, each once.
	var stored int
	if err := env.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE workspace_id = $1`, wsID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(audit) != stored {
		t.Errorf("example printed %d audit events, the workspace has %d", len(audit), stored)
	}
	seen := map[string]string{} // action → entity id
	for i, e := range audit {
		if len(e) != 4 {
			t.Fatalf("odd audit line %q", e)
		}
		if i > 0 && e[0] > audit[i-1][0] {
			t.Errorf("audit events not newest first: %s after %s", e[0], audit[i-1][0])
		}
		if _, dup := seen[e[1]]; dup && e[1] != "member.added" {
			t.Errorf("audit action %s listed twice (a replay must not add an event)", e[1])
		}
		seen[e[1]] = e[3]
	}
	for action, id := range map[string]string{"workspace.created": wsID, "project.created": projectID, "task.created": taskID} {
		if seen[action] != id {
			t.Errorf("audit event %s for %q, want one for %s (events: %v)", action, seen[action], id, audit)
		}
	}
}
