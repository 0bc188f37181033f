// Package apq is TaskFlow's automatic persisted queries (the protocol Apollo
// Client speaks): gqlgen's extension.AutomaticPersistedQuery over a cache of
// query texts keyed by their SHA-256, in Redis when the deployment has one (so
// every instance shares it) and in process otherwise. A query text is stored
// only once the operation it carries has been parsed, validated and admitted
// (method guard, rate limits), so the cache never holds a document the server
// would refuse; a text whose hash does not match is refused and never stored,
// and a text longer than MaxQueryBytes, or one its client may not store
// (Admit: package ratelimit bounds the bytes each client network stores), is
// executed but not stored, and so is a text that writes a secret inline
// (querydoc.HoldsSecret: a value of an argument the schema marks @secret,
// such as login's password), since its hash would replay the secret; such a text
// found by its hash (stored before) is answered as unknown. Both caches are
// bounded: in process by bytes, in Redis by the TTL, the clients' bound (and
// Redis's maxmemory policy, see the operations notes).
package apq

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"taskflow/errs"
	"taskflow/promreg"
	"taskflow/querydoc"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/maypok86/otter/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Error messages and codes of the protocol, as Apollo Client expects them.
const (
	MessageNotFound = "PersistedQueryNotFound"
	CodeNotFound    = string(errs.CodePersistedQueryNotFound)
)

// DefaultTTL is how long a query text stays in Redis after it was last used.
const DefaultTTL = 24 * time.Hour

// DefaultMemoryBytes bounds the query texts the in-process cache keeps, with
// their hashes: about 2,000 texts of an application query (2 KB).
const DefaultMemoryBytes = 4 << 20

// MaxQueryBytes is the longest query text stored under its hash, in process
// or in Redis. A longer one is executed but not stored: its client sends it
// again with the hash each time (the protocol's answer to a miss), so no
// client can park megabytes of text in the cache with one request. Real
// queries are a few kilobytes; GraphiQL's introspection query is 2.5 KB.
const MaxQueryBytes = 64 << 10

// memoryEntryBytes is what an entry of the in-process cache takes besides its
// hash and text (the entry, its node in the cache, the string headers).
const memoryEntryBytes = 160

// ValidHash reports whether h is a SHA-256 in lowercase hex, the only form a
// client computes and the only form the cache is asked about.
func ValidHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewMemoryCache returns an in-process cache of query texts bounded by their
// bytes with their hashes (zero: DefaultMemoryBytes), correct for a single
// instance. It is otter's W-TinyLFU cache: texts registered once by a flood
// of requests do not push out the ones clients keep asking for.
func NewMemoryCache(maxBytes int64) graphql.Cache[string] {
	if maxBytes <= 0 {
		maxBytes = DefaultMemoryBytes
	}
	return memoryCache{c: otter.Must(&otter.Options[string, string]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(hash, query string) uint32 { return uint32(len(hash) + len(query) + memoryEntryBytes) },
		Executor:      func(evict func()) { evict() }, // the bound holds when Add returns
	})}
}

// memoryCache is the in-process cache of query texts.
type memoryCache struct{ c *otter.Cache[string, string] }

// Get returns the query text of hash.
func (m memoryCache) Get(_ context.Context, hash string) (string, bool) {
	return m.c.GetIfPresent(hash)
}

// Add stores the query text of hash (the storer only adds texts of at most
// MaxQueryBytes).
func (m memoryCache) Add(_ context.Context, hash, query string) { m.c.Set(hash, query) }

// RedisCache is a graphql.Cache[string] of query texts in Redis, shared by every
// instance on the same Redis and key prefix. Every hit renews the TTL. Redis
// errors are logged and read as a miss (the client then sends the full text,
// which works without the cache), so a Redis outage never fails a request.
type RedisCache struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
	log    *slog.Logger
}

var _ graphql.Cache[string] = (*RedisCache)(nil)

// redisTimeout bounds one cache command, so a hanging Redis delays a request
// by at most this much.
const redisTimeout = 500 * time.Millisecond

// NewRedisCache returns a cache in client under keys prefix+"apq:"+hash that
// expire ttl (zero: DefaultTTL) after their last use; log receives the Redis
// errors (nil: slog.Default()).
func NewRedisCache(client redis.UniversalClient, prefix string, ttl time.Duration, log *slog.Logger) *RedisCache {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if log == nil {
		log = slog.Default()
	}
	return &RedisCache{client: client, prefix: prefix + "apq:", ttl: ttl, log: log}
}

// Get returns the query text of hash and renews its TTL.
func (c *RedisCache) Get(ctx context.Context, hash string) (string, bool) {
	if !ValidHash(hash) {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisTimeout)
	defer cancel()
	q, err := c.client.GetEx(ctx, c.prefix+hash, c.ttl).Result()
	if err != nil {
		if !errors.Is(err, redis.Nil) {
			c.log.WarnContext(ctx, "persisted queries: Redis read failed, treated as a miss", "err", err)
		}
		return "", false
	}
	return q, true
}

// Add stores the query text of hash for the TTL.
func (c *RedisCache) Add(ctx context.Context, hash, query string) {
	if !ValidHash(hash) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisTimeout)
	defer cancel()
	if err := c.client.Set(ctx, c.prefix+hash, query, c.ttl).Err(); err != nil {
		c.log.WarnContext(ctx, "persisted queries: Redis write failed, the query is not stored", "err", err)
	}
}

// Admit decides whether the caller of ctx may store a text of n bytes (at
// most MaxQueryBytes), and charges it when it may (package ratelimit bounds
// the bytes a client stores).
type Admit func(ctx context.Context, n int) bool

// Extensions returns the gqlgen extensions of automatic persisted queries over
// cache: the one that resolves hashes (gqlgen runs it before parsing; install
// it before the rate limiter, so that a text found by its hash and answered
// as unknown because it holds a secret is not charged) and the one that
// stores a newly sent text (install it after every extension that may refuse
// the operation, e.g. the rate limiter). Both read whether a text holds a
// secret from querydoc.Extension (querydoc.HoldsSecret, found once per
// document), which must be installed too: without it every text is taken
// to hold one.
// A text that holds a secret is run but not stored, nor
// charged to admit; admit, when not nil, is asked before each other text is
// stored: a text it refuses is run but not stored, as a text over
// MaxQueryBytes is. Their outcomes are counted in reg as
// taskflow_apq_requests_total: hit (a hash found, its text valid), miss
// (PERSISTED_QUERY_NOT_FOUND), registered (a text stored under its hash),
// secret (a text holding a secret, not stored), unstored (a text admit
// refused) and refused (a malformed or mismatched extension).
func Extensions(cache graphql.Cache[string], reg prometheus.Registerer, admit Admit) (resolve, store graphql.HandlerExtension) {
	requests := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskflow_apq_requests_total",
		Help: "Automatic persisted query requests by outcome: hit, miss, registered, secret (a text writing a secret inline, not stored), unstored (over the client's limit), refused.",
	}, []string{"outcome"}))
	return &resolver{inner: extension.AutomaticPersistedQuery{Cache: deferred{cache}}, requests: requests},
		&storer{cache: cache, requests: requests, admit: admit}
}

// statsKey keeps the per-operation state in the operation's stats.
const statsKey = "taskflow.apq"

// state is what the resolver leaves on the operation for the storer and the
// transport.
type state struct {
	hash, query string // a text to store once the operation is admitted
	invalid     bool   // the request's persistedQuery extension was refused
	hit         bool   // the text was found by its hash
}

func stateOf(rc *graphql.OperationContext) *state {
	if rc == nil {
		return nil
	}
	s, _ := rc.Stats.GetExtension(statsKey).(*state)
	return s
}

// Refused reports whether rc was stopped by a malformed persisted-query
// extension (a hash that does not match the query, an unsupported version,
// malformed data): a bad request, unlike PERSISTED_QUERY_NOT_FOUND, which is
// the protocol's normal first answer.
func Refused(rc *graphql.OperationContext) bool {
	s := stateOf(rc)
	return s != nil && s.invalid
}

// IsNotFound reports whether err is the protocol's PERSISTED_QUERY_NOT_FOUND.
func IsNotFound(err *gqlerror.Error) bool {
	code, _ := err.Extensions["code"].(string)
	return code == CodeNotFound
}

// deferred is the cache the gqlgen extension sees: reads go to the real cache,
// writes wait on the operation until the storer admits them.
type deferred struct{ cache graphql.Cache[string] }

func (d deferred) Get(ctx context.Context, hash string) (string, bool) {
	if !ValidHash(hash) {
		return "", false
	}
	return d.cache.Get(ctx, hash)
}

func (d deferred) Add(ctx context.Context, hash, query string) {
	if rc := graphql.GetOperationContext(ctx); rc != nil {
		rc.Stats.SetExtension(statsKey, &state{hash: hash, query: query})
	}
}

// resolver wraps gqlgen's extension to mark the requests it refuses as bad,
// and answers a stored text that holds a secret as unknown.
type resolver struct {
	inner    extension.AutomaticPersistedQuery
	requests *prometheus.CounterVec
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
	graphql.OperationContextMutator
} = (*resolver)(nil)

// ExtensionName names the extension.
func (r *resolver) ExtensionName() string { return r.inner.ExtensionName() }

// Validate checks that there is a cache.
func (r *resolver) Validate(s graphql.ExecutableSchema) error { return r.inner.Validate(s) }

// MutateOperationParameters replaces a known hash by its query text, answers
// PERSISTED_QUERY_NOT_FOUND for an unknown one, and refuses a hash that is not
// the SHA-256 of the text sent with it.
func (r *resolver) MutateOperationParameters(ctx context.Context, p *graphql.RawParams) *gqlerror.Error {
	_, persisted := p.Extensions["persistedQuery"]
	hashOnly := p.Query == ""
	err := r.inner.MutateOperationParameters(ctx, p)
	switch {
	case !persisted:
	case err == nil && hashOnly: // a hit once its document is known (MutateOperationContext)
		if rc := graphql.GetOperationContext(ctx); rc != nil {
			rc.Stats.SetExtension(statsKey, &state{hit: true})
		}
	case err == nil: // a text with its hash: registered once stored (storer)
	case IsNotFound(err):
		r.requests.WithLabelValues("miss").Inc()
	default:
		r.requests.WithLabelValues("refused").Inc()
	}
	if err == nil || IsNotFound(err) {
		return err
	}
	if rc := graphql.GetOperationContext(ctx); rc != nil {
		rc.Stats.SetExtension(statsKey, &state{invalid: true})
	}
	if err.Message == "provided APQ hash does not match query" {
		err.Message = "provided sha does not match query"
	}
	return err
}

// MutateOperationContext counts a hit, or answers PERSISTED_QUERY_NOT_FOUND
// for a text found by its hash that holds a secret (querydoc.HoldsSecret: stored
// before such texts were refused, or by a server that stores them): the hash
// must not replay it, and the client sends the text again.
func (r *resolver) MutateOperationContext(_ context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	st := stateOf(rc)
	if st == nil || !st.hit {
		return nil
	}
	if querydoc.HoldsSecret(rc) {
		r.requests.WithLabelValues("miss").Inc()
		return &gqlerror.Error{Message: MessageNotFound, Extensions: map[string]any{"code": CodeNotFound}}
	}
	r.requests.WithLabelValues("hit").Inc()
	return nil
}

// storer stores the text of an admitted operation under its hash.
type storer struct {
	cache    graphql.Cache[string]
	requests *prometheus.CounterVec
	admit    Admit // nil: every text up to MaxQueryBytes is stored
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = (*storer)(nil)

// ExtensionName names the extension.
func (*storer) ExtensionName() string { return "AutomaticPersistedQueryStore" }

// Validate accepts any schema.
func (*storer) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext stores the text the operation was sent with, if any,
// if it is at most MaxQueryBytes long, holds no secret (querydoc.HoldsSecret) and
// admit lets its caller store it.
func (s *storer) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	st := stateOf(rc)
	if st == nil || st.query == "" || len(st.query) > MaxQueryBytes {
		return nil
	}
	q := st.query
	st.query = ""
	if rc.Doc == nil { // cannot be: the text was parsed and validated
		return nil
	}
	if querydoc.HoldsSecret(rc) {
		s.requests.WithLabelValues("secret").Inc()
		return nil
	}
	if s.admit != nil && !s.admit(ctx, len(q)) {
		s.requests.WithLabelValues("unstored").Inc()
		return nil
	}
	s.cache.Add(ctx, st.hash, q)
	s.requests.WithLabelValues("registered").Inc()
	return nil
}
