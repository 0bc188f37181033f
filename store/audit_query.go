package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"taskflow/errs"

	"github.com/jackc/pgx/v5"
)

// AuditFilter narrows a listing of audit events; every set field must match (AND).
type AuditFilter struct {
	// Actions holds exact actions ("task.created") or prefixes ending in "*"
	// ("task.*"); an event matches if it matches any of them. Empty: all actions.
	Actions []string
	// ActorID keeps the events of this actor.
	ActorID *string
	// EntityType keeps the events of this kind of thing ("task", "member", ...).
	EntityType *string
	// EntityID keeps the events of this thing.
	EntityID *string
	// Since keeps events at or after this time (inclusive).
	Since *time.Time
	// Until keeps events before this time (exclusive).
	Until *time.Time
}

// MaxAuditFilterActions bounds filter.actions: the log has a few dozen actions,
// and every pattern is one more condition on every row read (20,000 prefixes
// took 1.6 s of one request's time before this bound).
const MaxAuditFilterActions = 50

// MaxAuditFilterActionLength bounds one action pattern, in bytes.
const MaxAuditFilterActionLength = 100

// MaxAuditFilterValueLength bounds filter.actorId, entityType and entityId,
// in bytes: an actor or an entity id is a uuid, an entity type a word, and a
// filter is kept for a subscription's life (auditEventAdded) and hashed into
// each cursor of its pages.
const MaxAuditFilterValueLength = 256

// normalized returns the filter in one canonical form (actions sorted without
// duplicates, times in UTC at microsecond precision, empty strings as unset), or
// a BAD_USER_INPUT error for more than MaxAuditFilterActions patterns, one
// longer than MaxAuditFilterActionLength, one that is not an action or a
// prefix ending in "*", or an actor, entity type or entity id longer than
// MaxAuditFilterValueLength.
func (f AuditFilter) normalized() (AuditFilter, error) {
	out := AuditFilter{}
	if len(f.Actions) > MaxAuditFilterActions {
		return out, errs.Errorf(errs.CodeBadUserInput, "filter.actions: at most %d actions or prefixes", MaxAuditFilterActions)
	}
	for _, a := range f.Actions {
		if len(a) > MaxAuditFilterActionLength {
			return out, errs.Errorf(errs.CodeBadUserInput, "filter.actions: an action is at most %d characters", MaxAuditFilterActionLength)
		}
		a = strings.TrimSpace(a)
		if a == "" {
			return out, errs.Errorf(errs.CodeBadUserInput, "filter.actions: an action must not be empty")
		}
		if i := strings.IndexByte(a, '*'); i >= 0 && i != len(a)-1 {
			return out, errs.Errorf(errs.CodeBadUserInput, "filter.actions: %q: * may only end a prefix, as in task.*", a)
		}
		if a == "*" {
			// Every action: the same as no action filter.
			return f.withoutActions().normalized()
		}
		out.Actions = append(out.Actions, a)
	}
	slices.Sort(out.Actions)
	out.Actions = slices.Compact(out.Actions)
	for name, p := range map[string]*string{"actorId": f.ActorID, "entityType": f.EntityType, "entityId": f.EntityID} {
		if p != nil && len(*p) > MaxAuditFilterValueLength {
			return out, errs.Errorf(errs.CodeBadUserInput, "filter.%s: at most %d characters", name, MaxAuditFilterValueLength)
		}
	}
	str := func(p *string) *string {
		if p == nil || strings.TrimSpace(*p) == "" {
			return nil
		}
		s := strings.TrimSpace(*p)
		return &s
	}
	tm := func(p *time.Time) *time.Time {
		if p == nil {
			return nil
		}
		t := p.UTC().Truncate(time.Microsecond)
		return &t
	}
	out.ActorID, out.EntityType, out.EntityID = str(f.ActorID), str(f.EntityType), str(f.EntityID)
	if out.ActorID != nil && validID(*out.ActorID) {
		// Ids are compared as uuids: give the canonical text to the scope.
		id, _ := canonicalUUID(out.ActorID)
		out.ActorID = id
	}
	out.Since, out.Until = tm(f.Since), tm(f.Until)
	return out, nil
}

// withoutActions returns f with no action filter.
func (f AuditFilter) withoutActions() AuditFilter {
	f.Actions = nil
	return f
}

// scopeKey returns a short hash of the normalized filter, which binds a cursor to
// the filter it was made with.
func (f AuditFilter) scopeKey() string {
	var b strings.Builder
	b.WriteString(strings.Join(f.Actions, "\x1f"))
	for _, p := range []*string{f.ActorID, f.EntityType, f.EntityID} {
		b.WriteByte('\x1e')
		if p != nil {
			b.WriteString("=" + *p)
		}
	}
	for _, t := range []*time.Time{f.Since, f.Until} {
		b.WriteByte('\x1e')
		if t != nil {
			b.WriteString(t.Format(time.RFC3339Nano))
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:12])
}

// auditWhere returns the SQL conditions and arguments of a normalized filter,
// numbering placeholders after the args already given. It reports false when no
// event can match (an actor id that is not an id).
func (f AuditFilter) auditWhere(args []any) (string, []any, bool) {
	var conds []string
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(f.Actions) > 0 {
		var exact, prefixes []string
		for _, a := range f.Actions {
			if p, ok := strings.CutSuffix(a, "*"); ok {
				prefixes = append(prefixes, likeEscape(p)+"%")
			} else {
				exact = append(exact, a)
			}
		}
		var ors []string
		if len(exact) == 1 {
			ors = append(ors, "action = "+arg(exact[0]))
		} else if len(exact) > 1 {
			ors = append(ors, "action = ANY("+arg(exact)+"::text[])")
		}
		for _, p := range prefixes {
			ors = append(ors, "action LIKE "+arg(p))
		}
		conds = append(conds, "("+strings.Join(ors, " OR ")+")")
	}
	if f.ActorID != nil {
		if !validID(*f.ActorID) {
			return "", nil, false
		}
		conds = append(conds, "actor_id = "+arg(*f.ActorID))
	}
	if f.EntityType != nil {
		conds = append(conds, "entity_type = "+arg(*f.EntityType))
	}
	if f.EntityID != nil {
		conds = append(conds, "entity_id = "+arg(*f.EntityID))
	}
	if f.Since != nil {
		conds = append(conds, "occurred_at >= "+arg(*f.Since))
	}
	if f.Until != nil {
		conds = append(conds, "occurred_at < "+arg(*f.Until))
	}
	if len(conds) == 0 {
		return "", args, true
	}
	return " AND " + strings.Join(conds, " AND "), args, true
}

// likeEscape escapes LIKE's wildcards (with the default escape character \).
func likeEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}

// auditEventColumns is the column list scanned by scanAuditEvent, selected
// from auditEventFrom.
const auditEventColumns = `id, workspace_id, actor_id, action, entity_type, entity_id, occurred_at,
	ip, user_agent, request_id, metadata, trace_id, s.position, s.prev_hash, s.hash, s.sealed_at`

// auditSealColumns are the columns of audit_seals that the LATERAL joins
// giving auditEventColumns select, as s.
const auditSealColumns = `position, prev_hash, hash, sealed_at`

// auditEventFrom is audit_events with each event's seal, if it has one (one
// probe of audit_seals' event_id index per event read): the seal of its id,
// its time and its chain, since the events' key is the time and the id (a
// row copying a sealed event's id is not sealed). Its columns other than
// audit_events' are those of auditSealColumns.
const auditEventFrom = `audit_events LEFT JOIN LATERAL
	(SELECT ` + auditSealColumns + ` FROM audit_seals WHERE event_id = audit_events.id
		AND occurred_at = audit_events.occurred_at AND chain_key = audit_events.chain_key) s ON true`

// scanAuditEvent scans the columns of auditEventColumns, then those of
// extra, if any.
func scanAuditEvent(row pgx.Row, extra ...any) (*AuditEvent, error) {
	var e AuditEvent
	var meta, prev, hash []byte
	if err := row.Scan(append([]any{&e.ID, &e.WorkspaceID, &e.ActorID, &e.Action, &e.EntityType, &e.EntityID,
		&e.OccurredAt, &e.IP, &e.UserAgent, &e.RequestID, &meta, &e.TraceID, &e.ChainPosition, &prev, &hash, &e.SealedAt}, extra...)...); err != nil {
		return nil, err
	}
	e.Sealed = e.ChainPosition != nil
	e.PrevHash, e.Hash = hexHash(prev), hexHash(hash)
	// jsonb's text has a space after each colon and comma: compact it once here.
	e.Metadata = RawJSON(compactJSONB(make([]byte, 0, len(meta)), meta))
	return &e, nil
}

// requireAuditReader checks that user may read the workspace's audit log: it
// returns UNAUTHENTICATED for no user, NOT_FOUND if the workspace does not exist
// or the user is not a member, and FORBIDDEN for a MEMBER or VIEWER.
func (db *DB) requireAuditReader(ctx context.Context, workspaceID string, user *User) error {
	_, err := db.requireRole(ctx, workspaceID, user, RoleAdmin, "workspace", auditReadAction)
	return err
}

// auditReadAction names reading the audit log in FORBIDDEN errors.
const auditReadAction = "read the audit log (OWNER or ADMIN only)"

// AuditScanLimit is the most events of a workspace one page of
// auditEvents looks at past its cursor to find the page's events (see
// AuditPage): a filter that matches few events cannot make one page read the
// whole log.
const AuditScanLimit = 10000

// AuditEvents is AuditPage without a hook: what the page looked at is not
// told.
func (db *DB) AuditEvents(ctx context.Context, user *User, workspaceID string, filter AuditFilter, first *int, after *string) (*AuditEventConnection, error) {
	return db.AuditPage(ctx, user, workspaceID, filter, first, after, nil, nil)
}

// AuditPage returns a page of the workspace's audit events matching filter,
// newest first by (occurred_at, id). The cursor after must come from the same
// workspace and filter.
//
// The page looks at the workspace's events past the cursor in that order,
// at most AuditScanLimit of them, and keeps those that match: the events of
// the filter's since/until window and, when the filter names them, of one
// thing (entityType and entityId together), else of one actor (actorId),
// else of one exact action (a single action without *), each read through
// its index; the filter's other conditions are checked on those. When it has
// looked at AuditScanLimit events and the log has another after them, the
// page is what it found (fewer than first, maybe none) with HasNextPage and
// an end cursor at the last event it looked at, so the next page goes on
// from there: no event is skipped or shown twice. (The scan reads that
// other event to know it is there, but does not look at it: it neither
// matches nor counts in examined.)
//
// When bound is not nil it is called before the page is read, once its
// arguments are checked and before the caller's role is, with the most
// events the page may look at: page.First+1 when the filter's index serves
// it whole, else AuditScanLimit; so that the caller can refuse a read it
// could not pay for. An error of bound is returned and nothing is read.
// When examined is not nil it is called, once the page is read and before
// it is returned, with how many events the page looked at (0 when it read
// nothing), so that the caller can charge for them; an error of examined is
// returned instead of the page.
//
// It returns UNAUTHENTICATED for no user, NOT_FOUND if the workspace does
// not exist or user is not a member of it, FORBIDDEN for a MEMBER or
// VIEWER, BAD_USER_INPUT for first outside 1..100, a malformed filter or a
// cursor of another list, and bound's or examined's error.
func (db *DB) AuditPage(ctx context.Context, user *User, workspaceID string, filter AuditFilter, first *int, after *string,
	bound, examined func(n int) error) (*AuditEventConnection, error) {
	f, ferr := filter.normalized()
	scope := "audit:" + strings.ToLower(workspaceID) + ":" + f.scopeKey()
	page, perr := NewPage(first, 50, after, scope)
	scan, rest := f.scanSplit()
	scanWhere, args, ok := scan.auditWhere([]any{workspaceID})
	restWhere, args, restOK := rest.auditWhere(args)
	if user == nil || !validID(workspaceID) || ferr != nil || perr != nil || !ok || !restOK {
		// The access error comes first, then the argument's.
		if err := db.requireAuditReader(ctx, workspaceID, user); err != nil {
			return nil, err
		}
		if ferr != nil {
			return nil, ferr
		}
		if perr != nil {
			return nil, perr
		}
		if examined != nil {
			if err := examined(0); err != nil {
				return nil, err
			}
		}
		return connection([]*AuditEvent{}, page, scope, auditKey), nil
	}
	if bound != nil {
		if err := bound(auditScanBound(restWhere, page)); err != nil {
			return nil, err
		}
	}
	// The role check and the page go in one round trip; the page is only
	// read when the role allows it.
	sql, args := auditScanSQL(`workspace_id = $1`+scanWhere, restWhere, "", args, page)
	batch := &pgx.Batch{}
	batch.Queue(`SELECT role FROM members WHERE workspace_id = $1 AND user_id = $2`, workspaceID, user.ID)
	batch.Queue(sql, args...)
	br := db.q(ctx).SendBatch(ctx, batch)
	defer br.Close()
	var role Role
	if err := br.QueryRow().Scan(&role); auditNoRows(err) {
		return nil, notFound("workspace")
	} else if err != nil {
		return nil, fmt.Errorf("audit events: role: %w", err)
	}
	if !role.AtLeast(RoleAdmin) {
		return nil, forbidden(auditReadAction)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("audit events: %w", err)
	}
	found, err := scanAuditScan(rows, page.First+1)
	if err != nil {
		return nil, err
	}
	if examined != nil {
		if err := examined(found.looked); err != nil {
			return nil, err
		}
	}
	c := connection(found.items, page, scope, auditKey)
	if len(found.items) <= page.First && found.cut {
		// Cut short: go on from the last event looked at.
		c.PageInfo.HasNextPage = true
		c.PageInfo.last = &Edge[AuditEvent]{Node: found.last, list: &c.list}
	}
	return c, nil
}

// scanSplit splits a normalized filter into the conditions a page's scan
// reads through an index (the time window and, when set, one thing, else one
// actor, else one exact action) and the rest, checked on the events the scan
// looks at (AuditPage).
func (f AuditFilter) scanSplit() (scan, rest AuditFilter) {
	scan = AuditFilter{Since: f.Since, Until: f.Until}
	rest = f
	rest.Since, rest.Until = nil, nil
	switch {
	case f.EntityType != nil && f.EntityID != nil:
		scan.EntityType, scan.EntityID = f.EntityType, f.EntityID
		rest.EntityType, rest.EntityID = nil, nil
	case f.ActorID != nil:
		scan.ActorID, rest.ActorID = f.ActorID, nil
	case len(f.Actions) == 1 && !strings.HasSuffix(f.Actions[0], "*"):
		scan.Actions, rest.Actions = f.Actions, nil
	}
	return scan, rest
}

// auditScanSQL returns the query of a page of AuditPage (or of
// EachAuditEvent) and its arguments: the events of scan (conditions on
// audit_events whose arguments are in args) past the page's cursor, newest
// first, at most AuditScanLimit of them, each numbered (rn) and marked when
// it matches rest (hit); it returns the first page.First+1 that match and,
// when fewer match, the last event it looked at, so that its number tells
// how many it looked at, and whether the log has another event after it
// (more: read, not looked at); see boundedScanSQL. Each event has its seal,
// of the seals that also meet seal (conditions on audit_seals, "" for
// none).
func auditScanSQL(scan, rest, seal string, args []any, page Page) (string, []any) {
	if page.After != nil {
		args = append(args, page.After.At, page.After.ID)
		scan += fmt.Sprintf(` AND (occurred_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	if rest == "" {
		// Every event the scan looks at matches: the page is the plain
		// keyset query, which reads page.First+1 events (an index scan, or a
		// top-N sort of a small log) where the numbered scan sorts up to
		// AuditScanLimit whole events before its window (measured
		// 2026-12-05 on bench/load's log of 403 events: 0.24 ms against
		// 0.79 ms, and twice the Postgres CPU a page of auditEvents). Its
		// rn is 0: scanAuditScan numbers the events as they come.
		return `SELECT ` + auditEventColumns + `, 0::int8, true, false FROM audit_events LEFT JOIN LATERAL
			(SELECT ` + auditSealColumns + ` FROM audit_seals WHERE event_id = audit_events.id
				AND occurred_at = audit_events.occurred_at AND chain_key = audit_events.chain_key` + seal + `) s ON true
			WHERE ` + scan + fmt.Sprintf(` ORDER BY occurred_at DESC, id DESC LIMIT %d`, page.First+1), args
	}
	return boundedScanSQL(auditEventColumns+`, scan.rn, scan.hit, scan.more`,
		`SELECT id, workspace_id, actor_id, action, entity_type, entity_id, occurred_at, ip, user_agent,
			request_id, metadata, trace_id, chain_key
		FROM audit_events WHERE `+scan,
		` LEFT JOIN LATERAL (SELECT `+auditSealColumns+` FROM audit_seals WHERE event_id = scan.id
			AND occurred_at = scan.occurred_at AND chain_key = scan.chain_key`+seal+`) s ON true`,
		`occurred_at DESC, id DESC`, `true`+rest, AuditScanLimit, page.First+1), args
}

// auditScan is what an auditScanSQL query found.
type auditScan struct {
	// items are the events that match.
	items []*AuditEvent
	// last is the last event looked at (nil for none).
	last *AuditEvent
	// looked is how many events the scan looked at.
	looked int
	// cut is set when the scan looked at AuditScanLimit events and the log
	// has another after them: a page that found too few goes on from last.
	cut bool
}

// auditScanBound is the most events the auditScanSQL query of rest (its
// conditions checked on the events looked at) and page may look at.
func auditScanBound(rest string, page Page) int {
	if rest == "" {
		return page.First + 1
	}
	return AuditScanLimit
}

// scanAuditScan reads the rows of an auditScanSQL query of at most limit
// events and closes rows.
func scanAuditScan(rows pgx.Rows, limit int) (auditScan, error) {
	defer rows.Close()
	out := auditScan{items: make([]*AuditEvent, 0, limit)}
	for rows.Next() {
		var rn int64
		var hit, more bool
		e, err := scanAuditEvent(rows, &rn, &hit, &more)
		if err != nil {
			return auditScan{}, fmt.Errorf("audit events: %w", err)
		}
		if hit {
			out.items = append(out.items, e)
		}
		if rn == 0 { // a plain keyset page: every event it read is one it looked at
			rn = int64(out.looked) + 1
		}
		out.last, out.looked = e, int(rn)
		out.cut = more && out.looked == AuditScanLimit
	}
	if err := rows.Err(); err != nil {
		return auditScan{}, fmt.Errorf("audit events: %w", err)
	}
	return out, nil
}

// UserAuditEvents returns a page of the account events (user.*) of the user
// account, newest first, to that user only: for anyone else (or nobody) the page
// is empty, because a User can be reached through other users' workspaces and
// the field must not fail there. It returns BAD_USER_INPUT for first outside
// 1..100 or a cursor of another list.
func (db *DB) UserAuditEvents(ctx context.Context, viewer *User, userID string, first *int, after *string) (*AuditEventConnection, error) {
	scope := "user-audit:" + strings.ToLower(userID)
	page, err := NewPage(first, 50, after, scope)
	if err != nil {
		return nil, err
	}
	if viewer == nil || viewer.ID != userID || !validID(userID) {
		return connection([]*AuditEvent{}, page, scope, auditKey), nil
	}
	return db.auditPage(ctx, `chain_key = $1`, []any{"user:" + strings.ToLower(userID)}, page, scope)
}

// auditKey is the keyset position of an event.
func auditKey(e *AuditEvent) (time.Time, string) { return e.OccurredAt, e.ID }

// auditPageSQL returns the keyset page query over audit_events with the
// conditions where (whose arguments are args) and its arguments.
func auditPageSQL(where string, args []any, page Page) (string, []any) {
	return auditKeysetSQL(auditEventFrom, where, args, page.After, page.First+1)
}

// auditKeysetSQL returns the query of at most limit events of from (a FROM
// list giving auditEventColumns) with the conditions where (whose arguments
// are args), newest first, after the position after (nil: from the newest),
// and its arguments.
func auditKeysetSQL(from, where string, args []any, after *cursor, limit int) (string, []any) {
	if after != nil {
		args = append(args, after.At, after.ID)
		where += fmt.Sprintf(` AND (occurred_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	// The limit is written in the statement, not bound: a generic plan of a
	// prepared statement with LIMIT $n does not know the page is small and may
	// pick a plan that reads far more than a page.
	return `SELECT ` + auditEventColumns + ` FROM ` + from + ` WHERE ` + where +
		fmt.Sprintf(` ORDER BY occurred_at DESC, id DESC LIMIT %d`, limit), args
}

// scanAuditPage reads the events of a query of at most limit of them and
// closes rows.
func scanAuditPage(rows pgx.Rows, limit int) ([]*AuditEvent, error) {
	defer rows.Close()
	items := make([]*AuditEvent, 0, limit)
	for rows.Next() {
		e, err := scanAuditEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("audit events: %w", err)
		}
		items = append(items, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit events: %w", err)
	}
	return items, nil
}

// auditPage runs one keyset page query over audit_events with the conditions
// where (whose arguments are args).
func (db *DB) auditPage(ctx context.Context, where string, args []any, page Page, scope string) (*AuditEventConnection, error) {
	sql, args := auditPageSQL(where, args, page)
	rows, err := db.q(ctx).Query(ctx, sql, args...)
	return auditConnection(rows, err, page, scope)
}

// auditConnection makes the page's connection from the rows of its query (err
// is the query's error).
func auditConnection(rows pgx.Rows, err error, page Page, scope string) (*AuditEventConnection, error) {
	if err != nil {
		return nil, fmt.Errorf("audit events: %w", err)
	}
	items, err := scanAuditPage(rows, page.First+1)
	if err != nil {
		return nil, err
	}
	return connection(items, page, scope, auditKey), nil
}

// AuditExportPageSize is how many events EachAuditEvent gives from one query.
const AuditExportPageSize = 100

// EachAuditEvent calls fn with every audit event of the workspace that matches
// filter, newest first. It reads them in keyset pages of AuditExportPageSize
// events, each query on a connection of its own that goes back to the pool
// before fn sees the page: a caller that writes to a slow or stalled client
// holds no connection while it waits. Each page's query looks at the
// workspace's events past the page's start as AuditPage does, at most
// AuditScanLimit of them, and keeps those that match; when it has looked at
// AuditScanLimit events, the log has another after them and it found fewer
// than a page, the page is what it found (maybe nothing) and the next page goes on from the last event it
// looked at: the walk is never cut short, a filter that matches few events
// takes more pages, and no event is given twice. The seals of the workspace's
// chain are read as they were when the first page was read (an event sealed
// since is given unsealed), so the sealed events given run from the chain's
// first position to the head it had then without a gap, as one snapshot
// would give them; an event committed while the pages are read may be given
// too, unsealed. It checks access and the filter before the first call, so
// an error returned before fn was called is the caller's to report as the
// answer. It returns UNAUTHENTICATED, NOT_FOUND or FORBIDDEN as AuditEvents
// does, BAD_USER_INPUT for a malformed filter, and the first error of fn,
// page or examined.
//
// When page is not nil it is called before each page is read, with the
// page's number from 0 and the most events the page may look at
// (AuditExportPageSize+1 when the filter's index serves it whole, else
// AuditScanLimit), holding no connection: the first call comes after
// access and the filter are checked, before anything else is read (none
// comes for a filter that can match nothing), so a caller can charge for a
// page before it is read, or wait. n matching events take at least
// max(1, ⌈n/AuditExportPageSize⌉) pages, and one more for every
// AuditScanLimit events looked at that filled no page when the log has
// another event after them: a page reads one event more, to know whether
// another follows. When examined is not nil it
// is called after each page is read, holding no connection, before fn sees
// the page's events, with how many events the page looked at, so that a
// caller can charge for them. An error of page or examined ends the walk and
// is returned.
func (db *DB) EachAuditEvent(ctx context.Context, user *User, workspaceID string, filter AuditFilter,
	page func(n, scan int) error, examined func(n int) error, fn func(*AuditEvent) error) error {
	if err := db.requireAuditReader(ctx, workspaceID, user); err != nil {
		return err
	}
	f, err := filter.normalized()
	if err != nil {
		return err
	}
	scan, rest := f.scanSplit()
	scanWhere, args, ok := scan.auditWhere([]any{workspaceID})
	restWhere, args, restOK := rest.auditWhere(args)
	if !ok || !restOK {
		return nil
	}
	if page == nil {
		page = func(int, int) error { return nil }
	}
	if examined == nil {
		examined = func(int) error { return nil }
	}
	bound := auditScanBound(restWhere, Page{First: AuditExportPageSize})
	if err := page(0, bound); err != nil {
		return err
	}
	chain := mustCanonical(workspaceID)
	var head int64
	if err := db.q(ctx).QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM audit_seals WHERE chain_key = $1`,
		chain).Scan(&head); err != nil {
		return fmt.Errorf("audit export: head: %w", err)
	}
	args = append(args, chain, head)
	seal := fmt.Sprintf(` AND (chain_key <> $%d OR position <= $%d)`, len(args)-1, len(args))
	var after *cursor
	for n := 0; ; n++ {
		if n > 0 {
			if err := page(n, bound); err != nil {
				return err
			}
		}
		// One event more than the page, to know whether another page
		// follows: an export whose last page is full reads no empty one.
		sql, pageArgs := auditScanSQL(`workspace_id = $1`+scanWhere, restWhere, seal, slices.Clone(args),
			Page{First: AuditExportPageSize, After: after})
		rows, err := db.q(ctx).Query(ctx, sql, pageArgs...)
		if err != nil {
			return fmt.Errorf("audit export: %w", err)
		}
		found, err := scanAuditScan(rows, AuditExportPageSize+1)
		if err != nil {
			return fmt.Errorf("audit export: %w", err)
		}
		if err := examined(found.looked); err != nil {
			return err
		}
		events, last := found.items, found.last
		more := len(events) > AuditExportPageSize
		events = events[:min(len(events), AuditExportPageSize)]
		for _, e := range events {
			if err := fn(e); err != nil {
				return err
			}
		}
		switch {
		case more:
			last = events[len(events)-1]
		case !found.cut:
			return nil
		}
		// A full page goes on after its last event; a page cut short by
		// the scan's bound after the last event it looked at.
		after = &cursor{At: last.OccurredAt, ID: last.ID}
	}
}

// errNoRows reports whether err is pgx's no-rows error.
func auditNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
