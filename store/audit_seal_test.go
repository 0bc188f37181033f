package store_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"taskflow/audit"
	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// chainSeals returns the event ids of a chain's seals by position, and
// fails unless the positions run 1..n with each seal linked to the one
// before it.
func chainSeals(t *testing.T, db *store.DB, chain string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT position, event_id::text, prev_hash, hash
		FROM audit_seals WHERE chain_key = $1 ORDER BY position`, chain)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	var prevHash []byte
	for rows.Next() {
		var pos int64
		var id string
		var p, h []byte
		if err := rows.Scan(&pos, &id, &p, &h); err != nil {
			t.Fatal(err)
		}
		if pos != int64(len(ids)+1) || string(p) != string(prevHash) {
			t.Fatalf("chain %s: seal %d at position %d, linked: %v", chain, len(ids)+1, pos, string(p) == string(prevHash))
		}
		ids, prevHash = append(ids, id), h
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// Sealers racing each other while writers append never give a position twice
// or skip one: every event of every chain is sealed exactly once.
func TestSealersRacing(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	owner := f.user("Owner")
	chains := []string{f.workspace(map[*store.User]store.Role{owner: store.RoleOwner}),
		f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})}
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := range 25 {
				ev := auditWsEvent(chains[(w+i)%2], owner, "task.created", fmt.Sprint(w, "-", i), nil)
				if i%5 == 0 {
					ev = audit.Event{ActorID: &owner.ID, Action: "user.logged_in", EntityID: owner.ID}
				}
				if err := f.tryAppend(ctx, ev, nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	stop := make(chan struct{})
	var busy, sealed atomic.Int64
	var sealers sync.WaitGroup
	for range 3 {
		sealers.Go(func() {
			s := &store.AuditSealer{DB: f.db, Batch: 7}
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := s.Round(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Busy {
					busy.Add(1)
				}
				sealed.Add(int64(r.Events))
			}
		})
	}
	writers.Wait()
	close(stop)
	sealers.Wait()
	f.seal()
	chains = append(chains, "user:"+owner.ID)
	total := 0
	for _, c := range chains {
		seals := chainSeals(t, f.db, c)
		events := f.chainIDs(c)
		if len(seals) != len(events) {
			t.Errorf("chain %s: %d seals for %d events", c, len(seals), len(events))
		}
		total += len(events)
		if v, err := f.db.VerifyChain(ctx, c); err != nil || !v.Valid || v.SealedEvents != len(events) || v.UnsealedEvents != 0 {
			t.Errorf("chain %s: %+v, %v", c, v, err)
		}
	}
	if total != 100 {
		t.Fatalf("%d events, want 100", total)
	}
	t.Logf("racing sealers sealed %d events; %d rounds found the cursor taken", sealed.Load(), busy.Load())
}

// killer is a pgx tracer that terminates the backend of a connection when it
// is about to send the batch that writes seals, as a crash of the sealer's
// instance or a cut connection would.
type killer struct {
	admin  *pgxpool.Pool
	killed atomic.Int64
}

func (k *killer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if len(d.Batch.QueuedQueries) > 0 && strings.Contains(d.Batch.QueuedQueries[0].SQL, "INSERT INTO audit_seals") {
		if _, err := k.admin.Exec(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, c.PgConn().PID()); err == nil {
			k.killed.Add(1)
		}
	}
	return ctx
}

func (k *killer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (k *killer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (k *killer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (k *killer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A sealer killed in the middle of a round leaves nothing behind (its
// transaction rolls back with the connection), and the next round, on any
// instance, seals from the same cursor. A sealer holding the cursor makes the
// others skip their round.
func TestSealerKilledMidRoundResumes(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	_, ws := f.ownedWorkspace(5)
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	k := &killer{admin: f.superuser()}
	cfg.ConnConfig.Tracer = k
	doomed, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer doomed.Close()
	dying := &store.AuditSealer{DB: store.New(doomed, nil)}
	deadline := time.Now().Add(time.Minute)
	for k.killed.Load() == 0 {
		// Rounds that find nothing yet (the horizon is the cluster's) write
		// nothing and are not killed.
		if _, err := dying.Round(ctx); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no round reached the writes in a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if k.killed.Load() != 1 {
		t.Fatalf("%d sealers killed", k.killed.Load())
	}
	var seals int
	var cur string
	if err := f.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM audit_seals), (SELECT tx_id || '/' || seq FROM audit_seal_cursor)`).
		Scan(&seals, &cur); err != nil || seals != 0 || cur != "0/0" {
		t.Fatalf("after the kill: %d seals, cursor %s (%v)", seals, cur, err)
	}
	if b, err := f.db.AuditSealBacklog(ctx); err != nil || b.Events != 5 || time.Since(b.Oldest) <= 0 || time.Since(b.Oldest) > time.Hour {
		t.Fatalf("backlog after the kill: %+v, %v", b, err)
	}

	// A sealer in the middle of a round holds the cursor: the others skip.
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM audit_seal_cursor FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	r, err := (&store.AuditSealer{DB: f.db}).Round(ctx)
	if err != nil || !r.Busy || r.Events != 0 {
		t.Fatalf("round while the cursor is held: %+v, %v", r, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	f.seal()
	if ids := chainSeals(t, f.db, ws); len(ids) != 5 {
		t.Fatalf("%d seals after resuming, want 5", len(ids))
	}
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || !v.Valid || v.SealedEvents != 5 {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	if b, err := f.db.AuditSealBacklog(ctx); err != nil || b.Events != 0 || !b.Oldest.IsZero() {
		t.Fatalf("backlog after sealing: %+v, %v", b, err)
	}
}

// A unit of work that committed audit events wakes its instance's sealer; one
// that recorded none, or rolled back, does not.
func TestUnitOfWorkWakesTheSealer(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx := t.Context()
	wake := store.SealWake(f.db)
	woken := func() bool {
		select {
		case <-wake:
			return true
		default:
			return false
		}
	}
	woken()
	if err := f.db.UnitOfWork(ctx, func(ctx context.Context) error {
		_, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "t"})
		return err
	}); err != nil || !woken() {
		t.Fatalf("after a task was created: woken false (%v)", err)
	}
	if err := f.db.UnitOfWork(ctx, func(ctx context.Context) error {
		_, err := f.db.Task(ctx, f.member, f.project)
		return errors.Join(err, errRollBack)
	}); err == nil || woken() {
		t.Fatalf("a unit of work that recorded nothing woke the sealer (%v)", err)
	}
	if err := f.db.UnitOfWork(ctx, func(ctx context.Context) error {
		if _, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: "t"}); err != nil {
			return err
		}
		return errRollBack
	}); err == nil || woken() {
		t.Fatalf("a rolled-back unit of work woke the sealer (%v)", err)
	}
	if err := f.db.RecordLoginFailure(ctx, nil, "unknown e-mail"); err != nil || !woken() {
		t.Fatalf("after a failed login was recorded: woken false (%v)", err)
	}
}

// The request path takes no chain lock and reads or writes no chain head: a
// createTask's unit of work is one round trip once the instance knows the
// project's workspace (two before: the workspace is read first), its audit
// event an insert in it, before COMMIT.
func TestCreateTaskTakesNoAuditLock(t *testing.T) {
	t.Parallel()
	db, pool, rec := tracedDB(t)
	ctx := t.Context()
	member := mkUser(t, db, "writer@example.com")
	var ws, project string
	if err := pool.QueryRow(ctx, `INSERT INTO workspaces (name) VALUES ('W') RETURNING id`).Scan(&ws); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'MEMBER')`, ws, member.ID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, 'P') RETURNING id`, ws).Scan(&project); err != nil {
		t.Fatal(err)
	}
	rec.take()
	for i, want := range []int{2, 1} {
		if _, err := db.CreateTask(ctx, member, store.NewTask{ProjectID: project, Title: "t"}); err != nil {
			t.Fatal(err)
		}
		trips := rec.take()
		for _, trip := range trips {
			if strings.Contains(trip, "audit_chain_heads") || strings.Contains(trip, "advisory") || strings.Contains(trip, "audit_seals") {
				t.Errorf("the request path sent %q", trip)
			}
		}
		last := trips[len(trips)-1]
		if len(trips) != want || !strings.Contains(last, "; insert into audit_events") || !strings.HasSuffix(last, "; commit") {
			t.Fatalf("task %d: round trips %q: want %d, the event's insert and COMMIT in the last", i+1, trips, want)
		}
	}
}

// Reads say which events are sealed: position, hashes (hex) linking each to
// the one before, nothing until the sealer came.
func TestAuditEventsSaySealed(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	owner, ws := f.ownedWorkspace(3)
	page := func() []*store.AuditEvent {
		c, err := f.db.AuditEvents(ctx, owner, ws, store.AuditFilter{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Nodes()
	}
	for _, e := range page() {
		if e.Sealed || e.ChainPosition != nil || e.Hash != nil || e.PrevHash != nil {
			t.Fatalf("unsealed event reads as sealed: %+v", e)
		}
	}
	f.seal()
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "late", nil), nil)
	events := page() // newest first
	if events[0].Sealed || events[0].Hash != nil {
		t.Fatalf("the late event reads as sealed: %+v", events[0])
	}
	for i, e := range events[1:] {
		want := int64(3 - i)
		if !e.Sealed || e.ChainPosition == nil || *e.ChainPosition != want || e.Hash == nil || len(*e.Hash) != 64 {
			t.Fatalf("event %d: %+v", i, e)
		}
		if want == 1 && e.PrevHash != nil || want > 1 && (e.PrevHash == nil || *e.PrevHash != *events[i+2].Hash) {
			t.Fatalf("event at position %d links to %v", want, e.PrevHash)
		}
	}
	var exported []*store.AuditEvent
	if err := f.db.EachAuditEvent(ctx, owner, ws, store.AuditFilter{}, nil, nil, func(e *store.AuditEvent) error {
		exported = append(exported, e)
		return nil
	}); err != nil || len(exported) != 4 || !exported[1].Sealed || *exported[1].Hash != *events[1].Hash {
		t.Fatalf("export: %d events, %v", len(exported), err)
	}
}

// An export reads its events in pages, and gives the seals of the workspace's
// chain as they were when it began: an event committed before and sealed
// during the export is given unsealed, and so is one committed during it
// (with a time the pages had not reached yet), so that the sealed events
// given run from position 1 without a gap, as a verifier requires.
func TestAuditExportSealsAsOfItsStart(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	const sealed = 250 // three pages
	owner, ws := f.ownedWorkspace(sealed)
	f.seal()
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "pending", nil), nil)
	var exported []*store.AuditEvent
	if err := f.db.EachAuditEvent(ctx, owner, ws, store.AuditFilter{}, nil, nil, func(e *store.AuditEvent) error {
		if len(exported) == 0 {
			// The next pages are read after this one: an event older than
			// every other, then a round of the sealer (pending, then late).
			f.append(ctx, auditWsEvent(ws, owner, "task.created", "late", nil),
				func() time.Time { return time.Now().Add(-time.Hour) })
			f.seal()
		}
		exported = append(exported, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var positions []int64
	for _, e := range exported {
		if e.EntityID == "pending" || e.EntityID == "late" {
			if e.Sealed || e.ChainPosition != nil || e.Hash != nil {
				t.Errorf("%s, sealed during the export, is given sealed: %+v", e.EntityID, e)
			}
			continue
		}
		if !e.Sealed || e.ChainPosition == nil {
			t.Fatalf("an event sealed before the export is given unsealed: %+v", e)
		}
		positions = append(positions, *e.ChainPosition)
	}
	slices.Sort(positions)
	for i, p := range positions {
		if p != int64(i+1) {
			t.Fatalf("sealed positions given: %d of them, the %dth is %d", len(positions), i+1, p)
		}
	}
	if len(positions) != sealed || exported[0].EntityID != "pending" {
		t.Fatalf("%d sealed events given, want %d; first %q", len(positions), sealed, exported[0].EntityID)
	}
}

// The sealer signs a checkpoint of a chain it advanced, at most every
// CheckpointEvery, and a sweep signs the head of a chain that went quiet
// after one. The checkpoint verifies with the public key and its message is
// the documented text.
func TestSealerSignsCheckpoints(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	owner := f.user("Owner")
	ws := f.workspace(map[*store.User]store.Role{owner: store.RoleOwner})
	key := audit.GenerateSigningKey()
	pub := key.Public().(ed25519.PublicKey)
	hourly := &store.AuditSealer{DB: f.db, Key: key, CheckpointEvery: time.Hour}
	if cp, err := f.db.LatestAuditCheckpoint(ctx, ws, []ed25519.PublicKey{pub}); err != nil || cp != nil {
		t.Fatalf("checkpoint of an empty chain: %+v, %v", cp, err)
	}
	// Two events in one transaction: one round seals both.
	if err := f.db.WithTx(ctx, func(ctx context.Context, tx store.Querier) error {
		return errors.Join(store.AppendAudit(ctx, f.db, tx, auditWsEvent(ws, owner, "task.created", "1", nil)),
			store.AppendAudit(ctx, f.db, tx, auditWsEvent(ws, owner, "task.created", "2", nil)))
	}); err != nil {
		t.Fatal(err)
	}
	storetest.SealAll(t, hourly)
	cp, err := f.db.LatestAuditCheckpoint(ctx, ws, []ed25519.PublicKey{pub})
	if err != nil || cp == nil || cp.Position != 2 || cp.ChainKey != ws || cp.KeyID != audit.KeyID(pub) {
		t.Fatalf("checkpoint = %+v, %v", cp, err)
	}
	if err := cp.Verify(pub); err != nil {
		t.Fatal(err)
	}
	v, err := f.db.VerifyChain(ctx, ws)
	if err != nil || v.HeadHash == nil || *v.HeadHash != cp.HeadHash || cp.PublicKey != audit.EncodePublicKey(pub) {
		t.Fatalf("the checkpoint is not of the head: %+v %+v, %v", cp, v, err)
	}
	wantMsg := "taskflow-audit-checkpoint/v1\n" + ws + "\n2\n" + cp.HeadHash + "\n" +
		cp.SignedAt.UTC().Format("2006-01-02T15:04:05.000000Z") + "\n"
	if cp.Message != wantMsg {
		t.Fatalf("message %q, want %q", cp.Message, wantMsg)
	}
	// Within the hour: sealed, not signed again.
	f.append(ctx, auditWsEvent(ws, owner, "task.created", "3", nil), nil)
	storetest.SealAll(t, hourly)
	if cp, err := f.db.LatestAuditCheckpoint(ctx, ws, []ed25519.PublicKey{pub}); err != nil || cp.Position != 2 {
		t.Fatalf("signed again within the hour: %+v, %v", cp, err)
	}
	// A sealer due to sweep signs the quiet chain's head.
	r, err := (&store.AuditSealer{DB: f.db, Key: key, CheckpointEvery: time.Nanosecond}).Round(ctx)
	if err != nil || r.Checkpoints != 1 {
		t.Fatalf("sweep: %+v, %v", r, err)
	}
	if cp, err := f.db.LatestAuditCheckpoint(ctx, ws, []ed25519.PublicKey{pub}); err != nil || cp.Position != 3 || cp.Verify(pub) != nil {
		t.Fatalf("after the sweep: %+v, %v", cp, err)
	}
	// With nothing new, nothing is signed.
	if r, err := (&store.AuditSealer{DB: f.db, Key: key, CheckpointEvery: time.Nanosecond}).Round(ctx); err != nil || r.Checkpoints != 0 {
		t.Fatalf("second sweep: %+v, %v", r, err)
	}
}

// A checkpoint a customer kept proves what verification alone cannot: that
// the newest events were not removed along with their seals and the head
// rewritten. A checkpoint whose signature fails (another key, an edited
// field) proves nothing and changes nothing.
func TestCheckpointDetectsTruncation(t *testing.T) {
	t.Parallel()
	f, ws, ids := sealedChain(t)
	ctx := context.Background()
	key := audit.GenerateSigningKey()
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	sealer := &store.AuditSealer{DB: f.db, Key: key}
	f.append(ctx, auditWsEvent(ws, nil, "task.created", "6", nil), nil)
	storetest.SealAll(t, &store.AuditSealer{DB: f.db}) // 6 events, no checkpoint yet
	var third []byte
	if err := f.db.Pool.QueryRow(ctx, `SELECT hash FROM audit_seals WHERE chain_key = $1 AND position = 3`, ws).Scan(&third); err != nil {
		t.Fatal(err)
	}
	early := audit.SignCheckpoint(key, ws, 3, third, time.Now())
	kept, err := sealer.Checkpoint(ctx, ws)
	if err != nil || kept == nil || kept.Position != 6 {
		t.Fatalf("checkpoint: %+v, %v", kept, err)
	}
	check := func(cp audit.Checkpoint, keys []ed25519.PublicKey) *store.AuditVerification {
		t.Helper()
		v, err := f.db.VerifyChainAgainst(ctx, ws, &cp, keys)
		if err != nil || v.Checkpoint == nil {
			t.Fatalf("verify: %+v, %v", v, err)
		}
		return v
	}
	if v := check(kept.Checkpoint, keys); !v.Valid || !v.Checkpoint.Valid || !v.Checkpoint.Extended || !v.Checkpoint.SignatureValid || v.Checkpoint.Reason != nil {
		t.Fatalf("intact log against its checkpoint: %+v %+v", v, v.Checkpoint)
	}

	// The superuser removes the two newest events and their seals, moves
	// the head back and removes the checkpoint the server stored of position
	// 6 (which a verification with the server's keys checks too:
	// TestVerifyFindsARewriteUnderAStoredCheckpoint).
	var lastID string
	if err := f.db.Pool.QueryRow(ctx, `SELECT event_id::text FROM audit_seals WHERE chain_key = $1 AND position = 6`, ws).Scan(&lastID); err != nil {
		t.Fatal(err)
	}
	tamperer{f.superuser()}.run(t,
		tamperStmt{`DELETE FROM audit_events WHERE id = $1`, []any{lastID}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{lastID}},
		tamperStmt{`DELETE FROM audit_events WHERE id = $1`, []any{ids[4]}},
		tamperStmt{`DELETE FROM audit_seals WHERE event_id = $1`, []any{ids[4]}},
		tamperStmt{`UPDATE audit_chain_heads h SET head_hash = s.hash, event_id = s.event_id, event_at = s.occurred_at, events = 4
			FROM audit_seals s WHERE s.chain_key = h.chain_key AND s.position = 4 AND h.chain_key = $1`, []any{ws}},
		tamperStmt{`DELETE FROM audit_checkpoints WHERE chain_key = $1 AND position = 6`, []any{ws}})
	if v, err := f.db.VerifyChain(ctx, ws); err != nil || !v.Valid || v.SealedEvents != 4 {
		t.Fatalf("without a checkpoint the truncation is not visible (that is what checkpoints are for): %+v, %v", v, err)
	}
	v := check(kept.Checkpoint, keys)
	if v.Valid || v.Checkpoint.Valid || v.Checkpoint.Extended || !v.Checkpoint.SignatureValid || v.Checkpoint.Reason == nil ||
		!strings.Contains(*v.Checkpoint.Reason, "no seal at position 6") {
		t.Fatalf("truncated log against the kept checkpoint: %+v %+v", v, v.Checkpoint)
	}
	// The log ends before the checkpoint: the newest event is reported, as
	// for a stored checkpoint (never valid: false with no event).
	if v.FirstInvalidEventID == nil || *v.FirstInvalidEventID != ids[3] {
		t.Fatalf("truncated log against the kept checkpoint: firstInvalidEventId %v, want the newest event left %s", str(v.FirstInvalidEventID), ids[3])
	}
	// An older checkpoint is still extended.
	if v := check(early, keys); !v.Valid || !v.Checkpoint.Valid {
		t.Fatalf("truncated log against a checkpoint before the cut: %+v %+v", v, v.Checkpoint)
	}
	// Signatures that fail prove nothing: the log's own validity stands.
	other := []ed25519.PublicKey{audit.GenerateSigningKey().Public().(ed25519.PublicKey)}
	edited := early
	edited.Position = 2
	for name, c := range map[string]struct {
		cp   audit.Checkpoint
		keys []ed25519.PublicKey
		want string
	}{
		"unknown key":  {kept.Checkpoint, other, "not one this server trusts"},
		"no keys":      {kept.Checkpoint, nil, "not one this server trusts"},
		"edited field": {edited, keys, "does not verify"},
	} {
		v := check(c.cp, c.keys)
		if v.Checkpoint.SignatureValid || v.Checkpoint.Valid || v.Checkpoint.Reason == nil || !strings.Contains(*v.Checkpoint.Reason, c.want) {
			t.Errorf("%s: %+v", name, v.Checkpoint)
		}
		if !v.Valid {
			t.Errorf("%s: a checkpoint that proves nothing made the log invalid", name)
		}
	}
	// Through the access-checked entry: another chain's checkpoint or a
	// malformed one is the caller's error.
	owner := f.user("Second owner")
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, 'OWNER')`, ws, owner.ID); err != nil {
		t.Fatal(err)
	}
	bad := kept.Checkpoint
	bad.ChainKey = "user:" + owner.ID
	if _, err := f.db.VerifyAuditLog(ctx, owner, ws, &bad, keys, nil); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("another chain's checkpoint: %v", err)
	}
	bad = kept.Checkpoint
	bad.HeadHash = "zz"
	if _, err := f.db.VerifyAuditLog(ctx, owner, ws, &bad, keys, nil); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Errorf("a malformed checkpoint: %v", err)
	}
	bad = kept.Checkpoint
	bad.ChainKey = ""
	if v, err := f.db.VerifyAuditLog(ctx, owner, strings.ToUpper(ws), &bad, keys, nil); err != nil || v.Valid || v.Checkpoint.Extended {
		t.Errorf("the kept checkpoint without its chain key: %+v, %v", v, err)
	}
}

// Account chains (user:<id>) and the anonymous chain of failed logins of no
// user are sealed like workspaces' chains.
func TestAccountChainsSeal(t *testing.T) {
	t.Parallel()
	f := newAuditFixture(t)
	ctx := context.Background()
	alice := f.user("Alice")
	f.append(ctx, audit.Event{ActorID: &alice.ID, Action: "user.registered", EntityID: alice.ID}, nil)
	if err := f.db.RecordLoginFailure(ctx, alice, "wrong password"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := f.db.RecordLoginFailure(ctx, nil, "unknown e-mail"); err != nil {
			t.Fatal(err)
		}
	}
	f.seal()
	for chain, n := range map[string]int{"user:" + alice.ID: 2, "anonymous": 2} {
		if ids := chainSeals(t, f.db, chain); len(ids) != n {
			t.Errorf("%s: %d seals, want %d", chain, len(ids), n)
		}
		if v, err := f.db.VerifyChain(ctx, chain); err != nil || !v.Valid || v.SealedEvents != n || v.HeadPosition == nil || *v.HeadPosition != int64(n) {
			t.Errorf("%s: %+v, %v", chain, v, err)
		}
	}
}

// Run seals what units of work commit, and returns when its context ends.
func TestSealerRun(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	key := audit.GenerateSigningKey()
	go func() {
		(&store.AuditSealer{DB: f.db, Key: key}).Run(ctx)
		close(done)
	}()
	for i := range 3 {
		if err := f.db.UnitOfWork(ctx, func(ctx context.Context) error {
			_, err := f.db.CreateTask(ctx, f.member, store.NewTask{ProjectID: f.project, Title: fmt.Sprint(i)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := f.db.VerifyChain(ctx, f.workspace)
		if err != nil || !v.Valid {
			t.Fatalf("verify: %+v, %v", v, err)
		}
		if v.SealedEvents == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not sealed after a minute: %+v", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cp, err := f.db.LatestAuditCheckpoint(ctx, f.workspace, []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}); err != nil || cp == nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	cancel()
	<-done
}

// str is *s, or "<nil>".
func str(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
