package live

import (
	"context"
	"strconv"
	"sync"
	"time"

	"taskflow/audit"
	"taskflow/errs"
	"taskflow/store"
)

// Kind is what a subscription streams.
type Kind int

// The kinds of subscription.
const (
	// TaskChanges: task.* and comment.* events of one project.
	TaskChanges Kind = iota + 1
	// WorkspaceChanges: project.* and the membership events of a workspace.
	WorkspaceChanges
	// AuditEvents: the workspace's audit events matching a filter (OWNER and
	// ADMIN).
	AuditEvents
)

// Spec is a subscription as a client asks for it.
type Spec struct {
	Kind Kind
	// User is the caller; TokenHash the SHA-256 of the bearer token it
	// authenticated with, checked again when the user logs out anywhere or
	// the instance's revocation feed learns the token changed.
	User      *store.User
	TokenHash []byte
	// WorkspaceID is the workspace of WorkspaceChanges and AuditEvents;
	// ProjectID the project of TaskChanges.
	WorkspaceID string
	ProjectID   string
	// Filter narrows AuditEvents as auditEvents' filter does.
	Filter store.AuditFilter
	// After is the cursor of the last event the client received; "" starts
	// with the events that commit from now on.
	After string
}

// Event is one event delivered to a subscription.
type Event struct {
	// Cursor is the event's position in the spine: the cursor of its item.
	Cursor store.SpineCursor
	Record *audit.Record
	// Route is where a task or comment event belongs (empty otherwise).
	Route store.SpineRoute
}

// catchUpBatch is the most events one catch-up read takes.
const catchUpBatch = 200

// CatchUpScan is the most events of the spine one catch-up read looks at,
// whether or not they concern the subscription: a read that keeps few of
// them goes on from where it stopped in the next, each paid for what it
// looked at (ScanPay), so that a cursor from long ago or a filter that
// matches nothing cannot make one read scan the whole log for nothing.
const CatchUpScan = 10000

// actions of each kind (patterns as in store.AuditFilter.Actions).
var (
	taskActions      = []string{"task.created", "task.updated", "task.deleted", "comment.created", "comment.updated", "comment.deleted"}
	workspaceActions = []string{"project.created", "project.updated", "project.archived", "member.joined", "member.added",
		"member.role_changed", "member.removed"}
	// authActions are the events that change what the subscriber may see.
	authActions = []string{"member.joined", "member.added", "member.role_changed", "member.removed", "user.logged_out"}
)

// subscriber is one open subscription.
type subscriber struct {
	h    *Hub
	kind Kind
	user *store.User
	tok  []byte
	ws   string
	proj string
	// match is AuditEvents' filter.
	match func(*audit.Record) bool
	// chains are the hash chains whose events concern the subscription: the
	// workspace's and the user's own (for logouts).
	chains []string
	// filter is the catch-up reads' filter: everything the subscription may
	// deliver or must react to.
	filter store.SpineFilter

	// role is the caller's role as of pos; authFrom is where the grant was
	// read: membership events before it are already in role.
	role     store.Role
	authFrom store.SpineCursor
	// away is set, while a resumed stream catches up, between an event that
	// took the caller's access away (removed from the workspace, or below
	// ADMIN for the audit log) and one that gave it back, or current (the
	// grant's Current) when none did (a member added back by SQL): the
	// events of that stretch are not delivered.
	away    bool
	current store.SpineCursor
	// expiry ends the subscription when its token expires; the hub moves it
	// when the token's expiry changed (under its lock once registered).
	expiry *time.Timer
	// pos is how far the subscription has read: every event up to it was
	// delivered if it matched.
	pos store.SpineCursor

	inbox chan *Event
	// lost is set (under the hub's lock) when the tailer had an event for a
	// full inbox and dropped it; lostSignal tells the subscriber, which then
	// reads the spine itself again (resync).
	lost       bool
	lostSignal chan struct{}
	// send hands an event to the client's stream; it returns false when
	// the client went away first (or stop closed). done closes the stream.
	send     func(ctx context.Context, stop <-chan struct{}, e *Event) bool
	done     func()
	stop     chan struct{}
	failOnce sync.Once
	failErr  *errs.Error
}

// Subscribe checks that the caller may have the subscription (the token, the
// membership, the role, a cursor this API made and no later than now, the
// per-user cap) and starts it. The channel delivers its events as items made
// by item, in spine order, from after the cursor given (or from now), and is
// closed when the stream ends: when ctx ends (the client went away), or with
// an error recorded for WithEnd's holder. It returns UNAUTHENTICATED,
// NOT_FOUND, FORBIDDEN, BAD_USER_INPUT (a bad cursor or filter),
// RATE_LIMITED (the cap) or STREAM_INTERRUPTED (the server is closing).
func Subscribe[T any](ctx context.Context, h *Hub, spec Spec, item func(*Event) T) (<-chan T, error) {
	ch := make(chan T)
	send := func(ctx context.Context, stop <-chan struct{}, e *Event) bool {
		select {
		case ch <- item(e):
			return true
		case <-stop:
		case <-ctx.Done():
		}
		return false
	}
	if err := h.subscribe(ctx, spec, send, func() { close(ch) }); err != nil {
		return nil, err
	}
	return ch, nil
}

// subscribe is Subscribe with the stream given as send and done.
func (h *Hub) subscribe(ctx context.Context, spec Spec, send func(context.Context, <-chan struct{}, *Event) bool, done func()) error {
	if spec.User == nil || len(spec.TokenHash) == 0 {
		return errs.ErrUnauthenticated
	}
	s := &subscriber{h: h, kind: spec.Kind, user: spec.User, tok: spec.TokenHash, ws: spec.WorkspaceID, proj: spec.ProjectID,
		inbox: make(chan *Event, h.o.Buffer), lostSignal: make(chan struct{}, 1), send: send, done: done, stop: make(chan struct{})}
	var after *store.SpineCursor
	if spec.After != "" {
		c, err := store.ParseSpineCursor(spec.After)
		if err != nil {
			return err
		}
		after = &c
	}
	var actions []string
	switch spec.Kind {
	case TaskChanges:
		actions = taskActions
	case WorkspaceChanges:
		actions = workspaceActions
	case AuditEvents:
		m, err := spec.Filter.AuditMatcher()
		if err != nil {
			return err
		}
		s.match = m
	default:
		return errs.Errorf(errs.CodeBadUserInput, "unknown subscription")
	}
	read := time.Now() // the token's read, for TokenChangedSince
	grant, err := h.o.DB.LiveAccess(ctx, spec.User.ID, spec.TokenHash, spec.WorkspaceID, spec.ProjectID)
	if err != nil {
		return err
	}
	if spec.Kind == AuditEvents && !grant.Role.AtLeast(store.RoleAdmin) {
		return errs.Errorf(errs.CodeForbidden, "your role does not allow you to read the audit log")
	}
	if after != nil && grant.Head.Before(*after) {
		return errs.Errorf(errs.CodeBadUserInput, "not an event cursor: use one this API returned")
	}
	s.ws, s.role = grant.WorkspaceID, grant.Role
	s.authFrom, s.current = grant.Head, grant.Current
	s.pos = grant.Head
	if after != nil {
		s.pos = *after
	}
	if spec.Kind == TaskChanges {
		actions = append(append([]string(nil), actions...), authActions...)
	} else if spec.Kind == WorkspaceChanges {
		actions = append(append([]string(nil), actions...), "user.logged_out")
	}
	s.chains = []string{s.ws, "user:" + s.user.ID}
	s.filter = store.SpineFilter{ChainKeys: s.chains, Actions: actions, MaxScan: CatchUpScan}
	if spec.Kind == AuditEvents {
		// The audit filter in the read's own SQL, with the events that change
		// what the caller may see: what it looks at and keeps nothing of is
		// charged by the scan, not read into the instance event by event.
		f := spec.Filter
		s.filter.Audit, s.filter.Actions = &f, authActions
	}
	if err := h.start(ctx); err != nil {
		return err
	}
	s.expiry = time.AfterFunc(time.Until(grant.TokenExpires), func() {
		s.fail(errs.Errorf(errs.CodeUnauthenticated, "your token has expired: sign in again"))
	})
	if err := h.register(s); err != nil {
		s.expiry.Stop()
		return err
	}
	// A change the revocation feed learnt between the read and the
	// registration reached no subscriber: check the token now.
	if h.o.DB.TokenChangedSince(s.tok, read) {
		h.tokensChanged([][]byte{s.tok})
	}
	go s.run(ctx)
	return nil
}

// fail ends the subscription with err (the first reason wins), also while
// it waits to send to a slow client.
func (s *subscriber) fail(err *errs.Error) {
	s.failOnce.Do(func() {
		s.failErr = err
		close(s.stop)
	})
}

// offer queues an event of the tailer if it concerns the subscription. When
// the queue is full (the client reads more slowly than events come, or a
// catch-up is long) the event is dropped (counted once per overflow) and
// the subscriber told: it reads
// what it missed from the spine itself (resync), at its client's pace, so a
// slow client holds no more than its queue and loses nothing. Called under
// the hub's lock.
func (s *subscriber) offer(e *Event) {
	if s.lost || !s.concerns(e) {
		return
	}
	select {
	case s.inbox <- e:
	default:
		s.lost = true
		s.h.m.resyncs.Inc()
		select {
		case s.lostSignal <- struct{}{}:
		default:
		}
	}
}

// resync empties the queue and clears lost, under the hub's lock: from then
// on the tailer queues every event again, and a catch-up read after this
// covers all that was dropped or emptied (they are at or before the
// tailer's position now).
func (s *subscriber) resync() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.lost = false
	for {
		select {
		case <-s.inbox:
		case <-s.lostSignal:
		default:
			return
		}
	}
}

// concerns reports whether the subscription delivers e or reacts to it.
func (s *subscriber) concerns(e *Event) bool { return s.authEvent(e) || s.matches(e) }

// authEvent reports whether e changes what the caller may see: a change of
// its membership of the workspace, or a logout of the user.
func (s *subscriber) authEvent(e *Event) bool {
	r := e.Record
	switch r.Action {
	case "member.joined", "member.added", "member.role_changed", "member.removed":
		return r.ChainKey == s.ws && r.EntityID == s.user.ID
	case "user.logged_out":
		return r.ChainKey == "user:"+s.user.ID
	}
	return false
}

// matches reports whether the subscription delivers e.
func (s *subscriber) matches(e *Event) bool {
	r := e.Record
	if r.ChainKey != s.ws {
		return false
	}
	switch s.kind {
	case TaskChanges:
		return e.Route.ProjectID == s.proj && store.ActionMatches(taskActions, r.Action)
	case WorkspaceChanges:
		return store.ActionMatches(workspaceActions, r.Action)
	case AuditEvents:
		return s.match(r)
	}
	return false
}

// run delivers the subscription's events until it ends, then closes out and
// records why it ended (nothing when the client went away).
func (s *subscriber) run(ctx context.Context) {
	defer s.done()
	defer s.expiry.Stop() // after remove: the hub moves it no more
	defer s.h.remove(s)
	err := s.loop(ctx)
	code := "closed"
	if err != nil {
		code = string(err.Code)
		ext := map[string]any{"cursor": s.pos.String()}
		for k, v := range err.Extensions {
			ext[k] = v
		}
		endStream(ctx, &errs.Error{Code: err.Code, Message: err.Message, Extensions: ext})
	}
	s.h.m.ended.WithLabelValues(code).Inc()
}

// loop catches up from pos, then delivers the tailer's events past it; when
// the tailer dropped events for a full queue it catches up again.
func (s *subscriber) loop(ctx context.Context) *errs.Error {
	for {
		if err := s.catchUp(ctx); err != nil {
			return ended(err)
		}
	live:
		for {
			select {
			case e := <-s.inbox:
				if !s.pos.Before(e.Cursor) {
					continue // read by the catch-up already
				}
				if err := s.handle(ctx, e); err != nil {
					return ended(err)
				}
			case <-s.lostSignal:
				s.resync()
				break live
			case <-s.stop:
				return s.failErr
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// catchUp reads the spine from pos with the subscription's filter and
// handles what it finds, until a read comes back short without being cut
// (CatchUpScan): it has read everything committed before its last snapshot.
// Each read is charged for the events it looked at (ScanPay) before its
// events are handled, and asked for first when the budget cannot pay for
// all it may look at. A subscription ended
// meanwhile (fail) stops it before its next read, even when nothing it read
// was sent (a send would have seen the end).
func (s *subscriber) catchUp(ctx context.Context) *errs.Error {
	for {
		select {
		case <-s.stop: // ended (a revoked token, an expiry) while nothing matched
			return s.failErr
		default:
		}
		// Refused before it is read when the budget cannot pay what it may
		// look at: the stream ends at pos, as when the charge is refused.
		if err := affordScan(ctx, s.filter.MaxScan); err != nil {
			return err
		}
		read, err := s.h.o.DB.ReadSpine(ctx, s.pos, s.filter, catchUpBatch)
		if err == nil {
			// Paid before anything it read is handled: refused, the stream
			// ends at pos, and a resume reads (and pays for) it again.
			if err := chargeScan(ctx, read.Examined); err != nil {
				return err
			}
			var events []*Event
			events, err = eventsOf(ctx, s.h.o.DB, read.Events)
			for _, e := range events {
				if err := s.handle(ctx, e); err != nil {
					return err
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return errGone
			}
			s.h.o.Log.ErrorContext(ctx, "live: catch-up read", "err", err)
			return interrupted("the server could not read the events: subscribe again with the last cursor you received")
		}
		s.pos = read.Next
		if len(read.Events) < catchUpBatch && !read.Cut {
			return nil
		}
	}
}

// ended maps the error of handle: nothing when the client went away.
func ended(err *errs.Error) *errs.Error {
	if err == errGone {
		return nil
	}
	return err
}

// errGone is handle's answer when the client went away.
var errGone = &errs.Error{Code: "", Message: "gone"}

// handle applies an event: a membership change or logout of the caller first
// changes what it may see (ending the stream when it may see nothing more),
// then a matching event is charged to the caller's budget and delivered.
// pos moves past e once it is handled.
func (s *subscriber) handle(ctx context.Context, e *Event) *errs.Error {
	if s.away && !e.Cursor.Before(s.current) {
		s.away = false // the grant holds from current on
	}
	if s.authEvent(e) {
		if !e.Cursor.Before(s.authFrom) {
			if err := s.authorize(ctx, e); err != nil {
				return err
			}
		}
		s.access(e)
	}
	if s.matches(e) && !s.away {
		if err := charge(ctx); err != nil {
			return err
		}
		if !s.send(ctx, s.stop, e) {
			select {
			case <-s.stop:
				return s.failErr
			default:
				return errGone
			}
		}
		s.h.m.delivered.Inc()
		s.h.m.lag.Observe(time.Since(e.Record.OccurredAt).Seconds())
	}
	s.pos = e.Cursor
	return nil
}

// authorize applies a change of the caller's membership or a logout.
func (s *subscriber) authorize(ctx context.Context, e *Event) *errs.Error {
	r := e.Record
	switch r.Action {
	case "member.removed":
		return errs.Errorf(errs.CodeNotFound, "workspace not found: you are no longer a member")
	case "member.joined", "member.added", "member.role_changed":
		if role, ok := roleAfter(r); ok {
			s.role = role
		}
	case "user.logged_out":
		valid, err := s.h.o.DB.TokensExpire(ctx, [][]byte{s.tok})
		if err != nil {
			if ctx.Err() != nil {
				return errGone
			}
			s.h.o.Log.ErrorContext(ctx, "live: token check", "err", err)
			return interrupted("the server could not check your token: subscribe again with the last cursor you received")
		}
		if len(valid) == 0 {
			return errs.Errorf(errs.CodeUnauthenticated, "your token was revoked (logout): sign in again")
		}
	}
	if s.kind == AuditEvents && !s.role.AtLeast(store.RoleAdmin) {
		return errs.Errorf(errs.CodeForbidden, "your role does not allow you to read the audit log")
	}
	return nil
}

// roleAfter returns the caller's role after a membership event r that sets
// one (joined, added, role changed).
func roleAfter(r *audit.Record) (store.Role, bool) {
	if r.Action == "member.role_changed" {
		ch, _ := r.Metadata["changes"].(map[string]any)
		role, _ := ch["role"].(map[string]any)
		to, ok := role["to"].(string)
		return store.Role(to), ok
	}
	role, ok := r.Metadata["role"].(string)
	return store.Role(role), ok
}

// access applies a membership event of the caller to away: whether the
// caller could see what follows it, until the next such event (a removal
// past authFrom ended the stream already, in authorize). The role stays the
// grant's, moved by authorize. A logout changes nothing here.
func (s *subscriber) access(e *Event) {
	r := e.Record
	switch r.Action {
	case "member.removed":
		s.away = true
	case "member.joined", "member.added", "member.role_changed":
		role, ok := roleAfter(r)
		s.away = s.kind == AuditEvents && (!ok || !role.AtLeast(store.RoleAdmin))
	}
}

// eventsOf returns the events of a read with the routes of their task and
// comment events.
func eventsOf(ctx context.Context, db *store.DB, read []store.SpineEvent) ([]*Event, error) {
	if len(read) == 0 {
		return nil, nil
	}
	routes, err := db.SpineRoutes(ctx, read)
	if err != nil {
		return nil, err
	}
	out := make([]*Event, len(read))
	for i := range read {
		out[i] = &Event{Cursor: read[i].Cursor, Record: &read[i].Record, Route: routes[read[i].Record.ID]}
	}
	return out, nil
}

func itoa(n int) string { return strconv.Itoa(n) }
