package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/maypok86/otter/v2"
	"github.com/riverqueue/river"

	"taskflow/audit"
	"taskflow/egress"
)

// DB is TaskFlow's Postgres store. Every domain operation is a method of DB; each one
// runs in the unit of work carried by its context, or in a transaction of its own
// when there is none.
type DB struct {
	Pool *pgxpool.Pool
	log  *slog.Logger
	// Egress says which webhook URLs may be registered (WEBHOOK_ALLOW_HTTP,
	// WEBHOOK_ALLOW_PRIVATE); the zero value allows https to public
	// addresses only. Set it before the DB is used.
	Egress egress.Policy
	// AuditExportLimits bound the audit exports a workspace starts
	// (AUDIT_EXPORT_PER_DAY, AUDIT_EXPORT_AT_ONCE); the zero value is the
	// defaults. Set it before the DB is used.
	AuditExportLimits AuditExportLimits
	// sealWake tells this instance's sealer that a unit of work committed
	// audit events (see wakeSealer); dispatchWake tells its webhook
	// dispatcher the same.
	sealWake, dispatchWake chan struct{}
	// spineWakes are the channels of SpineWakeups, signalled with sealWake.
	wakeMu     sync.Mutex
	spineWakes []chan struct{}
	// workspaces remembers the workspace of projects and tasks (see
	// workspaceOf): a row never moves to another workspace.
	workspaces *otter.Cache[string, string]
	// smallWorkspaces remembers workspaces of fewer than SearchCountFrom
	// tasks, for smallWorkspaceTTL (see SearchTasks).
	smallWorkspaces *otter.Cache[string, struct{}]
	// sessions remembers what bearer tokens mean (see UserByTokenHash).
	sessions *sessionCache

	// riverOnce makes riverClient, the insert-only River client (river.go).
	riverOnce   sync.Once
	riverClient *river.Client[pgx.Tx]
	riverErr    error

	// reads sends concurrent requests' reads together (see read).
	reads readBatcher

	// unverifiedCheckpoints counts the rows LatestAuditCheckpoint skipped
	// and reported (UnverifiedCheckpoints), and unverifiedRows remembers
	// those reported, to report each once.
	unverifiedCheckpoints atomic.Uint64
	unverifiedRows        reportedRows
}

// Open connects to Postgres at url ("" means libpq defaults and PG* variables, as
// psql with no arguments) and applies the embedded migrations.
func Open(ctx context.Context, url string, log *slog.Logger) (*DB, error) {
	cfg, err := PoolConfig(url)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg, log)
}

// OpenConfig is Open with the caller's pool configuration: PoolConfig's with a
// tracer set, for example.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config, log *slog.Logger) (*DB, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to Postgres at %s: %w", describe(&cfg.ConnConfig.Config), err)
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return New(pool, log), nil
}

// DefaultPoolMaxConns is the size of the connection pool unless DATABASE_URL
// sets pool_max_conns. pgx's own default, max(4, NumCPU), is 4 on a 2-core
// machine: at 16 requests in flight, requests then queue for a connection while
// Postgres idles (docs/decisions/2026-11-29-pool-size.md: a 20-task page went from ~75 to ~170 rps).
const DefaultPoolMaxConns = 16

// PoolConfig parses url ("" means libpq defaults and PG* variables) into the
// pool configuration the server uses: pool_max_conns in url sets the pool
// size, else it is DefaultPoolMaxConns.
func PoolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultPoolMaxConns
	}
	UTCTimes(cfg)
	CancelStatements(cfg)
	return cfg, nil
}

// keepDeadline returns detached (ctx without its cancellation) bounded by
// ctx's deadline, if it has one, and its cancel.
func keepDeadline(ctx, detached context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(detached, d)
	}
	return detached, func() {}
}

// Delays of the cancel request of a statement whose context ended
// (CancelStatements).
const (
	// cancelRequestDelay is how long the statement may go on before the
	// cancel request is sent: none, it was cut short already.
	cancelRequestDelay = 0
	// cancelDeadlineDelay is how long the connection waits for Postgres's
	// answer to the cancel request (the statement's error) before it gives
	// up on the connection and closes it: a Postgres or a network that does
	// not answer holds a request no longer than its deadline and this.
	cancelDeadlineDelay = 2 * time.Second
)

// CancelStatements makes the connections of cfg's pool stop a statement in
// Postgres when its context ends (a request's deadline, REQUEST_TIMEOUT, or
// its client gone): a cancel request (pgconn.CancelRequestContextWatcherHandler)
// makes the backend give up the statement, a lock wait included, at once,
// and the statement fails with query_canceled (57014) while its connection
// stays in the pool. pgx's default closes the connection instead (sending
// the cancel request as it closes), so that each statement cut short costs
// a new connection (TCP, TLS, authentication), which a wave of timeouts
// makes a storm of. The cancel request is protocol-level, on a connection
// of its own, and needs no session state: PgBouncer forwards it to the
// server connection its client is on.
func CancelStatements(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c,
			CancelRequestDelay: cancelRequestDelay, DeadlineDelay: cancelDeadlineDelay}
	}
}

// UTCTimes makes the connections of cfg's pool read timestamptz values as UTC
// times (pgx reads them in time.Local), then runs cfg's AfterConnect, if any.
// Answers then write times as Postgres writes them into the JSON it makes
// (audit snapshots, idempotency records: "Z"), whatever the host's time
// zone, so that a replay is the first answer byte for byte.
func UTCTimes(cfg *pgxpool.Config) {
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		c.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
		if after != nil {
			return after(ctx, c)
		}
		return nil
	}
}

// New wraps an existing pool whose database is already migrated.
func New(pool *pgxpool.Pool, log *slog.Logger) *DB {
	if log == nil {
		log = slog.Default()
	}
	db := &DB{Pool: pool, log: log, sealWake: make(chan struct{}, 1), dispatchWake: make(chan struct{}, 1),
		sessions: newSessionCache(),
		workspaces: otter.Must(&otter.Options[string, string]{MaximumSize: workspaceCacheSize,
			Executor: func(evict func()) { evict() }}),
		smallWorkspaces: otter.Must(&otter.Options[string, struct{}]{MaximumSize: workspaceCacheSize,
			ExpiryCalculator: otter.ExpiryWriting[string, struct{}](smallWorkspaceTTL),
			Executor:         func(evict func()) { evict() }})}
	db.reads = readBatcher{pool: pool, limit: DefaultReadBatches(pool.Config().MaxConns)}
	return db
}

// SetReadBatches sets how many batches of concurrent requests' reads are in
// flight at most (see DefaultReadBatches, the default); 0 sends every read
// on its own. Set it before the DB is used.
func (db *DB) SetReadBatches(n int) { db.reads.limit = max(n, 0) }

// wakeSealer tells the sealer and the webhook dispatcher of this instance
// that events were committed: sends that never block (a wake-up already
// pending is enough); the other readers of the spine (SpineWakeups) are told
// too.
func (db *DB) wakeSealer() {
	for _, c := range []chan struct{}{db.sealWake, db.dispatchWake} {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	db.wakeSpineReaders()
}

// Close closes the pool.
func (db *DB) Close() { db.Pool.Close() }

// Ping reports whether Postgres answers.
func (db *DB) Ping(ctx context.Context) error { return db.Pool.Ping(ctx) }

func describe(c *pgconn.Config) string {
	return fmt.Sprintf("host=%s port=%d user=%s database=%s", c.Host, c.Port, c.User, c.Database)
}

// Querier is what both a pool and a transaction offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

type txKey struct{}

// unitOfWork is the transaction a context carries, valid until the unit of work
// that began it ends.
type unitOfWork struct {
	tx    *pipelinedTx
	ended atomic.Bool
	// audits are the audit events of the unit of work, inserted in the round
	// trip that commits it (see appendAudit).
	audits []audit.Record
	// claim is the idempotency key the unit of work holds, if any.
	claim *idempotencyClaim
	// committed run, in order, once the unit of work committed.
	committed []func()
	// rows are the rows its updates return, filled in when their statements'
	// answers are read, each with the SQL of its JSON (SaveIdempotencyValue).
	rows map[any]madeRow
}

// madeRow is a row an update returns before it is known: sql, a scalar
// subquery that gives the row's JSON (a jsonb) as json.Marshal writes the row,
// with $5 for arg.
type madeRow struct {
	sql string
	arg any
}

// made records that v is a row known once the statements of u are sent,
// whose JSON sql gives (see madeRow).
func (u *unitOfWork) made(v any, sql string, arg any) {
	if u.rows == nil {
		u.rows = map[any]madeRow{}
	}
	u.rows[v] = madeRow{sql: sql, arg: arg}
}

// onCommit runs fn once the unit of work of ctx committed (at once outside one).
func (db *DB) onCommit(ctx context.Context, fn func()) {
	if u := unitOfWorkFrom(ctx); u != nil {
		u.committed = append(u.committed, fn)
		return
	}
	fn()
}

// unitOfWorkFrom returns the unit of work carried by ctx while it runs, or nil.
func unitOfWorkFrom(ctx context.Context) *unitOfWork {
	u, _ := ctx.Value(txKey{}).(*unitOfWork)
	if u == nil || u.ended.Load() {
		return nil
	}
	return u
}

// TxFrom returns the unit-of-work transaction carried by ctx, or nil. A context
// made inside a unit of work and used after it ended carries none: gqlgen hands
// the context of a mutation's resolver on to the fields of its result, which
// are resolved after the mutation committed, and must then read from the pool.
func TxFrom(ctx context.Context) Querier {
	if u := unitOfWorkFrom(ctx); u != nil {
		return u.tx
	}
	return nil
}

// q returns the unit-of-work transaction of ctx, or the pool when there is none.
func (db *DB) q(ctx context.Context) Querier {
	if tx := TxFrom(ctx); tx != nil {
		return tx
	}
	return db.Pool
}

// WithTx runs fn in the unit of work of ctx when there is one (fn joins it and the
// outer owner commits), and otherwise in a new transaction that commits when fn
// returns nil. The context given to fn carries the transaction, so everything fn
// calls joins it. Commit and rollback run on a context detached from the request,
// so a client that disconnects never leaves a transaction half-done.
func (db *DB) WithTx(ctx context.Context, fn func(ctx context.Context, tx Querier) error) error {
	if tx := TxFrom(ctx); tx != nil {
		return fn(ctx, tx)
	}
	return db.UnitOfWork(ctx, func(ctx context.Context) error { return fn(ctx, TxFrom(ctx)) })
}

// UnitOfWork begins a new transaction, runs fn with a context that carries it, and
// commits when fn returns nil or rolls back otherwise. It is the one transaction of a
// mutation: the effect, its audit event and its idempotency record all join it.
// Statements go to Postgres in as few round trips as they allow (see
// pipelinedTx): BEGIN with the first statement, deferred checks and writes with
// the next statement whose answer is needed, and whatever is left, with the
// audit events recorded during fn (all occurring at the time of that round
// trip, inserted unchained: they take no lock) and COMMIT, in one round trip
// after fn returned nil. After a commit that recorded events, the sealer of
// this instance is woken.
// Commit and rollback use a context detached from the request's
// cancellation (a client going away does not cut them short); the commit
// keeps the request's deadline (REQUEST_TIMEOUT): its round trip carries
// most of a mutation's work (a write waiting on another transaction's row
// lock among it), which the deadline must stop. Cut short, its statement
// fails, the transaction rolls back and nothing is committed, unless the
// deadline passed during the COMMIT itself, whose outcome is then unknown:
// an idempotency key makes the retry safe either way.
func (db *DB) UnitOfWork(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	tx := &pipelinedTx{pool: db.Pool}
	detached := context.WithoutCancel(ctx)
	u := &unitOfWork{tx: tx}
	defer u.ended.Store(true)
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(detached)
			panic(p)
		}
		if err != nil {
			if rbErr := tx.Rollback(detached); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
				db.log.ErrorContext(ctx, "rollback failed", "err", rbErr)
			}
		}
	}()
	if err := fn(context.WithValue(ctx, txKey{}, u)); err != nil {
		return mapError(err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	for i := range u.audits {
		r := &u.audits[i]
		r.OccurredAt = at
		tx.queueDeferred(deferred{sql: insertAuditSQL, args: auditRecordArgs(r)})
	}
	commitCtx, cancel := keepDeadline(ctx, detached)
	defer cancel()
	if err := tx.Commit(commitCtx); err != nil {
		return mapError(err)
	}
	if len(u.audits) > 0 {
		db.wakeSealer()
	}
	for _, fn := range u.committed {
		fn()
	}
	return nil
}
