package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/maypok86/otter/v2"
)

// What an instance remembers of bearer tokens, and the revocation feed that
// lets it go on trusting what it remembers.
//
// A read of a token (its user and how long it stays valid, or that it is
// unknown, expired or revoked) is trusted for SessionTTL on its own. Past
// that it is trusted, up to SessionMaxAge, only while the instance's
// revocation feed is current: RunRevocationFeed reads, every RevocationPoll,
// which tokens changed (token_changes, written by triggers on tokens and
// users) since its last read, and a read older than the change it learnt of
// is repeated. A token revoked anywhere is thus refused by every instance
// within a second, and a busy instance reads a token from Postgres once in
// SessionMaxAge instead of once in SessionTTL.
//
// Why the feed misses no change. Each poll runs one statement, so one
// snapshot S_k: it returns xmin(S_k), the oldest transaction still running
// in S_k (every older one has finished), and the token_changes rows visible
// in S_k whose changed_xid (the writing transaction's id) is at least
// xmin(S_{k-1}), the previous poll's. Transaction ids are assigned before a
// transaction commits, in any order, which is why the cursor is a horizon
// and not the largest id seen. Take a change committed by transaction X, and
// S_k the first poll's snapshot that sees it. If X < xmin(S_{k-1}), X had
// finished in S_{k-1}, so S_{k-1} saw it: a contradiction. So X >=
// xmin(S_{k-1}) and poll k returns it. The first poll returns no rows, only
// its xmin; a read sent after it returned sees whatever committed before
// that poll, and only such reads are trusted past SessionTTL (origin).
// A long transaction holds the horizon back: polls then return the same
// rows again (they are idempotent), never fewer, so a stalled horizon costs
// a larger read and no delay.
//
// Why a read learnt to be stale is never trusted. The feed records when it
// learnt of a token's change (after its poll returned, so after the change
// committed); a read of that token sent before then is repeated, and one
// sent after saw the change. A read that was in flight across the change
// and stored after the feed learnt of it is caught the same way: its send
// time comes before.

// SessionTTL is how long an instance trusts what it read of a bearer token
// on its own. Past SessionTTL it trusts the read only while its revocation
// feed is current (RunRevocationFeed); an instance without a current feed
// (Postgres unreachable, or a store without the feed running) refuses a
// token revoked through another instance at most SessionTTL after, within
// one second.
const SessionTTL = 900 * time.Millisecond

// SessionMaxAge is the longest an instance trusts what it read of a bearer
// token: with its revocation feed current, a token is read from Postgres
// once in SessionMaxAge, or again after it changed.
const SessionMaxAge = 10 * time.Minute

// RevocationPoll is how often RunRevocationFeed asks Postgres which tokens
// changed.
const RevocationPoll = 200 * time.Millisecond

// revocationCurrent is how long after a successful poll began the feed is
// current: every change committed before it began is known once it
// returned, so a change committed anywhere is acted on within this.
const revocationCurrent = 800 * time.Millisecond

// tokenChangesKept is how long rows of token_changes are kept (far longer
// than SessionMaxAge: an older change concerns no read still trusted).
const tokenChangesKept = 24 * time.Hour

// sessionCacheSize bounds how many tokens an instance remembers (about 3 MB).
const sessionCacheSize = 10000

// session is what an instance read of one token.
type session struct {
	user    *User     // nil: unknown, expired or revoked
	expires time.Time // when the token stops being valid (this instance's clock)
	sent    time.Time // when the read was sent
}

// sessionCache is what an instance remembers of tokens and what its
// revocation feed learnt.
type sessionCache struct {
	entries *otter.Cache[string, *session]

	mu sync.RWMutex
	// changed holds, by token hash, when the feed (or a logout served here)
	// learnt that the token changed; kept SessionMaxAge and a minute.
	changed map[string]time.Time
	// origin is when the feed's first poll returned (zero before): only
	// reads sent after it are trusted past SessionTTL.
	origin time.Time
	// polled is when the feed's last successful poll began.
	polled time.Time

	// watchers are the functions of WatchTokens, told what the feed learnt.
	watchMu  sync.Mutex
	watchers []*tokenWatcher
}

// tokenWatcher is one function of WatchTokens (a pointer, to be removed by).
type tokenWatcher struct{ fn func(hashes [][]byte) }

// newSessionCache returns an empty sessionCache.
func newSessionCache() *sessionCache {
	return &sessionCache{
		entries: otter.Must(&otter.Options[string, *session]{
			MaximumSize:      sessionCacheSize,
			ExpiryCalculator: otter.ExpiryWriting[string, *session](SessionMaxAge),
			// Evictions in the call that makes them due: no goroutine of its own.
			Executor: func(evict func()) { evict() },
		}),
		changed: map[string]time.Time{},
	}
}

// trusted reports whether s, read of the token key, may be used at now.
func (c *sessionCache) trusted(key string, s *session, now time.Time) bool {
	age := now.Sub(s.sent)
	if age >= SessionMaxAge {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if learnt, ok := c.changed[key]; ok && !s.sent.After(learnt) {
		return false
	}
	if age < SessionTTL {
		return true
	}
	return !c.origin.IsZero() && s.sent.After(c.origin) && now.Sub(c.polled) < revocationCurrent
}

// learnt records that the tokens of hashes changed, as learnt at.
func (c *sessionCache) learnt(at time.Time, hashes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range hashes {
		c.changed[h] = at
	}
}

// tell calls the functions of WatchTokens with hashes.
func (c *sessionCache) tell(hashes [][]byte) {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	for _, w := range c.watchers {
		w.fn(hashes)
	}
}

// WatchTokens calls fn with the SHA-256 hashes of the bearer tokens this
// instance's revocation feed (RunRevocationFeed) learnt changed (revoked,
// deleted, expiry or user changed), after each poll that found some, until
// the returned stop is called; and once with nil, after the feed's first
// poll: a change committed before that poll is one the feed never reads, so
// any token the watcher read before may have changed unseen (read them all
// again). fn runs in the feed's goroutine, one call at a time: it must return
// at once (hand the work to a goroutine of its own). Without the feed
// running, fn is never called.
func (db *DB) WatchTokens(fn func(hashes [][]byte)) (stop func()) {
	c, w := db.sessions, &tokenWatcher{fn: fn}
	c.watchMu.Lock()
	c.watchers = append(c.watchers, w)
	c.watchMu.Unlock()
	return func() {
		c.watchMu.Lock()
		defer c.watchMu.Unlock()
		for i, x := range c.watchers {
			if x == w {
				c.watchers = append(c.watchers[:i:i], c.watchers[i+1:]...)
				return
			}
		}
	}
}

// TokenChangedSince reports whether the token with this SHA-256 may have
// changed after t unseen by a reader that read it at t and starts to
// WatchTokens after: this instance learnt after t that it changed (through
// its revocation feed, or a logout it served), or the feed's first poll
// returned after t (a change committed between t and that poll is one the
// feed never reads, and the call with nil that says so may have come before
// the watch). The reader then reads the token again.
func (db *DB) TokenChangedSince(hash []byte, t time.Time) bool {
	c := db.sessions
	c.mu.RLock()
	defer c.mu.RUnlock()
	if learnt, ok := c.changed[string(hash)]; ok && learnt.After(t) {
		return true
	}
	return !c.origin.IsZero() && c.origin.After(t)
}

// revoked makes this instance refuse the token key from now on: a logout it
// served committed.
func (c *sessionCache) revoked(key string) {
	now := time.Now()
	c.learnt(now, key)
	c.entries.Set(key, &session{sent: now.Add(time.Nanosecond)})
}

// forget drops the changes learnt more than SessionMaxAge and a minute
// before now: every read sent before them has expired.
func (c *sessionCache) forget(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, at := range c.changed {
		if now.Sub(at) > SessionMaxAge+time.Minute {
			delete(c.changed, h)
		}
	}
}

// UserByTokenHash returns the user owning the token with this SHA-256, or a
// NOT_FOUND error if the token is unknown, expired or revoked. What it reads
// is remembered (SessionTTL, SessionMaxAge), so a busy client's requests need
// no round trip for it; concurrent reads of one token are one query.
func (db *DB) UserByTokenHash(ctx context.Context, hash []byte) (*User, error) {
	key, c := string(hash), db.sessions
	s, ok := c.entries.GetIfPresent(key)
	if !ok || !c.trusted(key, s, time.Now()) {
		if ok {
			c.entries.Invalidate(key)
		}
		var err error
		s, err = c.entries.Get(ctx, key, otter.LoaderFunc[string, *session](func(ctx context.Context, _ string) (*session, error) {
			return db.readSession(ctx, hash)
		}))
		// Get may have joined a read sent before the change that made the
		// entry untrusted: then read again.
		if err == nil && !c.trusted(key, s, time.Now()) {
			if s, err = db.readSession(ctx, hash); err == nil {
				c.entries.Set(key, s)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("user by token: %w", err)
		}
	}
	if s.user == nil || !time.Now().Before(s.expires) {
		return nil, notFound("token")
	}
	u := *s.user // the cached user is shared: hand out a copy
	return &u, nil
}

// CachedUserByTokenHash answers from what this instance remembers of the
// token with this SHA-256, without a round trip: known is false when it
// remembers nothing it may trust (UserByTokenHash would ask Postgres), and
// user is nil when it knows the token is unknown, expired or revoked. It lets
// a caller (auth.Authenticate) refuse a client before a read of Postgres.
func (db *DB) CachedUserByTokenHash(hash []byte) (user *User, known bool) {
	key, c := string(hash), db.sessions
	s, ok := c.entries.GetIfPresent(key)
	now := time.Now()
	if !ok || !c.trusted(key, s, now) {
		return nil, false
	}
	if s.user == nil || !now.Before(s.expires) {
		return nil, true
	}
	u := *s.user // the cached user is shared: hand out a copy
	return &u, true
}

// readSession reads what the token with this SHA-256 means now.
func (db *DB) readSession(ctx context.Context, hash []byte) (*session, error) {
	s := &session{sent: time.Now()}
	var u User
	var validMs int64
	err := db.Pool.QueryRow(ctx, `SELECT `+userColumns+`,
			(extract(epoch FROM t.expires_at - now()) * 1000)::bigint
		FROM tokens t JOIN users u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.expires_at > now()`, hash).
		Scan(userDests(&u, &validMs)...)
	if errors.Is(err, pgx.ErrNoRows) {
		// Remembered too: a refused token costs no query for a while. An
		// update that makes it valid again (expiry moved, revocation undone
		// by SQL) is a change the feed reads; an insert is not, as tokens
		// are 32 random bytes that no client sends before they exist.
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	// The expiry in this instance's clock, from Postgres's: no skew.
	s.user, s.expires = &u, s.sent.Add(time.Duration(validMs)*time.Millisecond)
	return s, nil
}

// RunRevocationFeed keeps what this instance remembers of bearer tokens
// trustworthy until ctx ends: every RevocationPoll it reads which tokens
// changed since its last read (revoked, deleted, expiry or user changed),
// stops trusting what it read of them before and tells the functions of
// WatchTokens. Run one per instance (server.go does); without it an instance
// trusts a read for SessionTTL only, and WatchTokens learns nothing. Safe
// with PgBouncer in transaction mode (one statement per poll, no session
// state).
func (db *DB) RunRevocationFeed(ctx context.Context) {
	c := db.sessions
	var cursor uint64
	started, failing := false, false
	lastForget, lastPrune := time.Now(), time.Time{}
	t := time.NewTicker(RevocationPoll)
	defer t.Stop()
	for {
		began := time.Now()
		var hashes [][]byte
		err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()),
			ARRAY(SELECT token_hash FROM token_changes WHERE $1 AND changed_xid >= $2::xid8)`,
			started, cursor).Scan(&cursor, &hashes)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				db.log.WarnContext(ctx, "token revocation feed: cannot poll; tokens are read again every "+SessionTTL.String(), "err", err)
			}
			failing = true
		default:
			if failing {
				db.log.InfoContext(ctx, "token revocation feed: polling again")
			}
			failing = false
			now := time.Now()
			keys := make([]string, len(hashes))
			for i, h := range hashes {
				keys[i] = string(h)
			}
			c.learnt(now, keys...)
			c.mu.Lock()
			first := !started
			if first {
				c.origin = now
			}
			c.polled = began
			c.mu.Unlock()
			started = true
			switch {
			case first: // what watchers read before may have changed unseen
				c.tell(nil)
			case len(hashes) > 0:
				c.tell(hashes)
			}
		}
		if time.Since(lastForget) > time.Minute {
			lastForget = time.Now()
			c.forget(lastForget)
		}
		if time.Since(lastPrune) > time.Hour {
			lastPrune = time.Now()
			if _, err := db.Pool.Exec(ctx, `DELETE FROM token_changes WHERE changed_at < now() - $1 * interval '1 second'`,
				int64(tokenChangesKept/time.Second)); err != nil && ctx.Err() == nil {
				db.log.WarnContext(ctx, "token revocation feed: pruning token_changes", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
