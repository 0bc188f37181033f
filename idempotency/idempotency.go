// Package idempotency makes every mutation that has an idempotencyKey argument
// safe to retry. One gqlgen extension (Middleware) runs each root mutation field
// in its own unit of work and, for a keyed call, claims the key in that same
// transaction, so the effect, its audit event and the stored result commit
// together or not at all. The claim costs no round trip of its own: it goes
// with the mutation's first statement, in the round trip that begins the
// transaction (store.ClaimIdempotencyKeyAhead). A repeat with the same key and
// arguments replays the stored root result. On an instance that ran or
// replayed the key lately the key is claimed first, in a round trip of its
// own, and the resolver is not called; elsewhere the resolver may be called,
// but its first statement's result never reaches it, nothing after that
// statement is sent, and the transaction rolls back. (So a resolver must not
// act outside Postgres before its first statement; nothing outside the unit of
// work would be atomic with its effect anyway.) A concurrent repeat waits for
// the first one's uncommitted claim (bounded by Options.Wait) and then replays.
// Resolvers contain no idempotency code.
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/dunglas/httpsfv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/graph"
	"taskflow/store"
)

// Defaults of Options.TTL and Options.Wait.
const (
	DefaultTTL  = 24 * time.Hour
	DefaultWait = 5 * time.Second
)

// HeaderKey is the request header that carries the key of an operation with a
// single mutation field; HeaderReplayed is the response header set on a replay.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// extensionName is the response extension that lists the replayed fields.
const extensionName = "idempotency"

// Options configure the middleware.
type Options struct {
	DB *store.DB
	// TTL is how long a key is kept (IDEMPOTENCY_TTL); 0 means DefaultTTL.
	TTL time.Duration
	// Wait bounds the wait on a concurrent call with the same key
	// (IDEMPOTENCY_WAIT); 0 means DefaultWait, a negative wait means none (the
	// duplicate is answered IDEMPOTENCY_IN_PROGRESS at once).
	Wait time.Duration
	// Registerer receives the counters; nil leaves them unregistered.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Middleware is the gqlgen extension that runs every root mutation field in a
// unit of work and enforces idempotency keys. Install it with handler.Use, and
// wrap the GraphQL handler in ResponseHeaders so replays are signalled in HTTP.
type Middleware struct {
	db      *store.DB
	ttl     time.Duration
	wait    time.Duration
	log     *slog.Logger
	metrics *metrics
	schema  *ast.Schema
	// results maps each Mutation field with an idempotencyKey argument to the Go
	// type its resolver returns, read from graph.MutationResolver.
	results map[string]reflect.Type
	// recent are the keys this instance ran or replayed lately.
	recent *recentKeys
}

var (
	_ graphql.HandlerExtension        = (*Middleware)(nil)
	_ graphql.OperationContextMutator = (*Middleware)(nil)
)

// New returns the middleware.
func New(o Options) *Middleware {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Wait == 0 {
		o.Wait = DefaultWait
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Middleware{db: o.DB, ttl: o.TTL, wait: o.Wait, log: o.Log, metrics: newMetrics(o.Registerer),
		recent: newRecentKeys()}
}

// ExtensionName names the extension for gqlgen.
func (m *Middleware) ExtensionName() string { return "Idempotency" }

// Validate reads the schema and builds the table of result types from the
// generated graph.MutationResolver interface; it fails if a keyed field has no
// resolver method or a result type that does not survive a JSON round trip.
func (m *Middleware) Validate(schema graphql.ExecutableSchema) error {
	m.schema = schema.Schema()
	results, err := resultTypes(m.schema, reflect.TypeFor[graph.MutationResolver]())
	if err != nil {
		return err
	}
	m.results = results
	return nil
}

// resultTypes maps every field of the schema's mutation type that has an
// idempotencyKey argument to the first result type of the matching method of
// the resolver interface iface (gqlgen names methods after fields).
func resultTypes(schema *ast.Schema, iface reflect.Type) (map[string]reflect.Type, error) {
	out := map[string]reflect.Type{}
	if schema.Mutation == nil {
		return out, nil
	}
	for _, f := range schema.Mutation.Fields {
		if f.Arguments.ForName(keyArg) == nil {
			continue
		}
		var found reflect.Type
		for i := range iface.NumMethod() {
			meth := iface.Method(i)
			if strings.EqualFold(meth.Name, f.Name) && meth.Type.NumOut() == 2 {
				found = meth.Type.Out(0)
			}
		}
		if found == nil {
			return nil, fmt.Errorf("idempotency: no resolver method for Mutation.%s", f.Name)
		}
		if err := jsonSafe(found, map[reflect.Type]bool{}); err != nil {
			return nil, fmt.Errorf("idempotency: result of Mutation.%s cannot be replayed: %w", f.Name, err)
		}
		out[f.Name] = found
	}
	return out, nil
}

// jsonSafe reports an error when a value of t would lose state in a JSON round
// trip: an unexported or json:"-" struct field, a func, a channel or an interface.
func jsonSafe(t reflect.Type, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(reflect.TypeFor[json.Marshaler]()) && reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil // time.Time and friends round-trip themselves
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return jsonSafe(t.Elem(), seen)
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return nil // graphql.Map and other JSON documents
		}
		return jsonSafe(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				return fmt.Errorf("%s.%s is not stored", t, f.Name)
			}
			if err := jsonSafe(f.Type, seen); err != nil {
				return err
			}
		}
		return nil
	case reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return fmt.Errorf("%s is not JSON", t)
	}
	return nil
}

// MutateOperationContext refuses, before anything runs (and before the rate
// limiter charges it), an operation whose keys cannot be honoured:
//   - a malformed key, in the Idempotency-Key header or in any idempotencyKey
//     argument (BAD_USER_INPUT);
//   - any key on an anonymous call (UNAUTHENTICATED): keys are per user, and
//     register and login take none;
//   - an Idempotency-Key header that names no call, because no mutation field
//     of the operation takes a key (logout, login, register), or cannot name
//     one, because the operation has several mutation fields and one of those
//     that take a key has no idempotencyKey argument (BAD_USER_INPUT);
//   - one key for several mutation fields (BAD_USER_INPUT naming the key and
//     the fields): the first would commit, and the second be refused as a
//     reuse, or replay the first, in an answer that says otherwise.
func (m *Middleware) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil || oc.Operation.Operation != ast.Mutation {
		return nil
	}
	// The mutation's fields run through aroundField, inside the field
	// middleware of the other extensions (tracing's spans). The middleware is
	// not a gqlgen field interceptor: gqlgen would call it, and allocate its
	// link of the chain, around every field of every query too
	// (docs/decisions/2026-12-03-lists-in-order.md, addendum).
	outer := oc.ResolverMiddleware
	oc.ResolverMiddleware = func(ctx context.Context, next graphql.Resolver) (any, error) {
		fc := graphql.GetFieldContext(ctx)
		if fc == nil || fc.Object != "Mutation" || fc.Field.Field == nil {
			return outer(ctx, next) // a field of the result: as it is, no allocation
		}
		return outer(ctx, func(ctx context.Context) (any, error) { return m.aroundField(ctx, fc, next) })
	}
	header := ""
	if values := oc.Headers.Values(HeaderKey); len(values) > 0 {
		k, err := headerKey(values)
		if err != nil {
			return badInput(err.Error())
		}
		header = k
	}
	fields := graphql.CollectFields(oc, oc.Operation.SelectionSet, []string{"Mutation"})
	calls := 0                     // fields that call a mutation (not __typename)
	keyed := 0                     // fields that take a key
	byHeader := 0                  // of those, the ones the header is the key of
	var keys []string              // the keys given, in order
	users := map[string][]string{} // key → response names of the fields it is given to
	for _, f := range fields {
		if f.Name != "__typename" {
			calls++
		}
		if _, ok := m.results[f.Name]; !ok {
			continue
		}
		keyed++
		k, given, err := argKey(f.Field, oc.Variables)
		if err != nil {
			return badInput(err.Error())
		}
		if !given {
			if header == "" {
				continue
			}
			k = header
			byHeader++
		}
		if users[k] == nil {
			keys = append(keys, k)
		}
		users[k] = append(users[k], f.Alias)
	}
	if (header != "" || len(keys) > 0) && auth.UserFrom(ctx) == nil {
		return &gqlerror.Error{
			Message:    "idempotency keys are per user: sign in to send one (register and login take no key); nothing was run",
			Extensions: map[string]any{"code": string(errs.CodeUnauthenticated)},
		}
	}
	if header != "" && keyed == 0 && len(fields) > 0 {
		what := "mutation " + names(fields) + " takes"
		if len(fields) > 1 {
			what = "mutations " + names(fields) + " take"
		}
		return badInput(what + " no idempotency key: send it without the " + HeaderKey + " header; nothing was run")
	}
	// With several mutation fields the header is refused unless each has an
	// idempotencyKey argument of its own: one that takes no key (logout) has
	// none, and the header would be ignored where the client counts on it.
	if header != "" && calls > 1 && (byHeader > 0 || keyed < calls) {
		return badInput("the " + HeaderKey + " header is for an operation with a single mutation field; " +
			"give each mutation its own idempotencyKey argument; nothing was run")
	}
	for _, k := range keys {
		if len(users[k]) > 1 {
			err := badInput(fmt.Sprintf("the idempotency key %q is given to several mutation fields (%s): "+
				"a key is for one call, give each its own; nothing was run", k, strings.Join(users[k], ", ")))
			err.Extensions["key"] = k
			err.Extensions["fields"] = users[k]
			return err
		}
	}
	return nil
}

// names lists the response names of fields, as "a, b".
func names(fields []graphql.CollectedField) string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.Alias
	}
	return strings.Join(out, ", ")
}

// badInput is a request-level BAD_USER_INPUT error.
func badInput(msg string) *gqlerror.Error {
	return &gqlerror.Error{Message: msg, Extensions: map[string]any{"code": string(errs.CodeBadUserInput)}}
}

// argKey returns the field's idempotencyKey argument, whether it was given
// (a null is not), and an error for a key that is not valid.
func argKey(f *ast.Field, vars map[string]any) (string, bool, error) {
	a := f.Arguments.ForName(keyArg)
	if a == nil {
		return "", false, nil
	}
	v, err := a.Value.Value(vars)
	if err != nil || v == nil {
		return "", false, nil
	}
	k, _ := v.(string)
	return k, true, validKey(k)
}

// headerKey returns the key of the Idempotency-Key header values, which must
// be exactly one field line in one of two forms:
//
//   - an sf-string Item of RFC 9651 (the IETF draft's form), parsed by
//     httpsfv: `"5b1c0e0e-..."`, with \" and \\ escapes; parameters
//     (`"k";x=1`) are ignored, as RFC 9651 says a recipient must do with
//     parameters it does not know;
//   - a bare key, which TaskFlow has always accepted (a UUID is no sf-token:
//     it may start with a digit): 1 to 255 visible ASCII characters (0x21 to
//     0x7E) other than `"` and `,`, taken literally. No space: a value with
//     one is most likely two header lines a proxy joined ("k1, k2").
//
// The key itself is then checked as an argument's is (validKey).
func headerKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", errs.Errorf(errs.CodeBadUserInput, "send one %s header", HeaderKey)
	}
	v := values[0]
	if !strings.HasPrefix(v, `"`) {
		if !bareKey(v) {
			return "", errs.Errorf(errs.CodeBadUserInput, "the %s header must be a quoted string "+
				`("..." as in RFC 9651) or a bare key of 1 to 255 visible ASCII characters without spaces, quotes or commas`,
				HeaderKey)
		}
		return v, nil
	}
	item, err := httpsfv.UnmarshalItem(values)
	if err != nil {
		return "", errs.Errorf(errs.CodeBadUserInput, "the %s header is not a valid quoted string (RFC 9651 sf-string): "+
			`escape " and \ inside it with \`, HeaderKey)
	}
	k, _ := item.Value.(string) // a value that starts with " can only be a string
	if err := validKey(k); err != nil {
		return "", err
	}
	return k, nil
}

// bareKey reports whether v is a bare Idempotency-Key value (see headerKey).
func bareKey(v string) bool {
	if v == "" || len(v) > maxKeyLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e || c == '"' || c == ',' {
			return false
		}
	}
	return true
}

// maxKeyLen is the longest key, in bytes.
const maxKeyLen = 255

// validKey checks that a key is 1..255 printable ASCII characters.
func validKey(k string) error {
	if k == "" || len(k) > maxKeyLen {
		return errs.Errorf(errs.CodeBadUserInput, "an idempotency key must be 1 to 255 printable ASCII characters")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return errs.Errorf(errs.CodeBadUserInput, "an idempotency key must be 1 to 255 printable ASCII characters")
		}
	}
	return nil
}

// aroundField runs the root mutation field of fc in a unit of work, and
// applies the idempotency rules when the field takes a key and was given one.
func (m *Middleware) aroundField(ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver) (any, error) {
	resultType, keyed := m.results[fc.Field.Name]
	key := ""
	if keyed {
		var err error
		if key, err = m.keyOf(ctx, fc); err != nil {
			return nil, err
		}
	}
	if key == "" {
		var res any
		err := m.db.UnitOfWork(ctx, func(ctx context.Context) (err error) {
			res, err = next(ctx)
			return err
		})
		return res, err
	}
	user := auth.UserFrom(ctx)
	if user == nil {
		return nil, errs.ErrUnauthenticated
	}
	oc := graphql.GetOperationContext(ctx)
	fp, err := Fingerprint(m.schema, fc.Field.Field, oc.Variables)
	if err != nil {
		return nil, err
	}
	field := fc.Field.Name
	var res any
	var replayed bool
	if m.recent.has(user.ID, key) {
		// Most likely a repeat: claim the key before calling the resolver.
		res, replayed, err = m.runClaimed(ctx, next, user.ID, key, field, fp, resultType, m.wait)
	} else {
		started := time.Now()
		res, replayed, err = m.runAhead(ctx, next, user.ID, key, field, fp, resultType)
		if errors.Is(err, store.ErrIdempotencyKeyBusy) {
			// A request with this key is running: wait for it, for what is
			// left of the bound, in a unit of work of its own.
			wait := m.wait
			if wait > 0 {
				wait = max(wait-time.Since(started), time.Millisecond)
			}
			res, replayed, err = m.runClaimed(ctx, next, user.ID, key, field, fp, resultType, wait)
		}
	}
	if errors.Is(err, store.ErrIdempotencyKeyBusy) {
		// The unit of work claimed the key and found, writing its record,
		// that the key had one after all (committed as its claim was read,
		// or by a version that took no lock): it rolled back, and the
		// record is replayed.
		res, replayed, err = m.runClaimed(ctx, next, user.ID, key, field, fp, resultType, m.wait)
		if errors.Is(err, store.ErrIdempotencyKeyBusy) {
			err = fmt.Errorf("idempotency: the key's record was taken twice: %w", err)
		}
	}
	if err == nil || errs.CodeOf(err) == errs.CodeIdempotencyKeyReused {
		m.recent.add(user.ID, key) // the key has a record now
	}
	if err == nil && replayed {
		// A replay is served only to a caller who could read the result
		// now: NOT_FOUND for one no longer a member of its workspace, as
		// for any non-member, FORBIDDEN for a role now too weak to read it
		// (a webhook secret to a demoted ADMIN); the fields under it are
		// read fresh.
		if aerr := m.db.CheckReplayAccess(ctx, user.ID, res); aerr != nil {
			return nil, aerr
		}
	}
	switch {
	case err == nil && replayed:
		m.metrics.requests.WithLabelValues(field, outcomeReplay).Inc()
		signalReplay(ctx, fc.Path(), key)
	case err == nil:
		m.metrics.requests.WithLabelValues(field, outcomeFirstRun).Inc()
	case errs.CodeOf(err) == errs.CodeIdempotencyKeyReused:
		m.metrics.requests.WithLabelValues(field, outcomeMismatch).Inc()
	case errs.CodeOf(err) == errs.CodeIdempotencyInProgress:
		m.metrics.requests.WithLabelValues(field, outcomeInProgress).Inc()
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// errReplayed ends the unit of work of a replay made ahead: the mutation's
// first statement ran in it, so it rolls back.
var errReplayed = errors.New("idempotency: replayed")

// runAhead runs the call in a unit of work whose key claim goes in its first
// round trip (store.ClaimIdempotencyKeyAhead), so a first run costs no round
// trip more than the same call without a key: for a create, that is the one
// round trip of the whole unit of work. When the key has a record, nothing of
// the call applies (its writes are guarded by the claim, migration 0009), the
// unit of work ends without effect and the record is replayed. It returns
// store.ErrIdempotencyKeyBusy when a running transaction holds the key.
func (m *Middleware) runAhead(ctx context.Context, next graphql.Resolver, userID, key, field string, fp []byte,
	resultType reflect.Type) (res any, replayed bool, err error) {
	var claim *store.PendingClaim
	settle := func(ctx context.Context) error {
		rec, err := claim.Result(ctx)
		if err != nil {
			return err
		}
		if rec != nil {
			if res, err = m.decode(rec, key, userID, field, fp, resultType); err != nil {
				return err
			}
			return errReplayed
		}
		return nil
	}
	err = m.db.UnitOfWork(ctx, func(ctx context.Context) error {
		var err error
		if claim, err = m.db.ClaimIdempotencyKeyAhead(ctx, userID, key, field, fp, m.ttl, m.wait); err != nil {
			return err
		}
		out, runErr := next(ctx)
		if runErr != nil || claim.Refused() {
			// The claim decides: a repeat replays whatever its resolver met.
			if err := settle(ctx); err != nil {
				return err
			}
			if runErr != nil {
				return runErr
			}
		}
		res = out
		return m.save(ctx, userID, key, field, res)
	})
	if err != nil && !errors.Is(err, errReplayed) && claim != nil && claim.Refused() {
		// The round trip that ended the unit of work found the key taken.
		err = settle(ctx)
	}
	if errors.Is(err, errReplayed) {
		return res, true, nil
	}
	return res, false, err
}

// runClaimed runs the call in a unit of work that claims the key first, in a
// round trip of its own (store.ClaimIdempotencyKey), waiting at most wait for a
// running transaction that holds it.
func (m *Middleware) runClaimed(ctx context.Context, next graphql.Resolver, userID, key, field string, fp []byte,
	resultType reflect.Type, wait time.Duration) (res any, replayed bool, err error) {
	err = m.db.UnitOfWork(ctx, func(ctx context.Context) error {
		rec, err := m.db.ClaimIdempotencyKey(ctx, userID, key, field, fp, m.ttl, wait)
		if err != nil {
			return err
		}
		if rec != nil {
			res, err = m.decode(rec, key, userID, field, fp, resultType)
			replayed = err == nil
			return err
		}
		if res, err = next(ctx); err != nil {
			return err
		}
		return m.save(ctx, userID, key, field, res)
	})
	return res, replayed, err
}

// decode returns the stored result of a key's record, or errKeyReused when the
// record is of another field or other arguments.
func (m *Middleware) decode(rec *store.IdempotencyRecord, key, userID, field string, fp []byte,
	resultType reflect.Type) (any, error) {
	if rec.Field != field || string(rec.Fingerprint) != string(fp) {
		return nil, errKeyReused
	}
	if rec.Result == nil {
		return nil, fmt.Errorf("idempotency key %q of user %s has no stored result", key, userID)
	}
	v := reflect.New(resultType)
	if err := json.Unmarshal(rec.Result, v.Interface()); err != nil {
		return nil, fmt.Errorf("decode stored result of %s: %w", field, err)
	}
	return v.Elem().Interface(), nil
}

// save stores the call's result as the key's record, written when the unit of
// work commits.
func (m *Middleware) save(ctx context.Context, userID, key, field string, res any) error {
	if err := m.db.SaveIdempotencyValue(ctx, userID, key, res); err != nil {
		return fmt.Errorf("save the result of %s: %w", field, err)
	}
	return nil
}

// errKeyReused answers a key used before for another field or other arguments.
var errKeyReused = errs.Errorf(errs.CodeIdempotencyKeyReused,
	"this idempotency key was already used for a different mutation or different arguments")

// keyOf returns the key of a keyed field: its idempotencyKey argument, else the
// Idempotency-Key header (MutateOperationContext has checked it names this field
// alone), else "".
func (m *Middleware) keyOf(ctx context.Context, fc *graphql.FieldContext) (string, error) {
	if k, ok := fc.Args[keyArg].(*string); ok && k != nil {
		return *k, validKey(*k)
	}
	values := graphql.GetOperationContext(ctx).Headers.Values(HeaderKey)
	if len(values) == 0 {
		return "", nil
	}
	return headerKey(values)
}

// replayKey is the context key of the replay signal of a request.
type replayKey struct{}

// replaySignal marks the replays of one request in its response header. A
// WebSocket's operations share their upgrade request's, so the list of
// replayed fields is the operation's own, in its response context.
type replaySignal struct {
	header http.Header
	mu     sync.Mutex
}

// replayList is the value of extensions.idempotency.
type replayList struct {
	mu      sync.Mutex
	entries []replayEntry
}

// replayEntry is one replayed field in extensions.idempotency.
type replayEntry struct {
	Path     ast.Path `json:"path"`
	Key      string   `json:"key"`
	Replayed bool     `json:"replayed"`
}

// MarshalJSON writes the list of replayed fields.
func (l *replayList) MarshalJSON() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return json.Marshal(l.entries)
}

// ResponseHeaders lets the middleware mark replays in the HTTP response
// (Idempotent-Replayed: true): wrap the GraphQL handler in it.
func ResponseHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), replayKey{}, &replaySignal{header: w.Header()})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// signalReplay marks the response as a replay and lists the field in
// extensions.idempotency.
func signalReplay(ctx context.Context, path ast.Path, key string) {
	sig, _ := ctx.Value(replayKey{}).(*replaySignal)
	if sig == nil {
		sig = &replaySignal{}
	}
	sig.mu.Lock()
	if sig.header != nil {
		sig.header.Set(HeaderReplayed, "true")
	}
	// The list of this operation (its response context), never one kept on
	// the request: the operations of a WebSocket share it, and a list kept
	// there would be the first replaying operation's, sent already.
	list, ok := graphql.GetExtension(ctx, extensionName).(*replayList)
	if !ok {
		list = &replayList{}
		graphql.RegisterExtension(ctx, extensionName, list)
	}
	sig.mu.Unlock()
	list.mu.Lock()
	list.entries = append(list.entries, replayEntry{Path: path, Key: key, Replayed: true})
	list.mu.Unlock()
}
