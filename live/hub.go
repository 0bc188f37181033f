// Package live serves GraphQL subscriptions from the event spine: the audit
// log read in commit-safe order past a cursor (store.ReadSpine). The spine is
// the only source of truth; wake-ups (this instance's commits, Redis pub/sub
// from the others, a poll as a backstop) only say "read it now".
//
// One tailer per instance (Hub.Run) reads the spine past its own position and
// hands each event to the local subscribers it concerns. A subscriber that
// starts, or comes back with the cursor of the last event it received, first
// reads the spine itself from its cursor with its filter (catch-up), while the
// tailer already queues the live events for it; it then delivers the queued
// events past what it has read. Every event is delivered once, in spine order,
// with no gap: see docs/decisions/2026-12-01-live-subscriptions.md. A
// subscriber whose queue overflows (a slow client, a long catch-up) is told,
// empties it and catches up from the spine again, the same way.
//
// A subscription's token is read again when the instance's revocation feed
// learns it changed (store.DB.WatchTokens): a token revoked, deleted or made
// to expire by any means, SQL included, ends its streams with
// UNAUTHENTICATED within about a second, on every instance that runs the
// feed. A logout also ends them through its user.logged_out event.
package live

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"taskflow/errs"
	"taskflow/store"
)

// Defaults of Options.
const (
	// DefaultMaxPerUser is the most subscriptions one user may have open on
	// one instance.
	DefaultMaxPerUser = 100
	// DefaultBuffer is the most events queued for one subscription: past it
	// the subscription reads what it missed from the spine itself (see
	// subscriber.offer), so a slow client costs no more memory.
	DefaultBuffer = 256
	// DefaultPoll is how often an idle tailer reads the spine when no wake-up
	// came (the backstop for commits of other instances).
	DefaultPoll = 100 * time.Millisecond
	// RedisChannel is the Redis pub/sub channel of wake-ups (sharded pub/sub
	// on a Redis Cluster). A message only means "the spine moved".
	RedisChannel = "taskflow:spine"
)

// tailBatch is the most events one read of the tailer takes; a full read is
// followed by the next at once.
const tailBatch = 1000

// Wake-ups between instances are only sent while some instance listens: an
// instance subscribes to RedisChannel while it has subscribers (and
// listenLinger after its last one left), and an instance whose wake-up no one
// received stops publishing for publishQuiet. Under createTask with no
// subscriber anywhere, a publish per commit and every instance reading them
// back took about 9% of the server's CPU (docs/decisions/2026-12-02-wakeups.md).
const (
	// publishQuiet is how long an instance publishes no wake-up after one
	// that no instance received. An instance that gets its first subscriber
	// meanwhile reads the others' events on its poll until the next publish.
	publishQuiet = time.Second
	// listenLinger is how long an instance stays subscribed to wake-ups
	// after its last subscriber left (between one and two times it).
	listenLinger = 30 * time.Second
)

// Options configure a Hub.
type Options struct {
	DB  *store.DB
	Log *slog.Logger
	// Redis, when set, carries wake-ups between instances: each instance
	// publishes after its commits (unless its last wake-up reached no one,
	// see publishQuiet) and, while it has subscribers, reads the spine when
	// another does. Nil: other instances' events arrive within Poll.
	Redis redis.UniversalClient
	// MaxPerUser bounds the open subscriptions of one user on this instance
	// (zero: DefaultMaxPerUser).
	MaxPerUser int
	// Buffer is the most events queued for one subscription (zero:
	// DefaultBuffer).
	Buffer int
	// Poll is the idle tailer's interval (zero: DefaultPoll).
	Poll time.Duration
	// Registerer receives the hub's metrics; nil: none.
	Registerer prometheus.Registerer
}

// Hub is the live subscriptions of one instance: the tailer, the subscribers
// and their limits.
type Hub struct {
	o Options
	m *metrics

	mu sync.Mutex
	// pos is the tailer's position: every event up to it was offered to the
	// subscribers registered when it was read.
	pos store.SpineCursor
	// gen counts registrations, so that an idle tailer jumps to the head
	// only when no subscriber came meanwhile.
	gen     uint64
	byChain map[string]map[*subscriber]struct{}
	// byToken holds the subscribers by their token's hash; tokenChecks the
	// hashes of those whose token changed and is not read again yet
	// (checkTokens, woken by tokenWake).
	byToken     map[string]map[*subscriber]struct{}
	tokenChecks map[string]struct{}
	tokenWake   chan struct{}
	perUser     map[string]int
	open        int
	closed      bool

	ready   chan struct{} // closed once the tailer has a position
	closing chan struct{} // closed by Close
	poke    chan struct{} // a wake-up from another instance
	first   chan struct{} // the hub got a subscriber when it had none
	// runOnce starts the hub's one tailer: Run's, or the one start begins
	// for a hub nobody ran yet; then own stops that one and ownDone is
	// closed when it has stopped (both set within runOnce).
	runOnce sync.Once
	own     context.CancelFunc
	ownDone chan struct{}
}

// New returns a hub; Run starts its tailer (Subscribe starts one of its own
// when nobody did).
func New(o Options) *Hub {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MaxPerUser <= 0 {
		o.MaxPerUser = DefaultMaxPerUser
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	return &Hub{o: o, m: newMetrics(o.Registerer), byChain: map[string]map[*subscriber]struct{}{},
		byToken: map[string]map[*subscriber]struct{}{}, tokenChecks: map[string]struct{}{}, tokenWake: make(chan struct{}, 1),
		perUser: map[string]int{}, ready: make(chan struct{}), closing: make(chan struct{}), poke: make(chan struct{}, 1),
		first: make(chan struct{}, 1)}
}

// Closing is closed when Close is called: transports end their connections
// then (WebSocket close code 1012).
func (h *Hub) Closing() <-chan struct{} { return h.closing }

// Close ends every subscription with STREAM_INTERRUPTED (the server is
// restarting: subscribe again elsewhere with the last cursor) and refuses new
// ones. The tailer stops with the context given to Run.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.closing)
	for _, subs := range h.byChain {
		for s := range subs {
			s.fail(interrupted("the server is restarting: subscribe again with the last cursor you received"))
		}
	}
}

// Open returns the number of open subscriptions.
func (h *Hub) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// Run runs the tailer until ctx ends: a read of the spine at once after this
// instance committed events, after a wake-up from another instance (Redis)
// or after Poll, and at once again after a full read
// (store.RunSpineConsumer, which logs errors and retries after a backoff;
// subscribers wait meanwhile). A hub has one tailer: when a subscriber came
// before Run and started the hub's own (start), Run lets that one go on and
// stops it when ctx ends, returning once it has stopped; a second Run only
// waits for its ctx. (Two tailers used to run then, and the second's close of
// ready panicked the process.)
func (h *Hub) Run(ctx context.Context) {
	first := false
	h.runOnce.Do(func() { first = true })
	if !first {
		<-ctx.Done()
		if h.own != nil { // else another Run runs the tailer, until its own ctx ends
			h.own()
			<-h.ownDone
		}
		return
	}
	h.run(ctx)
}

// run is the tailer, until ctx ends.
func (h *Hub) run(ctx context.Context) {
	local := h.o.DB.SpineWakeups()
	unwatch := h.o.DB.WatchTokens(h.tokensChanged)
	defer unwatch()
	go h.checkTokens(ctx)
	var publish chan struct{}
	if h.o.Redis != nil {
		publish = make(chan struct{}, 1)
		go h.publish(ctx, publish)
		go h.listen(ctx)
	}
	for backoff := time.Duration(0); ctx.Err() == nil; {
		head, err := h.o.DB.SpineHead(ctx)
		if err == nil {
			h.mu.Lock()
			h.pos = head
			h.mu.Unlock()
			close(h.ready)
			break
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		h.o.Log.ErrorContext(ctx, "live tailer: spine head", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
	// This instance's commits wake the tailer and, through Redis, the
	// other instances'; their commits wake it through h.poke. With no
	// subscriber open, the tailer only follows the spine's head, and does so
	// on its poll: a read per commit cost 1.7-2.5% of the server's CPU under
	// createTask. A subscriber that comes meanwhile catches up from its own
	// cursor, and the tailer reads what lies between its position and the
	// head (see round).
	wake := make(chan struct{}, 1)
	go func() {
		signal := func(c chan struct{}) {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-local:
				if h.Open() > 0 {
					signal(wake)
				}
				if publish != nil {
					signal(publish)
				}
			case <-h.poke:
				if h.Open() > 0 {
					signal(wake)
				}
			}
		}
	}()
	// No gap between rounds: a subscriber sees an event as soon as it commits.
	store.RunSpineConsumer(ctx, h.o.DB, "live tailer", wake, h.o.Poll, 0, func(ctx context.Context) (bool, bool, error) {
		full, err := h.round(ctx)
		return false, full, err
	})
}

// start makes sure a tailer runs (one of the hub's own, for a hub nobody
// runs) and waits until it has a position.
func (h *Hub) start(ctx context.Context) error {
	h.runOnce.Do(func() {
		own, stop := context.WithCancel(context.WithoutCancel(ctx))
		h.own, h.ownDone = stop, make(chan struct{})
		go func() {
			defer close(h.ownDone)
			h.run(own)
		}()
	})
	select {
	case <-h.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// round is one read of the tailer: with no subscriber it only moves to the
// spine's head; otherwise it reads up to tailBatch events past its position,
// finds where task and comment events belong, and offers each event to the
// subscribers of its chain. It reports a full read.
func (h *Hub) round(ctx context.Context) (bool, error) {
	h.mu.Lock()
	gen, open, pos := h.gen, h.open, h.pos
	h.mu.Unlock()
	if open == 0 {
		head, err := h.o.DB.SpineHead(ctx)
		if err != nil {
			return false, err
		}
		h.mu.Lock()
		// A subscriber registered since gen was read may be catching up
		// from before head: then the tailer must read what lies between.
		if h.gen == gen && pos.Before(head) {
			h.pos = head
		}
		h.mu.Unlock()
		return false, nil
	}
	read, err := h.o.DB.ReadSpine(ctx, pos, store.SpineFilter{}, tailBatch)
	if err != nil {
		return false, err
	}
	events, err := eventsOf(ctx, h.o.DB, read.Events)
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	for _, e := range events {
		for s := range h.byChain[e.Record.ChainKey] {
			s.offer(e)
		}
	}
	h.pos = read.Next
	h.mu.Unlock()
	return len(read.Events) == tailBatch, nil
}

// publish sends a wake-up to the other instances after each of this
// instance's commits (several commits during one publish share the next),
// unless the last one reached no instance less than publishQuiet ago.
func (h *Hub) publish(ctx context.Context, signals <-chan struct{}) {
	var quietUntil time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
		}
		if time.Now().Before(quietUntil) {
			continue
		}
		var cmd *redis.IntCmd
		if _, ok := h.o.Redis.(*redis.ClusterClient); ok {
			cmd = h.o.Redis.SPublish(ctx, RedisChannel, "1")
		} else {
			cmd = h.o.Redis.Publish(ctx, RedisChannel, "1")
		}
		receivers, err := cmd.Result()
		switch {
		case err != nil && ctx.Err() == nil:
			// The other instances still read within their poll.
			h.o.Log.DebugContext(ctx, "live: publish a wake-up", "err", err)
		case err == nil && receivers == 0:
			quietUntil = time.Now().Add(publishQuiet)
		}
	}
}

// listen wakes the tailer on each wake-up from another instance, while the
// hub has subscribers (and listenLinger after). go-redis resubscribes after a
// lost connection by itself.
func (h *Hub) listen(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.first:
		}
		h.listenWhileOpen(ctx)
	}
}

// listenWhileOpen is subscribed to RedisChannel until the hub has had no
// subscriber at two checks listenLinger apart.
func (h *Hub) listenWhileOpen(ctx context.Context) {
	var ps *redis.PubSub
	if _, ok := h.o.Redis.(*redis.ClusterClient); ok {
		ps = h.o.Redis.SSubscribe(ctx, RedisChannel)
	} else {
		ps = h.o.Redis.Subscribe(ctx, RedisChannel)
	}
	defer ps.Close()
	ch := ps.Channel()
	check := time.NewTicker(listenLinger)
	defer check.Stop()
	idle := false
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			select {
			case h.poke <- struct{}{}:
			default:
			}
		case <-check.C:
			if h.Open() > 0 {
				idle = false
			} else if idle {
				return
			} else {
				idle = true
			}
		}
	}
}

// register adds a subscriber (refused over the per-user cap or once closed).
func (h *Hub) register(s *subscriber) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return interrupted("the server is restarting: subscribe again (another instance will answer)")
	}
	if h.perUser[s.user.ID] >= h.o.MaxPerUser {
		h.m.ended.WithLabelValues(string(errs.CodeRateLimited)).Inc()
		return &errs.Error{Code: errs.CodeRateLimited,
			Message:    "too many open subscriptions: close one first (at most " + itoa(h.o.MaxPerUser) + " per user)",
			Extensions: map[string]any{"retryAfter": 1, "limit": "subscriptions", "maximum": h.o.MaxPerUser}}
	}
	h.perUser[s.user.ID]++
	if h.open++; h.open == 1 {
		select {
		case h.first <- struct{}{}:
		default:
		}
	}
	h.gen++
	if h.byToken[string(s.tok)] == nil {
		h.byToken[string(s.tok)] = map[*subscriber]struct{}{}
	}
	h.byToken[string(s.tok)][s] = struct{}{}
	for _, c := range s.chains {
		if h.byChain[c] == nil {
			h.byChain[c] = map[*subscriber]struct{}{}
		}
		h.byChain[c][s] = struct{}{}
	}
	h.m.open.Inc()
	return nil
}

// remove takes a subscriber out.
func (h *Hub) remove(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if delete(h.byToken[string(s.tok)], s); len(h.byToken[string(s.tok)]) == 0 {
		delete(h.byToken, string(s.tok))
	}
	for _, c := range s.chains {
		delete(h.byChain[c], s)
		if len(h.byChain[c]) == 0 {
			delete(h.byChain, c)
		}
	}
	if h.perUser[s.user.ID]--; h.perUser[s.user.ID] <= 0 {
		delete(h.perUser, s.user.ID)
	}
	h.open--
	h.m.open.Dec()
}

// tokensChanged queues for checkTokens those of the token hashes that
// subscribers use: the revocation feed learnt they changed. nil queues every
// subscriber's token: the feed has made its first poll, and a change
// committed before it is one it never reads. WatchTokens calls it in the
// feed's goroutine, so it only queues.
func (h *Hub) tokensChanged(hashes [][]byte) {
	h.mu.Lock()
	queued := false
	if hashes == nil {
		for hash := range h.byToken {
			hashes = append(hashes, []byte(hash))
		}
	}
	for _, hash := range hashes {
		if len(h.byToken[string(hash)]) > 0 {
			h.tokenChecks[string(hash)] = struct{}{}
			queued = true
		}
	}
	h.mu.Unlock()
	if queued {
		select {
		case h.tokenWake <- struct{}{}:
		default:
		}
	}
}

// checkTokens reads the queued tokens again, all at once, each time some are
// queued, until ctx ends: the subscribers of a token no longer valid end with
// UNAUTHENTICATED, the others' expiry moves to their token's. When the read
// fails they end with STREAM_INTERRUPTED (they subscribe again, which reads
// the token), as when authorize cannot check a logout.
func (h *Hub) checkTokens(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.tokenWake:
		}
		h.mu.Lock()
		queued := h.tokenChecks
		h.tokenChecks = map[string]struct{}{}
		h.mu.Unlock()
		hashes := make([][]byte, 0, len(queued))
		for hash := range queued {
			hashes = append(hashes, []byte(hash))
		}
		valid, err := h.o.DB.TokensExpire(ctx, hashes)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.o.Log.ErrorContext(ctx, "live: token check", "err", err)
		}
		h.mu.Lock()
		for hash := range queued {
			expires, ok := valid[hash]
			for s := range h.byToken[hash] {
				switch {
				case err != nil:
					s.fail(interrupted("the server could not check your token: subscribe again with the last cursor you received"))
				case !ok:
					s.fail(errs.Errorf(errs.CodeUnauthenticated, "your token was revoked or expired: sign in again"))
				default:
					s.expiry.Reset(time.Until(expires))
				}
			}
		}
		h.mu.Unlock()
	}
}

// interrupted is the STREAM_INTERRUPTED error with msg.
func interrupted(msg string) *errs.Error {
	return &errs.Error{Code: errs.CodeStreamInterrupted, Message: msg}
}

// errClosed tells a subscriber that its client went away.
var errClosed = errors.New("live: subscription closed")
