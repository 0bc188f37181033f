package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/httpapi/apitest"
	"taskflow/store"
	"taskflow/store/storetest"
)

// auditEnv is an API with one workspace and a log written by SQL the way the
// store writes it, unchained (the domain mutations are tested elsewhere), with
// the hash chain the sealer must make of it computed here on the side.
type auditEnv struct {
	*apitest.Env
	owner, admin, member, viewer, stranger apitest.User
	ws, other                              string
	prev                                   map[string][]byte
	at                                     time.Time
}

func newAuditEnv(t *testing.T, opts ...apitest.Option) *auditEnv {
	t.Helper()
	e := &auditEnv{Env: apitest.New(t, opts...), prev: map[string][]byte{}, at: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
	e.owner, e.admin, e.member = e.NewUser(t, "Owner"), e.NewUser(t, "Admin"), e.NewUser(t, "Member")
	e.viewer, e.stranger = e.NewUser(t, "Viewer"), e.NewUser(t, "Stranger")
	e.ws = e.workspace(t, map[apitest.User]store.Role{e.owner: store.RoleOwner, e.admin: store.RoleAdmin,
		e.member: store.RoleMember, e.viewer: store.RoleViewer})
	e.other = e.workspace(t, map[apitest.User]store.Role{e.stranger: store.RoleOwner})
	return e
}

func (e *auditEnv) workspace(t *testing.T, members map[apitest.User]store.Role) string {
	t.Helper()
	ctx := context.Background()
	var id string
	if err := e.DB.Pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('w') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for u, r := range members {
		if _, err := e.DB.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, $3)`, id, u.ID, r); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// event inserts an event of a workspace, notes the hash its seal must have,
// and returns its id.
func (e *auditEnv) event(t *testing.T, ws string, actor apitest.User, action, entity string, meta map[string]any) string {
	t.Helper()
	e.at = e.at.Add(time.Minute)
	m, err := audit.NormalizeMetadata(meta)
	if err != nil {
		t.Fatal(err)
	}
	ip, ua, rid := "192.0.2.1", "=cmd|' /C calc'!A0", "req-"+uuid.NewString()
	r := audit.Record{ID: uuid.NewString(), ChainKey: ws, WorkspaceID: &ws, ActorID: &actor.ID, Action: action,
		EntityType: strings.SplitN(action, ".", 2)[0], EntityID: entity, OccurredAt: e.at, IP: &ip, UserAgent: &ua, RequestID: &rid, Metadata: m}
	prev := e.prev[ws]
	hash, err := audit.Hash(prev, r)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.DB.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action, entity_type,
		entity_id, occurred_at, ip, user_agent, request_id, metadata)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)`, r.ID, r.ChainKey, r.WorkspaceID, r.ActorID, r.Action,
		r.EntityType, r.EntityID, r.OccurredAt, r.IP, r.UserAgent, r.RequestID, r.Metadata); err != nil {
		t.Fatal(err)
	}
	e.prev[ws] = hash
	return r.ID
}

const auditEventsQuery = `query($ws: ID!, $filter: AuditEventFilter, $first: Int, $after: String) {
  auditEvents(workspaceId: $ws, filter: $filter, first: $first, after: $after) {
    edges { cursor node { id workspaceId actorId actor { id name } action entityType entityId occurredAt ip userAgent requestId metadata } }
    nodes { id }
    pageInfo { hasNextPage endCursor }
  }
}`

type auditPage struct {
	AuditEvents struct {
		Edges []struct {
			Cursor string
			Node   struct {
				ID, WorkspaceID, ActorID, Action, EntityType, EntityID, IP, UserAgent, RequestID string
				OccurredAt                                                                       time.Time
				Actor                                                                            *struct{ ID, Name string }
				Metadata                                                                         map[string]any
			}
		}
		Nodes    []struct{ ID string }
		PageInfo struct {
			HasNextPage bool
			EndCursor   *string
		}
	}
}

func (e *auditEnv) page(t *testing.T, u apitest.User, ws string, filter map[string]any, first int, after *string) (*auditPage, *apitest.Response) {
	t.Helper()
	vars := map[string]any{"ws": ws, "first": first}
	if filter != nil {
		vars["filter"] = filter
	}
	if after != nil {
		vars["after"] = *after
	}
	res := e.Post(t, u.Token, auditEventsQuery, vars)
	var p auditPage
	if len(res.Body.Data) > 0 && string(res.Body.Data) != "null" {
		if err := json.Unmarshal(res.Body.Data, &p); err != nil {
			t.Fatal(err)
		}
	}
	return &p, res
}

// Browsing through GraphQL: filters, pagination, cursor binding, the actor, and
// the access rule, over real HTTP.
func TestAuditEventsAPI(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	var ids []string // oldest first
	for i := range 12 {
		actor, action := e.owner, "task.created"
		if i%2 == 1 {
			actor, action = e.admin, "task.updated"
		}
		if i%4 == 3 {
			action = "member.added"
		}
		ids = append(ids, e.event(t, e.ws, actor, action, fmt.Sprint("ent-", i%3), map[string]any{"i": i, "title": "ü"}))
	}
	e.event(t, e.other, e.stranger, "task.created", "x", nil)

	// Everything, newest first, over pages of 5.
	var got []string
	var after *string
	for {
		p, res := e.page(t, e.admin, e.ws, nil, 5, after)
		if res.Code() != "" {
			t.Fatalf("errors: %s", res.Raw)
		}
		for i, ed := range p.AuditEvents.Edges {
			got = append(got, ed.Node.ID)
			if p.AuditEvents.Nodes[i].ID != ed.Node.ID {
				t.Fatal("nodes and edges differ")
			}
		}
		if !p.AuditEvents.PageInfo.HasNextPage {
			break
		}
		after = p.AuditEvents.PageInfo.EndCursor
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("pages = %v\nwant %v", got, want)
	}

	// Fields of one event, with its actor.
	p, _ := e.page(t, e.owner, e.ws, map[string]any{"actions": []string{"task.updated"}, "actorId": e.admin.ID,
		"entityType": "task", "entityId": "ent-2", "since": "2026-05-01T00:00:00Z", "until": "2027-01-01T00:00:00+01:00"}, 10, nil)
	// task.updated by the admin: i in {1, 5, 9}; entity ent-2 (i%3 == 2): 5 only.
	if n := len(p.AuditEvents.Edges); n != 1 {
		t.Fatalf("combined filter: %d events", n)
	}
	node := p.AuditEvents.Edges[0].Node
	if node.ID != ids[5] || node.Actor == nil || node.Actor.ID != e.admin.ID || node.Actor.Name != "Admin" ||
		node.WorkspaceID != e.ws || node.EntityType != "task" || node.IP != "192.0.2.1" || node.Metadata["title"] != "ü" || node.Metadata["i"] != 5.0 {
		t.Fatalf("event = %+v", node)
	}

	// Prefix filter.
	p, _ = e.page(t, e.owner, e.ws, map[string]any{"actions": []string{"task.*"}}, 100, nil)
	if len(p.AuditEvents.Edges) != 9 {
		t.Fatalf("task.*: %d events", len(p.AuditEvents.Edges))
	}
	// since inclusive, until exclusive.
	since, until := p.AuditEvents.Edges[5].Node.OccurredAt, p.AuditEvents.Edges[1].Node.OccurredAt
	p2, _ := e.page(t, e.owner, e.ws, map[string]any{"actions": []string{"task.*"}, "since": since.Format(time.RFC3339Nano), "until": until.Format(time.RFC3339Nano)}, 100, nil)
	if len(p2.AuditEvents.Edges) != 4 || p2.AuditEvents.Edges[0].Node.ID != p.AuditEvents.Edges[2].Node.ID ||
		p2.AuditEvents.Edges[3].Node.ID != p.AuditEvents.Edges[5].Node.ID {
		t.Fatalf("window: %+v", p2.AuditEvents.Edges)
	}

	// The actor id and actor stay after the actor leaves the workspace.
	if _, err := e.DB.Pool.Exec(context.Background(), `DELETE FROM members WHERE workspace_id = $1 AND user_id = $2`, e.ws, e.admin.ID); err != nil {
		t.Fatal(err)
	}
	p, res := e.page(t, e.owner, e.ws, map[string]any{"actorId": e.admin.ID}, 100, nil)
	if res.Code() != "" || len(p.AuditEvents.Edges) != 6 || p.AuditEvents.Edges[0].Node.Actor == nil || p.AuditEvents.Edges[0].Node.ActorID != e.admin.ID {
		t.Fatalf("after the actor left: %s", res.Raw)
	}

	// Cursor from another filter or workspace, bad first, bad filter.
	p, _ = e.page(t, e.owner, e.ws, map[string]any{"actions": []string{"task.*"}}, 2, nil)
	cur := p.AuditEvents.PageInfo.EndCursor
	for name, c := range map[string]struct {
		ws     string
		filter map[string]any
		first  int
		after  *string
	}{
		"other filter":    {e.ws, map[string]any{"actions": []string{"task.created"}}, 2, cur},
		"no filter":       {e.ws, nil, 2, cur},
		"first 0":         {e.ws, nil, 0, nil},
		"first 101":       {e.ws, nil, 101, nil},
		"bad pattern":     {e.ws, map[string]any{"actions": []string{"*.created"}}, 2, nil},
		"garbage cursor":  {e.ws, nil, 2, auditPtr("garbage")},
		"other workspace": {e.other, map[string]any{"actions": []string{"task.*"}}, 2, cur},
	} {
		u := e.owner
		if c.ws == e.other {
			// The stranger owns the other workspace and tries the owner's cursor there.
			u = e.stranger
		}
		_, res := e.page(t, u, c.ws, c.filter, c.first, c.after)
		if res.Code() != "BAD_USER_INPUT" {
			t.Errorf("%s: %s", name, res.Raw)
		}
	}

	// Access.
	for _, c := range []struct {
		u    apitest.User
		ws   string
		code string
	}{
		{e.member, e.ws, "FORBIDDEN"}, {e.viewer, e.ws, "FORBIDDEN"}, {e.stranger, e.ws, "NOT_FOUND"},
		{e.admin, e.ws, "NOT_FOUND"}, // removed above
		{e.owner, e.other, "NOT_FOUND"}, {e.owner, uuid.NewString(), "NOT_FOUND"}, {apitest.User{}, e.ws, "UNAUTHENTICATED"},
	} {
		p, res := e.page(t, c.u, c.ws, nil, 10, nil)
		if res.Code() != c.code || len(p.AuditEvents.Edges) != 0 {
			t.Errorf("%s in %s: %s", c.u.ID, c.ws, res.Raw)
		}
	}
}

func auditPtr[T any](v T) *T { return &v }

// verifyAuditLog through GraphQL: valid for an intact chain, with the
// sealer's hashes equal to the chain computed independently; the newest
// checkpoint, verified back with its signature; OWNER/ADMIN only, the signing
// keys for anyone.
func TestVerifyAuditLogAPI(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	q := `query($ws: ID!, $cp: AuditCheckpointInput) { verifyAuditLog(workspaceId: $ws, checkpoint: $cp) {
		valid checkedEvents firstInvalidEventId headHash sealedEvents unsealedEvents headPosition
		checkpoint { valid signatureValid extended position keyId reason } } }`
	type verification struct {
		VerifyAuditLog struct {
			Valid                        bool
			CheckedEvents                int
			FirstInvalidEventID          *string
			HeadHash                     *string
			SealedEvents, UnsealedEvents int
			HeadPosition                 *int
			Checkpoint                   *struct {
				Valid, SignatureValid, Extended bool
				Position                        int
				KeyID                           string
				Reason                          *string
			}
		}
	}
	run := func(u apitest.User, ws string, cp map[string]any) (verification, *apitest.Response) {
		res := e.Post(t, u.Token, q, map[string]any{"ws": ws, "cp": cp})
		var v verification
		_ = json.Unmarshal(res.Body.Data, &v)
		return v, res
	}
	v, res := run(e.owner, e.ws, nil)
	if res.Code() != "" || !v.VerifyAuditLog.Valid || v.VerifyAuditLog.CheckedEvents != 0 || v.VerifyAuditLog.HeadHash != nil ||
		v.VerifyAuditLog.HeadPosition != nil || v.VerifyAuditLog.Checkpoint != nil {
		t.Fatalf("empty log: %s", res.Raw)
	}
	for i := range 4 {
		e.event(t, e.ws, e.owner, "project.created", fmt.Sprint(i), map[string]any{"n": 1.25 * float64(i)})
	}
	v, res = run(e.admin, e.ws, nil)
	if res.Code() != "" || !v.VerifyAuditLog.Valid || v.VerifyAuditLog.UnsealedEvents != 4 || v.VerifyAuditLog.SealedEvents != 0 ||
		v.VerifyAuditLog.CheckedEvents != 4 {
		t.Fatalf("before the sealer: %s", res.Raw)
	}
	e.Seal(t)
	v, res = run(e.admin, e.ws, nil)
	if res.Code() != "" || !v.VerifyAuditLog.Valid || v.VerifyAuditLog.CheckedEvents != 4 || v.VerifyAuditLog.SealedEvents != 4 ||
		v.VerifyAuditLog.UnsealedEvents != 0 || v.VerifyAuditLog.HeadHash == nil || v.VerifyAuditLog.HeadPosition == nil ||
		*v.VerifyAuditLog.HeadPosition != 4 || *v.VerifyAuditLog.HeadHash != fmt.Sprintf("%x", e.prev[e.ws]) {
		t.Fatalf("verify: %s", res.Raw)
	}
	for u, code := range map[*apitest.User]string{&e.member: "FORBIDDEN", &e.viewer: "FORBIDDEN", &e.stranger: "NOT_FOUND"} {
		if _, res := run(*u, e.ws, nil); res.Code() != code {
			t.Errorf("%s: %s", u.ID, res.Raw)
		}
	}

	// The newest checkpoint, kept as JSON and presented back.
	cpq := `query($ws: ID!) { auditCheckpoint(workspaceId: $ws) { version chainKey position headHash signedAt keyId publicKey signature message } }`
	res = e.Post(t, e.owner.Token, cpq, map[string]any{"ws": e.ws})
	if res.Code() != "" || !strings.Contains(string(res.Raw), `"auditCheckpoint":null`) {
		t.Fatalf("checkpoint before any was signed: %s", res.Raw)
	}
	if _, err := e.Sealer().Checkpoint(context.Background(), e.ws); err != nil {
		t.Fatal(err)
	}
	res = e.Post(t, e.owner.Token, cpq, map[string]any{"ws": e.ws})
	var got struct{ AuditCheckpoint map[string]any }
	if err := json.Unmarshal(res.Body.Data, &got); err != nil || res.Code() != "" || got.AuditCheckpoint == nil {
		t.Fatalf("checkpoint: %s", res.Raw)
	}
	kept := got.AuditCheckpoint
	var cp audit.Checkpoint
	raw, _ := json.Marshal(kept)
	if err := json.Unmarshal(raw, &cp); err != nil || cp.Position != 4 || cp.HeadHash != *v.VerifyAuditLog.HeadHash ||
		cp.Verify(e.AuditKey.Public().(ed25519.PublicKey)) != nil || kept["version"] != audit.CheckpointVersion {
		t.Fatalf("checkpoint %s: %v", raw, err)
	}
	delete(kept, "publicKey")
	delete(kept, "message")
	v, res = run(e.owner, e.ws, kept)
	if c := v.VerifyAuditLog.Checkpoint; res.Code() != "" || !v.VerifyAuditLog.Valid || c == nil || !c.Valid || !c.Extended ||
		!c.SignatureValid || c.Position != 4 || c.Reason != nil {
		t.Fatalf("verify with the kept checkpoint: %s", res.Raw)
	}
	forged := maps.Clone(kept)
	forged["position"] = 3
	v, res = run(e.owner, e.ws, forged)
	if c := v.VerifyAuditLog.Checkpoint; res.Code() != "" || !v.VerifyAuditLog.Valid || c == nil || c.Valid || c.SignatureValid || c.Reason == nil {
		t.Fatalf("verify with an edited checkpoint: %s", res.Raw)
	}
	for name, bad := range map[string]map[string]any{
		"bad hash":      {"headHash": "xyz"},
		"other chain":   {"chainKey": e.other},
		"other version": {"version": "taskflow-audit-checkpoint/v9"},
		"position 0":    {"position": 0},
		"long key id":   {"keyId": strings.Repeat("k", 1000)},
	} {
		cp := maps.Clone(kept)
		maps.Copy(cp, bad)
		if _, res := run(e.owner, e.ws, cp); res.Code() != "BAD_USER_INPUT" {
			t.Errorf("%s: %s", name, res.Raw)
		}
	}
	if res := e.Post(t, e.member.Token, cpq, map[string]any{"ws": e.ws}); res.Code() != "FORBIDDEN" {
		t.Errorf("member reads the checkpoint: %s", res.Raw)
	}

	// The signing keys are public.
	res = e.Post(t, "", `{ auditSigningKeys { keyId publicKey algorithm current } }`, nil)
	var keys struct {
		AuditSigningKeys []struct {
			KeyID, PublicKey, Algorithm string
			Current                     bool
		}
	}
	if err := json.Unmarshal(res.Body.Data, &keys); err != nil || res.Code() != "" || len(keys.AuditSigningKeys) != 1 ||
		keys.AuditSigningKeys[0].KeyID != cp.KeyID || !keys.AuditSigningKeys[0].Current || keys.AuditSigningKeys[0].Algorithm != "Ed25519" ||
		keys.AuditSigningKeys[0].PublicKey != audit.EncodePublicKey(e.AuditKey.Public().(ed25519.PublicKey)) {
		t.Fatalf("signing keys: %s", res.Raw)
	}
}

// User.auditEvents (me { auditEvents }) lists the account's own events; another user's list is empty.
func TestMeAuditEventsAPI(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	ctx := context.Background()
	for _, u := range []apitest.User{e.owner, e.admin} {
		chain := "user:" + u.ID
		for _, action := range []string{"user.registered", "user.logged_in"} {
			e.at = e.at.Add(time.Minute)
			r := audit.Record{ID: uuid.NewString(), ChainKey: chain, ActorID: &u.ID, Action: action, EntityType: "user", EntityID: u.ID, OccurredAt: e.at, Metadata: map[string]any{}}
			if _, err := e.DB.Pool.Exec(ctx, `INSERT INTO audit_events (id, chain_key, actor_id, action, entity_type, entity_id, occurred_at)
				VALUES ($1,$2,$3,$4,$5,$6,$7)`, r.ID, chain, u.ID, action, "user", u.ID, e.at); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The owner reaches their own User as the actor of an event (and as me).
	e.event(t, e.ws, e.owner, "task.created", "t", nil)
	e.event(t, e.ws, e.admin, "task.created", "t", nil)
	userEvents := func(token string, after *string) (actor string, nodes []struct {
		Action, EntityID string
		WorkspaceID      *string
	}, next *string, raw []byte) {
		res := e.Post(t, token, `query($ws: ID!, $actor: ID!, $a: String) {
		  auditEvents(workspaceId: $ws, filter: {actorId: $actor}, first: 1) { nodes { actor { id
		    auditEvents(first: 1, after: $a) { nodes { action entityId workspaceId } pageInfo { hasNextPage endCursor } } } } } }`,
			map[string]any{"ws": e.ws, "actor": auditActorOf(token, e), "a": after})
		var out struct {
			AuditEvents struct {
				Nodes []struct {
					Actor struct {
						ID          string
						AuditEvents struct {
							Nodes []struct {
								Action, EntityID string
								WorkspaceID      *string
							}
							PageInfo struct {
								HasNextPage bool
								EndCursor   *string
							}
						}
					}
				}
			}
		}
		if err := json.Unmarshal(res.Body.Data, &out); err != nil || res.Code() != "" || len(out.AuditEvents.Nodes) != 1 {
			t.Fatalf("%s", res.Raw)
		}
		a := out.AuditEvents.Nodes[0].Actor
		if !a.AuditEvents.PageInfo.HasNextPage {
			next = nil
		} else {
			next = a.AuditEvents.PageInfo.EndCursor
		}
		return a.ID, a.AuditEvents.Nodes, next, res.Raw
	}
	id, nodes, next, raw := userEvents(e.owner.Token, nil)
	if id != e.owner.ID || len(nodes) != 1 || nodes[0].Action != "user.logged_in" || nodes[0].EntityID != e.owner.ID || nodes[0].WorkspaceID != nil || next == nil {
		t.Fatalf("own events: %s", raw)
	}
	_, nodes, next, raw = userEvents(e.owner.Token, next)
	if len(nodes) != 1 || nodes[0].Action != "user.registered" || next != nil {
		t.Fatalf("own events, page 2: %s", raw)
	}
	// The owner sees the admin as an actor, but not the admin's account events.
	res := e.Post(t, e.owner.Token, `query($ws: ID!, $actor: ID!) { auditEvents(workspaceId: $ws, filter: {actorId: $actor}) {
		nodes { actor { id auditEvents { nodes { action } pageInfo { hasNextPage } } } } } }`,
		map[string]any{"ws": e.ws, "actor": e.admin.ID})
	if res.Code() != "" || !strings.Contains(string(res.Raw), `"auditEvents":{"nodes":[],"pageInfo":{"hasNextPage":false}}`) {
		t.Fatalf("another user's account events: %s", res.Raw)
	}
}

// auditActorOf returns the id of the test user with token.
func auditActorOf(token string, e *auditEnv) string {
	for _, u := range []apitest.User{e.owner, e.admin, e.member, e.viewer, e.stranger} {
		if u.Token == token {
			return u.ID
		}
	}
	return ""
}

// exportURL builds an export URL.
func (e *auditEnv) export(t *testing.T, token string, params url.Values) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.Server.URL+"/audit/export?"+params.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// GET /audit/export streams NDJSON and CSV with the filters and access rule of
// auditEvents; errors before streaming are JSON with their status.
func TestAuditExport(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	var ids []string
	for i := range 700 { // more than one flush
		action := []string{"task.created", "task.updated", "comment.created", "member.added"}[i%4]
		ids = append(ids, e.event(t, e.ws, e.owner, action, fmt.Sprint("ent-", i%5), map[string]any{"i": i, "s": "a,\"b\"\nc"}))
	}
	e.event(t, e.other, e.stranger, "task.created", "x", nil)
	slices.Reverse(ids)
	e.Seal(t)
	late := e.event(t, e.ws, e.owner, "task.deleted", "late", nil) // not sealed yet
	ids = append([]string{late}, ids...)

	// NDJSON, everything.
	res := e.export(t, e.admin.Token, url.Values{"workspaceId": {e.ws}, "format": {"ndjson"}})
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var got []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var ev store.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if *ev.WorkspaceID != e.ws || ev.ActorID == nil || ev.IP == nil || ev.RequestID == nil {
			t.Fatalf("event %+v", ev)
		}
		if sealed := ev.ID != late; ev.Sealed != sealed || (ev.ChainPosition != nil) != sealed || (ev.Hash != nil) != sealed ||
			(ev.SealedAt != nil) != sealed || !sealed && !bytes.Contains(sc.Bytes(), []byte(`"sealedAt":null`)) ||
			sealed && *ev.ChainPosition != int64(700-len(got)+1) {
			t.Fatalf("event %d of the export: %+v", len(got), ev)
		}
		got = append(got, ev.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("ndjson: %d events, want %d", len(got), len(ids))
	}

	// CSV with filters.
	res = e.export(t, e.owner.Token, url.Values{"workspaceId": {e.ws}, "format": {"csv"},
		"actions": {"task.*,comment.created"}, "entityId": {"ent-2"}, "entityType": {"task"}, "actorId": {e.owner.ID},
		"since": {"2026-05-01T00:00:00Z"}, "until": {"2030-01-01T00:00:00Z"}})
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv status %d", res.StatusCode)
	}
	records, err := csv.NewReader(res.Body).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(records[0], []string{"id", "occurredAt", "workspaceId", "actorId", "action", "entityType", "entityId", "ip", "userAgent",
		"requestId", "metadata", "sealed", "chainPosition", "prevHash", "hash", "traceId", "sealedAt"}) {
		t.Fatalf("header %v", records[0])
	}
	var want []string
	for i := 699; i >= 0; i-- {
		if i%4 <= 1 && i%5 == 2 {
			want = append(want, ids[1+699-i]) // ids[0] is the late event
		}
	}
	var csvIDs []string
	for _, r := range records[1:] {
		csvIDs = append(csvIDs, r[0])
		if !strings.HasPrefix(r[4], "task.") || r[6] != "ent-2" {
			t.Fatalf("row %v", r)
		}
		if !strings.HasPrefix(r[8], "'=") {
			t.Errorf("formula user agent not defused: %q", r[8])
		}
		var meta map[string]any
		if err := json.Unmarshal([]byte(r[10]), &meta); err != nil || meta["s"] != "a,\"b\"\nc" {
			t.Errorf("metadata cell %q: %v", r[10], err)
		}
		if at, err := time.Parse(time.RFC3339Nano, r[16]); r[11] != "true" || r[12] == "" || len(r[13]) != 64 || len(r[14]) != 64 ||
			err != nil || at.Location() != time.UTC {
			t.Errorf("seal cells %q", r[11:])
		}
	}
	if !slices.Equal(csvIDs, want) || len(want) == 0 {
		t.Fatalf("csv: %d rows, want %d", len(csvIDs), len(want))
	}

	// An empty result is a valid empty file.
	res = e.export(t, e.owner.Token, url.Values{"workspaceId": {e.ws}, "actions": {"nothing.here"}})
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("empty export: %d %q", res.StatusCode, body)
	}

	// Errors.
	for _, c := range []struct {
		name   string
		token  string
		params url.Values
		status int
		code   string
	}{
		{"anonymous", "", url.Values{"workspaceId": {e.ws}}, 401, "UNAUTHENTICATED"},
		{"bad token", "nope", url.Values{"workspaceId": {e.ws}}, 401, "UNAUTHENTICATED"},
		{"member", e.member.Token, url.Values{"workspaceId": {e.ws}}, 403, "FORBIDDEN"},
		{"viewer", e.viewer.Token, url.Values{"workspaceId": {e.ws}, "format": {"csv"}}, 403, "FORBIDDEN"},
		{"stranger", e.stranger.Token, url.Values{"workspaceId": {e.ws}}, 404, "NOT_FOUND"},
		{"no such workspace", e.owner.Token, url.Values{"workspaceId": {uuid.NewString()}}, 404, "NOT_FOUND"},
		{"no workspace", e.owner.Token, url.Values{}, 400, "BAD_USER_INPUT"},
		{"bad format", e.owner.Token, url.Values{"workspaceId": {e.ws}, "format": {"xml"}}, 400, "BAD_USER_INPUT"},
		{"bad since", e.owner.Token, url.Values{"workspaceId": {e.ws}, "since": {"yesterday"}}, 400, "BAD_USER_INPUT"},
		{"bad action", e.owner.Token, url.Values{"workspaceId": {e.ws}, "actions": {"*.x"}}, 400, "BAD_USER_INPUT"},
	} {
		res := e.export(t, c.token, c.params)
		var body struct {
			Errors []struct {
				Message    string
				Extensions struct{ Code string }
			}
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if res.StatusCode != c.status || len(body.Errors) != 1 || body.Errors[0].Extensions.Code != c.code ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %+v", c.name, res.StatusCode, body)
		}
	}
}

// smallWrites is a listener whose connections have a small send buffer, so
// that a response the client does not read blocks its handler soon.
type smallWrites struct{ net.Listener }

func (l smallWrites) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// Exports whose clients do not read (a slow or stalled download) hold no
// connection of the pool while they wait: as many of them as the pool has
// connections leave the API answering.
func TestAuditExportsOfSlowReadersLeaveThePool(t *testing.T) {
	t.Parallel()
	const conns = 4
	db := store.New(storetest.PoolWith(t, func(c *pgxpool.Config) { c.MaxConns = conns }), nil)
	e := &auditEnv{Env: apitest.NewOn(t, db)}
	e.owner = e.NewUser(t, "Owner")
	e.ws = e.workspace(t, map[apitest.User]store.Role{e.owner: "OWNER"})
	// 2,000 events of 2 KB: 4 MB an export, far more than the sockets buffer.
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO audit_events (id, chain_key, workspace_id, actor_id, action,
		entity_type, entity_id, occurred_at, metadata)
		SELECT gen_random_uuid(), $1::text, $1::text::uuid, $2::uuid, 'task.created', 'task', 't' || i,
			'2026-05-01T00:00:00Z'::timestamptz + i * interval '1 second', jsonb_build_object('pad', repeat('x', 2000))
		FROM generate_series(1, 2000) i`, e.ws, e.owner.ID); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(e.Handler)
	srv.Listener = smallWrites{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	for range conns {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, _ = c.Write([]byte("GET /audit/export?workspaceId=" + e.ws + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
			e.owner.Token + "\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a failure guard
		status, err := bufio.NewReaderSize(c, 16).ReadString('\n')
		if err != nil || !strings.Contains(status, " 200 ") {
			t.Fatalf("export: %q %v", status, err)
		}
		// Read no more: the export blocks once the buffers are full.
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a failure guard
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/query",
		strings.NewReader(`{"query":"query($w: ID!) { workspace(id: $w) { name } }","variables":{"w":"`+e.ws+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.owner.Token)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("a query beside %d stalled exports: %v (pool: %d of %d connections acquired)", conns, err,
			db.Pool.Stat().AcquiredConns(), conns)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a query beside %d stalled exports: %d", conns, res.StatusCode)
	}
}
