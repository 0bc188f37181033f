package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"taskflow/audit"
	"taskflow/errs"
)

// The write path. Every change is a unit of work (UnitOfWork) whose
// statements go to Postgres in as few round trips as they allow: a check and
// the writes it guards are deferred, so that a create is one round trip with
// its audit event, its idempotency record and COMMIT, and so is the delete of
// a task, a comment, an attachment or a webhook endpoint (deleteRecorded:
// Postgres makes the event's snapshot of the deleted row), the update of a
// task, a comment, a project or a webhook endpoint (its enabling, disabling
// and secret rotation too; updateRecorded: Postgres applies the change and
// makes the event's changes and the idempotency record's result), a
// member's role change or removal (memberChange, in members.go), an
// invitation's making, acceptance, refusal or revocation (invitations.go),
// and an attachment's (attachments.go).
// docs/decisions/2026-12-01-one-round-trip.md says why and what it costs.
//
// The helpers below are the whole vocabulary an entity needs:
//
//   - checkParent: the actor may write under a row (a project for a task, a
//     task for a comment, a workspace for a project), checked by Postgres in
//     the round trip of the write, with the row share-locked until COMMIT;
//   - lockRow: read a row for update with the actor's role (an update that
//     Go must compute reads it first);
//   - write: a deferred, guarded statement that must change so many rows;
//   - appendAudit: the event of the change, inserted with the commit;
//   - updateRecorded, deleteRecorded: check, change and record in one round
//     trip, the event's metadata made by Postgres, for the entities whose
//     change is nothing more.

// refusals maps the refusals a check's SQL can give (the text it passes to
// taskflow_check, migration 0009) to the errors they mean.
type refusals map[string]error

// refusalCode is the SQLSTATE taskflow_check raises.
const refusalCode = "TF000"

// refusal returns the error err means when it is a refusal of a check with
// refusals r, and err otherwise.
func (r refusals) refusal(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == refusalCode {
		if e, ok := r[pgErr.Message]; ok {
			return e
		}
		return fmt.Errorf("check refused with %q, which its caller does not know", pgErr.Message)
	}
	return err
}

// check queues a check: sql calls taskflow_check once, with NULL to let the
// unit of work go on or a key of r to refuse it (the transaction then aborts,
// nothing after the check applies, and the unit of work fails with r's error).
// It is sent with the writes it guards.
func (u *unitOfWork) check(sql string, args []any, r refusals) {
	u.tx.queueDeferred(deferred{sql: sql, args: args, read: func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return r.refusal(err)
	}})
}

// write queues a write that must change rows rows (-1: any number; a
// constraint it violates is the error mapError makes of it). Its SQL
// must apply nothing unless taskflow_ok() (an INSERT ... SELECT ... WHERE
// taskflow_ok(), an UPDATE or DELETE ... AND taskflow_ok()), so that a unit of
// work an idempotency claim refused changes nothing (migration 0009).
func (u *unitOfWork) write(what, sql string, args []any, rows int64) {
	tx := u.tx
	u.tx.queueDeferred(deferred{sql: sql, args: args, read: func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return mapError(fmt.Errorf("%s: %w", what, err))
		}
		if rows >= 0 && tag.RowsAffected() != rows && tx.err == nil {
			return fmt.Errorf("%s: %d rows changed, want %d", what, tag.RowsAffected(), rows)
		}
		return nil
	}})
}

// queueRow queues a statement that gives one row, which scan reads into out
// when the unit of work sends it (a constraint it violates is the error
// mapError makes of it; what names the statement in other errors).
func queueRow[T any](u *unitOfWork, what, sql string, args []any, scan func(pgx.Row, ...any) (*T, error), out *T) {
	u.tx.queueDeferred(deferred{sql: sql, args: args, read: func(br pgx.BatchResults) error {
		row, err := scan(br.QueryRow())
		if err != nil {
			return mapError(fmt.Errorf("%s: %w", what, err))
		}
		*out = *row
		return nil
	}})
}

// rolesAtLeast returns the roles at least min, as checks compare m.role
// with them: the ranking of roles stays in Go (Role.AtLeast).
func rolesAtLeast(min Role) []string {
	var out []string
	for _, r := range []Role{RoleOwner, RoleAdmin, RoleMember, RoleViewer} {
		if r.AtLeast(min) {
			out = append(out, string(r))
		}
	}
	return out
}

// parent names a table under whose rows things are created: its SQL name, the
// column that holds a row's workspace, and the lock a create takes on the row
// until it commits (KEY SHARE: the row cannot be deleted; SHARE: nor changed,
// when a column of it decides, as a project's archived_at does).
type parent struct {
	table, workspaceColumn, kind, lock string
	// ordered says the unit of work changes the row itself (table.parent)
	// and records it: its event must take its spine position in the order
	// the row lock lets the changes happen (checkParent).
	ordered bool
}

// The parents of the things TaskFlow creates.
var (
	parentWorkspace = parent{"workspaces", "id", "workspace", "FOR KEY SHARE", false}
	parentProject   = parent{"projects", "workspace_id", "project", "FOR SHARE", false}
	parentTask      = parent{"tasks", "workspace_id", "task", "FOR KEY SHARE", false}
)

// locked returns p with lock instead of its own.
func (p parent) locked(lock string) parent {
	p.lock = lock
	return p
}

// checkParent queues the check that actor may write under the row id of p: it
// exists and actor's role in its workspace is at least min (else NOT_FOUND, or
// FORBIDDEN naming action), and refuse (an SQL expression over the row as r,
// NULL to go on or a key of more) does not refuse. The row is locked (p.lock)
// until the unit of work ends, so it cannot be deleted (or archived) under the
// write. args are appended after the id, the actor's id and the roles ($4 on).
func (u *unitOfWork) checkParent(p parent, id string, actor *User, min Role, action, refuse string, more refusals, args ...any) {
	if refuse == "" {
		refuse = "NULL"
	}
	r := refusals{"not_found": notFound(p.kind), "forbidden": forbidden(action)}
	for k, v := range more {
		r[k] = v
	}
	if p.ordered {
		// The changes of one row must take their places in the event spine
		// (and so in the audit chain) in the order the row lock lets them
		// happen: each event's changes.from is the change before it. Spine
		// order is the order of transaction ids, and a transaction waiting
		// for the row lock could be given its id before the one that gets
		// the lock first (TestConcurrentTaskUpdatesChainTheirDiffs: 5 runs
		// in 40). Waiting first on a transaction-level advisory lock on the
		// row, which gives no id, makes the next changer of the row start
		// writing only once the one before it committed, so ids follow the
		// row's changes (docs/decisions/2026-12-01-event-spine.md, "Order").
		u.check(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, []any{"ordered:" + p.table + ":" + id}, nil)
	}
	u.check(`SELECT taskflow_check(CASE WHEN r.role IS NULL THEN 'not_found'
			WHEN NOT (r.role = ANY($3::text[])) THEN 'forbidden' ELSE `+refuse+` END)
		FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT x.*, m.role FROM `+p.table+` x
			LEFT JOIN members m ON m.workspace_id = x.`+p.workspaceColumn+` AND m.user_id = $2
			WHERE x.id = $1 `+p.lock+` OF x) r ON true`,
		append([]any{id, actor.ID, rolesAtLeast(min)}, args...), r)
}

// table describes an entity's table for lockRow, updateRecorded and deleteRecorded: its
// kind (in errors), its SQL name and alias, the columns scan reads (then the
// columns of its extra destinations), and how a row names its audit event.
type table[T any] struct {
	kind, name, alias, columns string
	// lock is the row lock of an update: FOR UPDATE, or FOR NO KEY UPDATE
	// when nothing references the row's key while it is changed.
	lock string
	scan func(row pgx.Row, extra ...any) (*T, error)
	// event returns the row's workspace and id, for its audit events.
	event func(*T) (workspaceID, id string)
	// withID returns a T with only its id set: the row an update returns
	// until its unit of work sends it (updateRecorded; withID and json are
	// nil and "" for the tables it does not update).
	withID func(id string) *T
	// json is the SQL of a row d as json.Marshal writes a T (a jsonb, equal
	// once decoded): the idempotency record of an update (updateRecorded).
	json string
}

// parent returns tb as the parent of its own row's checks (checkParent),
// locked with lock.
func (tb table[T]) parent(lock string) parent {
	return parent{tb.name, "workspace_id", tb.kind, lock, true}
}

// lockRow reads the row id of tb locked for update for the rest of the unit of
// work, with actor's role in its workspace, and checks that role is at least
// min. It returns NOT_FOUND if the row does not exist, the id is malformed or
// actor is not a member of its workspace, and FORBIDDEN (naming action) for a
// weaker role; the role is returned for checks of its own (an author's rights).
func lockRow[T any](ctx context.Context, tx Querier, tb table[T], actor *User, id string, min Role, action string) (*T, Role, error) {
	if actor == nil {
		return nil, "", errs.ErrUnauthenticated
	}
	if !validID(id) {
		return nil, "", notFound(tb.kind)
	}
	var role *Role
	row, err := tb.scan(tx.QueryRow(ctx, `SELECT `+tb.columns+`, m.role FROM `+tb.name+` `+tb.alias+
		joinRole(tb.alias, "$2")+` WHERE `+tb.alias+`.id = $1 `+tb.lock+` OF `+tb.alias, id, actor.ID), &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", notFound(tb.kind)
	}
	if err != nil {
		return nil, "", fmt.Errorf("lock %s: %w", tb.kind, err)
	}
	r, err := checkRole(role, min, tb.kind, action)
	if err != nil {
		return nil, "", err
	}
	return row, r, nil
}

// deleteRecorded deletes the row id of tb as actor in the round trip of the
// unit of work's commit: a check (the row exists, locked FOR UPDATE, and
// actor's role in its workspace is at least min: else NOT_FOUND, or
// FORBIDDEN naming what), then one statement that deletes the row and inserts
// its event (action), whose metadata Postgres makes from the deleted row with
// snapshot, an SQL expression over it as d that must give what
// audit.Snapshot gives (TestSnapshotsInSQLAreGos). refuse, more and args are
// checkParent's: a rule of the row beyond the role (a comment's author).
func deleteRecorded[T any](ctx context.Context, db *DB, tb table[T], actor *User, id string, min Role, what, action, snapshot,
	refuse string, more refusals, args ...any) error {
	return deleteChecked(ctx, db, tb, actor, id, action, snapshot, func(u *unitOfWork, id string) {
		u.checkParent(tb.parent("FOR UPDATE"), id, actor, min, what, refuse, more, args...)
	})
}

// deleteChecked is deleteRecorded with the checks that check queues (they
// must lock the row id FOR UPDATE): those of a row whose rules are not
// checkParent's. It returns UNAUTHENTICATED for no actor and NOT_FOUND for a
// malformed id, at once.
func deleteChecked[T any](ctx context.Context, db *DB, tb table[T], actor *User, id, action, snapshot string,
	check func(u *unitOfWork, id string)) error {
	if actor == nil {
		return errs.ErrUnauthenticated
	}
	if !validID(id) {
		return notFound(tb.kind)
	}
	return db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		rec, err := db.recordNow(ctx, actor, action)
		if err != nil {
			return err
		}
		check(u, id)
		event, params := recordedFrom(&rec, "d", "d.workspace_id", "d.id", snapshot, []any{id})
		u.write("delete "+tb.kind, `WITH d AS (DELETE FROM `+tb.name+` WHERE id = $1 AND taskflow_ok() RETURNING *)
			`+event, params, 1)
		return nil
	})
}

// recordNow returns the record of action by actor, occurring now, whose
// workspace, entity and metadata Postgres makes (recordedFrom), and wakes the
// sealer once the unit of work of ctx commits, as appendAudit's events do.
func (db *DB) recordNow(ctx context.Context, actor *User, action string) (audit.Record, error) {
	rec, err := newAuditRecord(ctx, audit.Event{ActorID: &actor.ID, Action: action})
	if err != nil {
		return rec, err
	}
	rec.OccurredAt = stamp(time.Now())
	db.onCommit(ctx, db.wakeSealer)
	return rec, nil
}

// recordedFrom returns the INSERT of rec's event made in SQL from the rows of
// from (a FROM list): its workspace is the SQL expression workspace, and so
// is its chain (the user's whom entity names when that is NULL: an account's
// event), its entity entity's, its metadata the SQL expression metadata,
// the rest rec's, as parameters appended to params (the statement's, which it
// returns).
func recordedFrom(rec *audit.Record, from, workspace, entity, metadata string, params []any) (string, []any) {
	cols := make([]string, len(auditRecordFields))
	recArgs := auditRecordArgs(rec)
	for i, f := range auditRecordFields {
		switch f.column {
		case "chain_key": // as audit.Event.ChainKey: the workspace's, else the user's
			cols[i] = "coalesce((" + workspace + ")::text, 'user:' || (" + entity + ")::text)"
		case "workspace_id":
			cols[i] = workspace
		case "entity_id":
			cols[i] = entity + "::text"
		case "metadata":
			cols[i] = metadata
		default:
			params = append(params, recArgs[i])
			cols[i] = fmt.Sprintf("$%d::%s", len(params), f.sqlType)
		}
	}
	return `INSERT INTO audit_events (` + auditRecordColumns("") + `) SELECT ` + strings.Join(cols, ", ") + ` FROM ` + from, params
}

// assign is a column an update sets (updateRecorded): its name, the name of
// its field in the entity's audit changes ("" for a column audit ignores: it
// changes along with the others, and is neither recorded nor compared), its
// new value as SQL (a format whose %s, if any, is the parameter of arg; it
// may read the row before as b, and the time of the change as $2), and
// whether it is a time (its changes are written as audit writes times).
type assign struct {
	column, field, value string
	arg                  any
	time                 bool
}

// setTo returns the assign of v, of SQL type sqlType, to column (field in
// audit changes).
func setTo(column, field, sqlType string, v any) assign {
	return assign{column: column, field: field, value: "%s::" + sqlType, arg: v, time: sqlType == "timestamptz"}
}

// updateRecorded changes the row id of tb as actor in the round trip of the
// unit of work's commit: a check (the row exists, locked with tb.lock, and
// actor's role in its workspace is at least min: else NOT_FOUND, or FORBIDDEN
// naming what; refuse, more and args are checkParent's), then one statement
// that sets the columns of sets, and updated_at, when that changes any of
// the recorded ones, and inserts action's event, whose metadata.changes
// Postgres makes from the rows before and after as audit.Changes makes them
// from the structs (TestUpdatesInSQLAreGos; a URL field, audit.OptionURL,
// redacted with its hash). An update that changes nothing
// recorded writes and records nothing; one whose sets are all ignored by
// audit (a secret's rotation) always applies and records its event with
// empty changes. It returns UNAUTHENTICATED for no actor and NOT_FOUND for a
// malformed id, at once, and the errors of the check when the unit of work
// commits.
//
// The row it returns is the row as committed, filled in when the unit of
// work of ctx sends its deferred statements (at its commit, or at its next
// statement that waits for an answer; outside a unit of work, before
// updateRecorded returns): until then only its id is set. An idempotency
// record saved in the unit of work with SaveIdempotencyValue of that row
// stores what Postgres makes of it (tb.json).
func updateRecorded[T any](ctx context.Context, db *DB, tb table[T], actor *User, id string, min Role, what, action string,
	sets []assign, refuse string, more refusals, args ...any) (*T, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	canon, err := canonicalID(id)
	if err != nil {
		return nil, notFound(tb.kind)
	}
	out := tb.withID(canon)
	err = db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		u := unitOfWorkFrom(ctx)
		rec, err := db.recordNow(ctx, actor, action)
		if err != nil {
			return err
		}
		now := rec.OccurredAt
		u.checkParent(tb.parent(tb.lock), canon, actor, min, what, refuse, more, args...)
		params := []any{canon, now}
		set := []string{"updated_at = $2"}
		var after, before, changes []string
		urls := audit.URLFields((*T)(nil)) // by type: no value needed
		for _, s := range sets {
			v := s.value
			if strings.Contains(v, "%s") {
				params = append(params, s.arg)
				v = fmt.Sprintf(v, fmt.Sprintf("$%d", len(params)))
			}
			set = append(set, s.column+" = "+v)
			if s.field == "" {
				continue
			}
			after, before = append(after, v), append(before, "b."+s.column)
			from, to := "b."+s.column, "a."+s.column
			recorded := `'` + s.field + `', jsonb_build_object('from', ` + from + `, 'to', ` + to + `)`
			switch {
			case s.time:
				recorded = `'` + s.field + `', jsonb_build_object('from', ` + rfc3339SQL(from) + `, 'to', ` + rfc3339SQL(to) + `)`
			case urls[s.field]: // as audit.Changes records an audit.OptionURL field
				recorded = `'` + s.field + `', jsonb_build_object('from', ` + audit.RedactURLSQL(from) + `, 'to', ` +
					audit.RedactURLSQL(to) + `), '` + s.field + audit.URLSha256Suffix + `', jsonb_build_object('from', ` +
					audit.URLSha256SQL(from) + `, 'to', ` + audit.URLSha256SQL(to) + `)`
			}
			changes = append(changes, `CASE WHEN a.`+s.column+` IS DISTINCT FROM b.`+s.column+
				` THEN jsonb_build_object(`+recorded+`) ELSE '{}' END`)
		}
		sql := `SELECT ` + tb.columns + ` FROM ` + tb.name + ` ` + tb.alias + ` WHERE id = $1`
		if len(sets) == 0 { // nothing to change: the row as it is
			params = params[:1]
		} else {
			changed, recorded := "true", `'{}'::jsonb`
			if len(changes) > 0 {
				changed = `ROW(` + strings.Join(after, ", ") + `) IS DISTINCT FROM ROW(` + strings.Join(before, ", ") + `)`
				recorded = strings.Join(changes, " || ")
			}
			var event string
			event, params = recordedFrom(&rec, "a, b", "a.workspace_id", "a.id",
				`jsonb_build_object('changes', `+recorded+`)`, params)
			sql = changeSQL(tb.name, "id = $1", "x.id = b.id", strings.Join(set, ", "), changed, event, tb.columns, tb.alias)
		}
		queueRow(u, "update "+tb.kind, sql, params, tb.scan, out)
		u.made(out, `(SELECT `+tb.json+` FROM `+tb.name+` d WHERE d.id = $5::uuid)`, canon)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// changeSQL returns the statement of a recorded update: the row of table
// that where selects, as b; its UPDATE (as x, the same row as b where same
// says) that sets set when changed, guarded by taskflow_ok(), returning the
// row after as a; event, an INSERT of the event from a and b (recordedFrom);
// and columns (over alias) of the row as the statement leaves it, a's or, when
// nothing changed, b's.
func changeSQL(table, where, same, set, changed, event, columns, alias string) string {
	return `WITH b AS (SELECT * FROM ` + table + ` WHERE ` + where + `),
		a AS (UPDATE ` + table + ` x SET ` + set + ` FROM b WHERE ` + same + ` AND taskflow_ok() AND ` + changed + `
			RETURNING x.*),
		e AS (` + event + `)
		SELECT ` + columns + ` FROM (SELECT * FROM a UNION ALL SELECT * FROM b WHERE NOT EXISTS (SELECT FROM a)) ` + alias
}

// ownerOrAdmin returns the refuse, more and args of checkParent (and
// deleteRecorded) for a row that only the user in its column owner (while
// MEMBER or more) or an ADMIN or OWNER may change: err for anyone else.
func ownerOrAdmin(owner string, err error) (string, refusals, []any) {
	return `CASE WHEN r.` + owner + ` <> $2 AND NOT (r.role = ANY($4::text[])) THEN 'not_owner' END`,
		refusals{"not_owner": err}, []any{rolesAtLeast(RoleAdmin)}
}

// rfc3339SQL returns the SQL expression of the timestamptz expression ts as
// audit.Snapshot writes a time: Go's time.RFC3339Nano in UTC (the fraction's
// trailing zeros dropped, and the dot with them), NULL for NULL.
func rfc3339SQL(ts string) string {
	return `regexp_replace(to_char(` + ts + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z'`
}

// timesSQL is the JSON of a row d's created_at and updated_at as
// json.Marshal writes them (createdAt, updatedAt), to add to a snapshot's.
var timesSQL = `jsonb_build_object('createdAt', ` + rfc3339SQL("d.created_at") + `, 'updatedAt', ` +
	rfc3339SQL("d.updated_at") + `)`

// exec runs a guarded write (see unitOfWork.write) that must change rows
// rows (-1: any number): deferred in the unit of work of ctx, at once in tx
// outside one.
func (db *DB) exec(ctx context.Context, tx Querier, what, sql string, args []any, rows int64) error {
	if u := unitOfWorkFrom(ctx); u != nil && u.tx == tx {
		u.write(what, sql, args, rows)
		return nil
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return mapError(fmt.Errorf("%s: %w", what, err))
	}
	if rows >= 0 && tag.RowsAffected() != rows {
		return fmt.Errorf("%s: %d rows changed, want %d", what, tag.RowsAffected(), rows)
	}
	return nil
}

// newID returns the id of a row created in Go: a UUIDv7, so that ids of rows
// created together sort together in their indexes.
func newID() string { return uuid.Must(uuid.NewV7()).String() }

// stamp returns t as Postgres stores it: in UTC, to the microsecond (pgx
// truncates the nanoseconds when it sends a time). The rows a create makes
// are known before Postgres stores them, so they must be what it will give
// back.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// stampPtr is stamp of *t, nil for nil.
func stampPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	s := stamp(*t)
	return &s
}

// workspaceCacheSize bounds workspaceOf's memory: 16,384 pairs of ids, about
// 2.5 MB.
const workspaceCacheSize = 16384

// workspaceOf returns the workspace of the row id of p (a project or a task; a
// workspace is its own), from memory when this instance saw it before, else
// read in tx (a statement of the unit of work, which BEGIN and the claim ahead
// join). A project or task never moves to another workspace, so what is
// remembered stays true; one that is deleted is refused by the check of the
// write that needs its workspace. It returns NOT_FOUND for a row that does
// not exist or a malformed id: whether the caller may see it is for that
// check to say, with the same error.
func (db *DB) workspaceOf(ctx context.Context, tx Querier, p parent, id string) (string, error) {
	canon, err := canonicalID(id)
	if err != nil {
		return "", notFound(p.kind)
	}
	if p == parentWorkspace {
		return canon, nil
	}
	key := p.table + ":" + canon
	if ws, ok := db.workspaces.GetIfPresent(key); ok {
		return ws, nil
	}
	var ws string
	err = tx.QueryRow(ctx, `SELECT `+p.workspaceColumn+` FROM `+p.table+` WHERE id = $1`, canon).Scan(&ws)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound(p.kind)
	}
	if err != nil {
		return "", fmt.Errorf("workspace of %s: %w", p.kind, err)
	}
	db.workspaces.Set(key, ws)
	return ws, nil
}

// canonicalID returns the canonical form (lower case, hyphenated) of an id
// validID accepts, as Postgres gives a uuid back.
func canonicalID(id string) (string, error) {
	if !validID(id) {
		return "", errors.New("not an id")
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// mustCanonical is canonicalID of an id checked already.
func mustCanonical(id string) string {
	c, err := canonicalID(id)
	if err != nil {
		panic(fmt.Sprintf("store: %q was checked as an id", id))
	}
	return c
}

// canonicalPtr is canonicalID of *id (nil for nil), with a BAD_USER_INPUT
// error for a malformed one.
func canonicalPtr(id *string) (*string, error) {
	if id == nil {
		return nil, nil
	}
	c, err := canonicalID(*id)
	if err != nil {
		return nil, errs.Errorf(errs.CodeBadUserInput, "the assignee must be a member of the workspace")
	}
	return &c, nil
}
