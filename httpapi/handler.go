// Package httpapi is TaskFlow's HTTP surface: the GraphQL endpoint with its
// transports, extensions and middleware, and the other routes (playground,
// health, metrics). NewHandler builds all of it; server.go only configures and
// serves it, and tests use it as it is.
package httpapi

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"taskflow/apq"
	"taskflow/audit"
	"taskflow/auth"
	"taskflow/blobs"
	"taskflow/graph"
	"taskflow/idempotency"
	"taskflow/live"
	"taskflow/querydoc"
	"taskflow/ratelimit"
	"taskflow/reqinfo"
	"taskflow/resolvers"
	"taskflow/schema"
	"taskflow/store"
	"taskflow/tracing"
)

// Options are the dependencies and settings of the HTTP API.
type Options struct {
	DB  *store.DB
	Log *slog.Logger
	// AccessLog receives the access log: a line for every request. Nil means
	// Log.
	AccessLog      *slog.Logger
	TrustedProxies Proxies
	// IdempotencyTTL and IdempotencyWait are IDEMPOTENCY_TTL and IDEMPOTENCY_WAIT;
	// zero means the default (24h, 5s); a negative wait means no waiting.
	IdempotencyTTL  time.Duration
	IdempotencyWait time.Duration
	// Resolvers replaces the resolver root (tests of middleware that stand in a
	// resolver); nil means the real resolvers.
	Resolvers graph.ResolverRoot
	// Limiter checks every operation's cost and the endpoint limits; nil is an
	// in-process limiter with the contract's defaults.
	Limiter *ratelimit.Limiter
	// MaxBodyBytes bounds a request body; zero is DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Registry holds the Prometheus metrics served at /metrics; other packages
	// register theirs in it too. Nil: a registry of the handler's own.
	Registry *prometheus.Registry
	// MetricsToken, when not empty, is the bearer token /metrics requires: a
	// request without it is 401. Empty leaves /metrics open (serve it on a
	// private network then).
	MetricsToken string
	// CORS is the cross-origin policy of /query (default: no origin allowed).
	CORS CORS
	// Dependencies are reported by /healthz besides Postgres. Redis is reported
	// from the Limiter's view of it (mode redis, memory or memory-fallback)
	// unless a dependency is named "redis".
	Dependencies []Dependency
	// PersistedQueries is the cache of automatic persisted queries (package
	// apq); nil means one in Redis when Redis is set, else in process.
	PersistedQueries graphql.Cache[string]
	// Redis is the deployment's Redis (REDIS_URL), nil when there is none; it
	// holds the persisted queries shared by every instance.
	Redis redis.UniversalClient
	// DocumentCacheBytes bounds the validated documents kept for reuse, by
	// their estimated weight in memory (zero: querydoc.DefaultCacheBytes).
	DocumentCacheBytes int64
	// PasswordParams are the argon2id parameters of new password hashes (zero:
	// auth.DefaultPasswordParams), for the Hasher the handler makes.
	PasswordParams auth.PasswordParams
	// Hasher makes and verifies password hashes under a bound on how many run
	// at once; nil means one of the handler's own with PasswordParams and the
	// default bound and wait, its metrics in Registry.
	Hasher *auth.Hasher
	// AuditKeys are the public keys that verify audit checkpoints, the one
	// that signs new ones first (AUDIT_SIGNING_KEY); none: no checkpoint
	// verifies.
	AuditKeys []ed25519.PublicKey
	// Tracing is the OpenTelemetry tracer provider (package tracing); nil is
	// tracing off: no span is made and nothing is allocated for tracing. With
	// it, every request but the probes and scrapes has an HTTP server span
	// continuing the traceparent it came with, every GraphQL operation a span
	// under it, every root field one under that, and the request's trace id is
	// in its log lines and audit events.
	Tracing trace.TracerProvider
	// Live is the instance's hub of subscriptions (package live), which the
	// server runs and closes on SIGTERM; nil: one of the handler's own,
	// whose tailer starts with the first subscription.
	Live *live.Hub
	// Streams bound the streaming transports (WebSocket, SSE): connections,
	// keep-alive, idle and write timeouts.
	Streams StreamLimits
	// Blobs keeps the bytes of attachments: it takes the files of multipart
	// requests and serves GET /attachments/{id}. Nil: no files (multipart
	// requests are 415, no download route).
	Blobs *blobs.Store
	// MaxUploadsPerUser bounds the multipart requests of one user the
	// handler reads at once (MAX_UPLOADS_PER_USER; one more is 429); zero
	// means DefaultMaxUploadsPerUser.
	MaxUploadsPerUser int
	// MaxDownloadRanges is the most ranges of a download's Range header
	// served as ranges (MAX_DOWNLOAD_RANGES; more: the whole file); zero
	// means DefaultMaxRanges.
	MaxDownloadRanges int
	// RequestTimeout bounds the execution of each query and mutation, over
	// HTTP (REQUEST_TIMEOUT; see Transport.Timeout), a WebSocket or SSE;
	// subscriptions are not bounded by it. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is the default of Options.RequestTimeout
// (REQUEST_TIMEOUT).
const DefaultRequestTimeout = 30 * time.Second

// NewHandler returns the complete HTTP handler of TaskFlow, with every guard:
// it has no way to leave one out.
func NewHandler(o Options) http.Handler { return newHandler(o, nil) }

// Guard names a protection that NewHandler always installs and that
// NewUnguardedHandler can leave out.
type Guard string

// The guards.
const (
	// GuardRateLimit is the rate limiter: cost budgets, MAX_QUERY_COST, the
	// login and searchTasks limits, and the RateLimit headers and
	// extensions.cost that report them (Options.Limiter is not used).
	GuardRateLimit Guard = "rate limit"
	// GuardIdempotency is the idempotency middleware: idempotency keys, and
	// the unit of work each root mutation field runs in.
	GuardIdempotency Guard = "idempotency"
)

// NewUnguardedHandler returns NewHandler's handler without the guards named:
// without GuardRateLimit nothing limits a client, without GuardIdempotency a
// retried mutation runs again. It exists only to measure what a guard costs
// (bench/: the "off" variants and the load harness's -guards-off); a server
// uses NewHandler.
func NewUnguardedHandler(o Options, without ...Guard) http.Handler { return newHandler(o, without) }

// newHandler builds the handler without the guards named.
func newHandler(o Options, without []Guard) http.Handler {
	rateLimit, idem := !slices.Contains(without, GuardRateLimit), !slices.Contains(without, GuardIdempotency)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	ops := newOps(o)
	if o.Hasher == nil {
		o.Hasher = auth.NewHasher(auth.HasherOptions{Params: o.PasswordParams, Registerer: ops.reg})
	}
	go auth.LoadCommonPasswords() // before the first sign-up needs it
	if o.Live == nil {
		o.Live = live.New(live.Options{DB: o.DB, Log: o.Log, Registerer: ops.reg})
	}
	if o.Resolvers == nil {
		o.Resolvers = &resolvers.Resolver{DB: o.DB, Hasher: o.Hasher, AuditKeys: o.AuditKeys, Blobs: o.Blobs, Live: o.Live}
	}
	// The schema served is the generated one without the directives TaskFlow
	// does not serve (schema.Unserved: @defer), for introspection and
	// validation alike.
	es := graph.NewExecutableSchema(graph.Config{Resolvers: o.Resolvers,
		Schema: schema.Served(graph.NewExecutableSchema(graph.Config{}).Schema())})
	gql := leafServer{handler.New(es)}
	// Every document is parsed and validated within querydoc's limits, in
	// time linear in its size, and kept in a cache bounded by bytes; the
	// executor takes the validated document from querydoc.Extension.
	documents := querydoc.NewValidator(es.Schema(), querydoc.DefaultLimits)
	if !rateLimit {
		o.Limiter = nil
	} else if o.Limiter == nil {
		// Never fails without a REDIS_URL.
		o.Limiter, _ = ratelimit.New(ratelimit.Options{Log: o.Log, Registerer: ops.reg})
	}
	ops.o.Limiter = o.Limiter // /healthz reports its mode
	if o.PersistedQueries == nil {
		o.PersistedQueries = apq.NewMemoryCache(0)
		if o.Redis != nil {
			o.PersistedQueries = apq.NewRedisCache(o.Redis, "taskflow:", apq.DefaultTTL, o.Log)
		}
	}
	var admitAPQ apq.Admit
	if o.Limiter != nil {
		admitAPQ = o.Limiter.AllowPersistedQuery
	}
	resolveAPQ, storeAPQ := apq.Extensions(o.PersistedQueries, ops.reg, admitAPQ)
	var tracer trace.Tracer
	if o.Tracing != nil {
		tracer = o.Tracing.Tracer(tracerName)
		gql.Use(rootFieldSpans{tracer})
	}
	httpTransport := Transport{Limiter: o.Limiter, MaxBodyBytes: o.MaxBodyBytes, Tracer: tracer, Blobs: o.Blobs,
		Uploads: newUploadSlots(o.MaxUploadsPerUser), Log: o.Log, Timeout: o.RequestTimeout}
	st := newStreams(o.Streams, o.DB, tokenGuard(o.Limiter), o.Log, o.Live, ops.reg)
	readLimit := o.MaxBodyBytes
	if readLimit <= 0 {
		readLimit = DefaultMaxBodyBytes
	}
	// Subscriptions: graphql-ws (WebSocket) and Server-Sent Events, tried
	// before the HTTP transport, which takes every other request.
	gql.AddTransport(newWSTransport(st, o.CORS, readLimit, o.Limiter, o.RequestTimeout))
	gql.AddTransport(sseTransport{http: httpTransport, st: st})
	gql.AddTransport(httpTransport)
	gql.SetQueryCache(querydoc.ExecutorCache{})
	gql.SetParserTokenLimit(querydoc.DefaultLimits.Tokens)
	gql.SetValidationRulesFn(documents.Rules)
	gql.Use(extension.Introspection{})
	gql.Use(extensionsKept{}) // before every extension that reads them
	gql.Use(resolveAPQ)
	gql.Use(querydoc.Extension{Validator: documents, Cache: querydoc.NewCache(o.DocumentCacheBytes)}) // after resolveAPQ: needs the text
	// Counts the deprecated members the operation uses before anything below
	// may refuse it: a refused operation is a client using them all the same.
	gql.Use(newDeprecationsExtension(ops.reg, documents.Deprecated()))
	// The checks that refuse the operation for what it is, before the limiter
	// charges it: a mutation by GET, a string the database cannot store or a
	// value gqlgen would refuse only as its field runs, keys that cannot be
	// honoured (idempotency).
	gql.Use(methodGuard{})
	gql.Use(inputGuard{types: newInputTypes(es.Schema())})
	if idem {
		gql.Use(idempotency.New(idempotency.Options{DB: o.DB, TTL: o.IdempotencyTTL, Wait: o.IdempotencyWait,
			Registerer: ops.reg, Log: o.Log}))
	}
	if o.Limiter != nil {
		gql.Use(o.Limiter.Extension())
	}
	gql.Use(storeAPQ) // after every check that may refuse the operation
	gql.Use(liveExtension{db: o.DB, limiter: o.Limiter, present: presentError(o.Log)})
	gql.Use(changesCursorExtension{db: o.DB}) // the spine head, before any field reads
	gql.SetErrorPresenter(presentError(o.Log))
	gql.SetRecoverFunc(recoverPanic)
	gql.Use(operationMetrics{ops.metrics})

	mux := http.NewServeMux()
	authenticate := auth.Middleware(o.DB, st.guard, authFailure(o.Log))
	mux.Handle("/query", o.CORS.handler(authenticate(
		resolvers.LoaderMiddleware(o.DB, idempotency.ResponseHeaders(gql)))))
	mux.Handle("/audit/export", authenticate(auditExport(o.DB, o.Limiter, o.Log)))
	if o.Blobs != nil {
		mux.Handle("/attachments/{id}", o.CORS.handler(authenticate(download(o.DB, o.Blobs, o.Limiter, o.Log, o.MaxDownloadRanges))))
		mux.Handle("/audit/exports/{id}", authenticate(auditExportDownload(o.DB, o.Blobs, o.Limiter, o.Log, o.MaxDownloadRanges)))
	}
	ops.routes(mux)
	return tracing.Handler(o.Tracing, requestContext(o.TrustedProxies, ops.wrap(mux)))
}

// tokenGuard is the guard of invalid bearer tokens of l (per client network,
// auth.Guard), or nil without a limiter.
func tokenGuard(l *ratelimit.Limiter) auth.Guard {
	if l == nil {
		return nil
	}
	return l.TokenGuard()
}

// requestContext gives every request an id (the client's X-Request-ID when it
// sends a sane one), echoes it in the response, and records the audit context,
// with the trace id when the request is in a trace. The User-Agent is recorded
// cleaned (audit.CleanText: invalid UTF-8 and NUL become U+FFFD, at most
// audit.MaxTextLen bytes), never refused: it is the client software's, not the
// user's, and what it says is informative only, so a broken one should not
// lock its users out. Every consumer (audit log, logs) sees the cleaned value.
func requestContext(proxies Proxies, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !saneRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set("X-Request-ID", id)
		info := reqinfo.Info{
			IP:        proxies.ClientIP(r),
			UserAgent: audit.CleanText(r.UserAgent()),
			RequestID: id,
		}
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			info.TraceID = sc.TraceID().String()
		}
		next.ServeHTTP(w, r.WithContext(reqinfo.With(r.Context(), info)))
	})
}

// saneRequestID accepts 1..128 printable ASCII characters.
func saneRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// writeAuthError answers a request whose bearer token is invalid: HTTP 401 with a
// GraphQL error body coded UNAUTHENTICATED.
func writeAuthError(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("WWW-Authenticate", `Bearer realm="taskflow"`)
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintf(w, `{"errors":[{"message":%q,"extensions":{"code":"UNAUTHENTICATED"}}]}`, store.ErrInvalidToken.Message)
}

func fmtAny(v any) string { return fmt.Sprint(v) }

// leafServer is gqlgen's server refusing extensions that intercept fields:
// the generated functions of leaf fields (scalars and enums read from a struct
// field) marshal at once, without the field middleware (inorder/gen,
// rewriteLeaves; docs/decisions/2026-12-03-leaf-fields.md), so such an
// extension would see only some fields. It panics when one is added, at
// start-up. An operation context mutator that wraps the field middleware
// (idempotency's, rootFieldSpans) does not see leaf fields either: those two
// act on root fields only.
type leafServer struct{ *handler.Server }

// Use adds ext, which must not be a graphql.FieldInterceptor.
func (s leafServer) Use(ext graphql.HandlerExtension) {
	if _, ok := ext.(graphql.FieldInterceptor); ok {
		panic(fmt.Sprintf("httpapi: extension %s intercepts fields, and leaf fields skip field middleware", ext.ExtensionName()))
	}
	s.Server.Use(ext)
}

// AroundFields panics: leaf fields skip field middleware.
func (s leafServer) AroundFields(graphql.FieldMiddleware) {
	panic("httpapi: AroundFields: leaf fields skip field middleware")
}
