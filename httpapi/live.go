package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	coderws "github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"golang.org/x/time/rate"

	"taskflow/auth"
	"taskflow/cpumeter"
	"taskflow/errs"
	"taskflow/idempotency"
	"taskflow/jsoncanon"
	"taskflow/live"
	"taskflow/promreg"
	"taskflow/querydoc"
	"taskflow/ratelimit"
	"taskflow/ratelimit/cost"
	"taskflow/reqinfo"
	"taskflow/resolvers"
	"taskflow/store"
)

// Defaults of StreamLimits.
const (
	// DefaultMaxStreams is the most WebSocket connections and SSE streams
	// one instance holds open.
	DefaultMaxStreams = 10000
	// DefaultMaxStreamsPerClient is the most of them one client holds open
	// on one instance, the client being a signed-in user, or the network of
	// an anonymous stream: twice live.DefaultMaxPerUser, so that one user
	// with a connection per subscription is not refused, and about what one
	// browser can open at all (Firefox: 200 WebSockets, Chrome: 255); 50
	// clients, not one, are needed to fill DefaultMaxStreams.
	DefaultMaxStreamsPerClient = 200
	// DefaultKeepAlive is the interval of keep-alive pings.
	DefaultKeepAlive = 15 * time.Second
	// DefaultStreamIdle is how long a WebSocket connection stays open with no
	// subscription on it.
	DefaultStreamIdle = 5 * time.Minute
	// DefaultStreamWriteTimeout bounds one write to a client: a client that
	// does not read for that long is disconnected.
	DefaultStreamWriteTimeout = 10 * time.Second
	// wsInitTimeout bounds the wait for connection_init.
	wsInitTimeout = 10 * time.Second
	// maxOperationID is the longest id, in bytes, an operation may be started
	// with over a WebSocket: the longest whose 4409 reason fits a close frame
	// (123 bytes). gqlgen keeps the id of each running operation and repeats it
	// in each of its messages.
	maxOperationID = 123 - len(subscriberFor+alreadyExists)
	// subscriberFor and alreadyExists frame the id in the reason of 4409, in
	// graphql-transport-ws's words.
	subscriberFor, alreadyExists = "Subscriber for ", " already exists"
)

// The rate at which one client (a user; anonymous: a network, its WebSockets
// waiting for connection_init apart) may open streams (WebSocket upgrades,
// SSE requests) on an instance: StreamOpensPerSecond a second after a burst
// of StreamOpenBurst (a token bucket, golang.org/x/time/rate). An open past
// it is refused 429 RATE_LIMITED (limit "opens", Retry-After 1) before
// anything of it is done. A stream's place (SUBSCRIPTION_MAX_PER_CLIENT)
// bounds how many a client holds, not how often it opens them: one client
// whose WebSockets the server closed (a message over MaxJSONItems) opened
// them again 735 to 811 times a second, each an HTTP request, an upgrade, a
// gqlgen connection and a close that no turn paced (bench/abuse's
// ws-big-messages: the victim's p99 24 to 43 times its idle value).
const (
	// StreamOpensPerSecond is the sustained rate: a graphql-ws client
	// reconnects with a backoff of a second or more, a browser opens a
	// WebSocket a tab, and a browser's upgrade carries no token, so the
	// users behind one network share their network's rate until their
	// connection_init. A connection opened and closed costs the server
	// about a millisecond and a half: 20 a second are 3% of a core.
	StreamOpensPerSecond = 20
	// StreamOpenBurst is the burst: every place of a client
	// (DefaultMaxStreamsPerClient) at once, as after an instance restarted.
	StreamOpenBurst = 200
)

// The message rate of one WebSocket connection: the server reads its
// messages (any type: a ping costs as much to read, decode and answer as a
// subscribe costs to read) at most WSMessagesPerSecond a second, after a
// burst of WSMessageBurst (a token bucket, golang.org/x/time/rate). A message
// past it is left unread until its token comes (wsConn.awaitRate): TCP's
// flow control slows the client, and nothing is closed or dropped.
const (
	// WSMessagesPerSecond is the sustained rate. A graphql-ws client sends a
	// connection_init, a subscribe and at most one complete per operation, a
	// pong per server ping (every SUBSCRIPTION_KEEPALIVE) and perhaps pings
	// of its own (every 10 s or so): the default budget of 1000 points a
	// minute pays for about 17 operations a second that read anything, 33
	// messages with their completes, so a client within its budget is not
	// held back. A ping costs the server about 8 µs of CPU to read and
	// answer, 20 µs when its read waited for the bucket (bench/abuse
	// ws-message-flood, whose 200 anonymous connections, a network's
	// DefaultMaxStreamsPerClient, flooding at once took 1.4 cores without
	// the bound, 0.17 with it): a connection at this rate takes 1 ms a
	// second, a network's 200 a fifth of a core, under the quarter of a core
	// its turns may average.
	WSMessagesPerSecond = 50
	// WSMessageBurst is the burst: a graphql-ws client that reconnects sends
	// a subscribe for each of its operations at once, and a user holds up to
	// live.DefaultMaxPerUser (100) subscriptions.
	WSMessageBurst = 100
)

// WebSocket close codes TaskFlow sends besides the protocol's own.
const (
	// CloseServiceRestart (1012, RFC 6455's "Service Restart"): the instance
	// is shutting down; reconnect, to another instance, and subscribe again
	// with the last cursor.
	CloseServiceRestart = 1012
	// CloseUnauthorized (4401, graphql-ws's Unauthorized): the token of
	// connection_init is not valid; the client must sign in again.
	CloseUnauthorized = 4401
	// CloseTooManyRequests (4429, graphql-ws's "Too many initialisation
	// requests"): the client's network sent too many invalid tokens
	// (RATE_LIMIT_BAD_TOKENS_PER_IP), and the reason says when to retry; or
	// the user connection_init signed in already holds MaxPerClient
	// WebSocket connections and SSE streams, or, for an anonymous
	// connection_init, its network holds MaxPerClient anonymous ones (the
	// 429 of limit "connections" of an upgrade or a stream), and the reason
	// says so: close one first.
	CloseTooManyRequests = 4429
	// CloseSubscriberExists (4409, graphql-ws's "Subscriber for <id> already
	// exists"): the client started an operation with the id of one still
	// running on the connection.
	CloseSubscriberExists = 4409
	// CloseBadRequest (4400, graphql-transport-ws's "Bad request"): a message
	// of a type or form the protocol does not have, or an operation id over
	// maxOperationID bytes. The legacy subprotocol closes with 1002 instead.
	CloseBadRequest = 4400
	// CloseInitTimeout (4408, graphql-transport-ws's "Connection
	// initialisation timeout"): no connection_init within wsInitTimeout. The
	// legacy subprotocol closes with 1002 instead.
	CloseInitTimeout = 4408
)

// clientMessages are the types of message a client sends: over
// graphql-transport-ws (true) and over the legacy graphql-ws (false).
var clientMessages = map[bool][]string{
	true:  {"connection_init", "ping", "pong", "subscribe", "complete"},
	false: {"connection_init", "connection_terminate", "start", "stop"},
}

// transportWS is graphql-transport-ws, the subprotocol whose close codes
// (4400, 4401, 4408, 4429) a connection follows; the legacy graphql-ws
// (subscriptions-transport-ws) has none of its own, and closes with 1002.
const transportWS = "graphql-transport-ws"

// StreamLimits bound the streaming transports (WebSocket and SSE) of one
// instance.
type StreamLimits struct {
	// MaxConnections is the most WebSocket connections and SSE streams open
	// at once (zero: DefaultMaxStreams); over it an upgrade or a stream is
	// refused with 503 STREAM_INTERRUPTED and Retry-After.
	MaxConnections int
	// MaxPerClient is the most of them one client holds open at once (zero:
	// DefaultMaxStreamsPerClient), the client being the signed-in user of a
	// stream, or for an anonymous stream its network, as the rate limiter
	// counts an anonymous caller (ratelimit.ClientNetwork of the address
	// TRUSTED_PROXIES resolves: an IPv4 address, an IPv6 /64): users behind
	// one NAT each have their own. Over it an upgrade or a stream is refused
	// with 429 RATE_LIMITED (extensions.limit "connections") and
	// Retry-After, before it takes a place of MaxConnections: one client
	// cannot fill the instance. A WebSocket whose upgrade carries no token
	// counts, until its connection_init, on its network's connections
	// waiting for one, a count of their own also capped at MaxPerClient
	// (the upgrade checks only that one: a network's idle anonymous
	// connections do not keep its users from signing in, a browser sending
	// the token in connection_init), and then on its user, or, anonymous,
	// on its network's anonymous streams; one over that cap is closed there
	// with CloseTooManyRequests, and gives its waiting place back.
	MaxPerClient int
	// KeepAlive is the interval of pings (WebSocket ping messages, SSE
	// comments) (zero: DefaultKeepAlive). A WebSocket client that does not
	// answer a ping within twice the interval is disconnected.
	KeepAlive time.Duration
	// Idle closes a WebSocket connection that has had no subscription for
	// that long (zero: DefaultStreamIdle).
	Idle time.Duration
	// WriteTimeout bounds one write to a client (zero:
	// DefaultStreamWriteTimeout).
	WriteTimeout time.Duration
}

func (l StreamLimits) withDefaults() StreamLimits {
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxStreams
	}
	if l.MaxPerClient <= 0 {
		l.MaxPerClient = DefaultMaxStreamsPerClient
	}
	if l.KeepAlive <= 0 {
		l.KeepAlive = DefaultKeepAlive
	}
	if l.Idle <= 0 {
		l.Idle = DefaultStreamIdle
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultStreamWriteTimeout
	}
	return l
}

// streams counts the open streams of the instance against its cap and each
// client's, and closes the WebSocket connections when the hub closes
// (shutdown).
type streams struct {
	limits StreamLimits
	db     *store.DB
	// guard bounds a client's invalid tokens (nil: no bound).
	guard auth.Guard
	log   *slog.Logger
	// gauge is taskflow_streams_open; refused is
	// taskflow_streams_refused_total, by reason.
	gauge   prometheus.Gauge
	refused *prometheus.CounterVec
	// delayed is taskflow_ws_messages_delayed_total.
	delayed prometheus.Counter
	// warned is when a refusal by a network's cap was last logged (Unix
	// nanoseconds): once a minute at most.
	warned atomic.Int64

	mu   sync.Mutex
	open int
	// held counts the open streams of each client (a user, a network): a
	// client has an entry only while it has a stream open, so the map holds
	// at most MaxConnections entries.
	held map[streamClient]int
	// opens is each client's rate of opening streams (StreamOpensPerSecond);
	// an entry whose bucket is full again is dropped (forgetOpens).
	opens   map[streamClient]*rate.Limiter
	conns   map[*wsConn]struct{}
	closing bool
}

// maxOpenEntries is how many clients' rates of opening streams an instance
// keeps before it drops those whose bucket is full (StreamOpenBurst / rate:
// 20 s after their last open): such an entry is as a new one.
const maxOpenEntries = 4096

// opening takes a token of client's rate of opening streams and reports
// whether it had one; s.mu is held.
func (s *streams) opening(client streamClient) bool {
	lim := s.opens[client]
	if lim == nil {
		if len(s.opens) >= maxOpenEntries {
			s.forgetOpens()
		}
		lim = rate.NewLimiter(StreamOpensPerSecond, StreamOpenBurst)
		s.opens[client] = lim
	}
	return lim.Allow()
}

// forgetOpens drops the rates whose bucket is full again; s.mu is held.
func (s *streams) forgetOpens() {
	now := time.Now()
	for c, lim := range s.opens {
		if lim.TokensAt(now) >= StreamOpenBurst {
			delete(s.opens, c)
		}
	}
}

// streamClient is the client whose count holds a stream's place: its
// signed-in user, or the network (ratelimit.ClientNetwork) of an anonymous
// stream; exactly one of the two is set. A network's WebSocket connections
// upgraded without a token that have not sent their connection_init yet are
// counted apart from its anonymous streams: pending set.
type streamClient struct {
	user    string // the user's id
	network string
	pending bool // network's, waiting for connection_init
}

// clientOf is the client of a stream that starts with ctx: its user, if
// signed in, else its network.
func clientOf(ctx context.Context) streamClient {
	if u := auth.UserFrom(ctx); u != nil {
		return streamClient{user: u.ID}
	}
	return streamClient{network: ratelimit.ClientNetwork(reqinfo.From(ctx).IP)}
}

// wsClientOf is the client whose count a WebSocket upgraded with ctx starts
// on: the user of the upgrade's token, else its network's connections
// waiting for their connection_init.
func wsClientOf(ctx context.Context) streamClient {
	c := clientOf(ctx)
	c.pending = c.user == ""
	return c
}

// what names the client in a refusal: "user" or "network".
func (c streamClient) what() string {
	if c.user != "" {
		return "user"
	}
	return "network"
}

// reason is the label of taskflow_streams_refused_total of a refusal by the
// client's cap: "user", or "client" for a network's, of its anonymous
// streams or of its connections waiting for connection_init (its name from
// before signed-in streams counted on their user).
func (c streamClient) reason() string {
	if c.user != "" {
		return "user"
	}
	return "client"
}

// newStreams returns the stream registry of a handler, its metrics in reg;
// the WebSocket connections close with 1012 when hub closes.
func newStreams(limits StreamLimits, db *store.DB, guard auth.Guard, log *slog.Logger, hub *live.Hub, reg prometheus.Registerer) *streams {
	s := &streams{limits: limits.withDefaults(), db: db, guard: guard, log: log, held: map[streamClient]int{}, conns: map[*wsConn]struct{}{},
		opens: map[streamClient]*rate.Limiter{},
		gauge: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskflow_streams_open",
			Help: "WebSocket connections and SSE streams open on this instance.",
		})),
		refused: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskflow_streams_refused_total",
			Help: "WebSocket upgrades and SSE streams refused before they started, by reason: client " +
				"(the network of an anonymous one held SUBSCRIPTION_MAX_PER_CLIENT anonymous streams, " +
				"a WebSocket refused at its anonymous connection_init too, or as many WebSockets waiting for their connection_init), " +
				"user (the signed-in user did; a WebSocket refused at its connection_init too), " +
				"instance (SUBSCRIPTION_MAX_CONNECTIONS), restarting, " +
				"opens (the client opened more than " + strconv.Itoa(StreamOpensPerSecond) + " a second, after " + strconv.Itoa(StreamOpenBurst) + " at once).",
		}, []string{"reason"})),
		delayed: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskflow_ws_messages_delayed_total",
			Help: "WebSocket messages whose read waited because their connection sent faster than its message rate (" +
				strconv.Itoa(WSMessagesPerSecond) + " a second after a burst of " + strconv.Itoa(WSMessageBurst) + "): held back, not dropped.",
		})),
	}
	go func() {
		<-hub.Closing()
		s.closeAll()
	}()
	return s
}

// acquire takes a place for a stream of r on client's count (clientOf: its
// user if signed in, else its network; a WebSocket's: wsClientOf) and returns
// the client, to be given to release when the stream ends, whatever way it
// ends (a deferred call); a WebSocket's place may move to another client
// meanwhile (claim). Or it
// answers and returns false: 503 STREAM_INTERRUPTED with Retry-After when the
// instance is closing; 429 RATE_LIMITED with Retry-After when the client
// holds MaxPerClient streams (checked before the instance's cap: a client at
// its cap is told so even when the instance is full too, and can take no
// more of its places); 503 STREAM_INTERRUPTED with Retry-After when the
// instance holds MaxConnections.
func (s *streams) acquire(w http.ResponseWriter, r *http.Request, client streamClient) (streamClient, bool) {
	s.mu.Lock()
	reason := ""
	switch {
	case s.closing:
		reason = "restarting"
	case s.held[client] >= s.limits.MaxPerClient:
		reason = client.reason()
	case s.open >= s.limits.MaxConnections:
		reason = "instance"
	case !s.opening(client):
		reason = "opens"
	default:
		s.held[client]++
		s.open++
		s.gauge.Inc()
	}
	s.mu.Unlock()
	if reason == "" {
		return client, true
	}
	s.refused.WithLabelValues(reason).Inc()
	w.Header().Set("Content-Type", mediaJSON)
	if reason == "opens" {
		writeTooMany(w, 1, gqlerror.List{{
			Message: "too many WebSocket connections and event streams opened by your " + client.what() +
				" on this server of late: open them more slowly (at most " + strconv.Itoa(StreamOpensPerSecond) +
				" a second, after " + strconv.Itoa(StreamOpenBurst) + " at once)",
			Extensions: map[string]any{"code": string(errs.CodeRateLimited), "retryAfter": 1,
				"limit": "opens", "maximum": StreamOpensPerSecond}}})
		return streamClient{}, false
	}
	if reason == client.reason() {
		if client.user == "" {
			s.warnClientCap(r.Context(), client.network)
		}
		writeTooMany(w, 1, gqlerror.List{{
			Message: s.tooManyMessage(client),
			Extensions: map[string]any{"code": string(errs.CodeRateLimited), "retryAfter": 1,
				"limit": "connections", "maximum": s.limits.MaxPerClient}}})
		return streamClient{}, false
	}
	msg := "this instance holds as many streams as it may: try again, another instance may answer"
	if reason == "restarting" {
		msg = "this instance is restarting: try again, another instance will answer"
	}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, struct {
		Errors gqlerror.List `json:"errors"`
	}{gqlerror.List{{Message: msg, Extensions: map[string]any{"code": string(errs.CodeStreamInterrupted), "retryAfter": 1}}}})
	return streamClient{}, false
}

// tooManyMessage is the message of a refusal by client's cap.
func (s *streams) tooManyMessage(client streamClient) string {
	if client.user != "" {
		return "too many WebSocket connections and event streams open for your user on this server: " +
			"close one first (at most " + strconv.Itoa(s.limits.MaxPerClient) + " per user)"
	}
	if client.pending {
		return "too many WebSocket connections from your network on this server wait for their connection_init: " +
			"send it, or try again in a moment (at most " + strconv.Itoa(s.limits.MaxPerClient) + " per network)"
	}
	return "too many WebSocket connections and event streams open from your network on this server: " +
		"close one first (at most " + strconv.Itoa(s.limits.MaxPerClient) + " per network for streams not signed in)"
}

// claim moves the place of c, an open WebSocket connection, from the count of
// the client that holds it to to's, and reports whether it did: false when to
// holds MaxPerClient already, and then the place stays where it was, for
// release when the connection ends. A place held by to already stays.
func (s *streams) claim(c *wsConn, to streamClient) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.client == to {
		return true
	}
	if s.held[to] >= s.limits.MaxPerClient {
		return false
	}
	s.held[to]++
	s.giveBack(c.client)
	c.client = to
	return true
}

// releaseConn gives back the place of c, whichever client's count holds it
// now (claim).
func (s *streams) releaseConn(c *wsConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	s.gauge.Dec()
	s.giveBack(c.client)
}

// warnClientCap logs a refusal by the client's cap, once a minute at most:
// behind a proxy that is not in TRUSTED_PROXIES every client is the proxy, and
// all of them share one cap.
func (s *streams) warnClientCap(ctx context.Context, client string) {
	now, last := time.Now().UnixNano(), s.warned.Load()
	if now-last < int64(time.Minute) || !s.warned.CompareAndSwap(last, now) {
		return
	}
	s.log.WarnContext(ctx, "a client holds SUBSCRIPTION_MAX_PER_CLIENT anonymous WebSocket connections and SSE streams, "+
		"or as many WebSocket connections waiting for their connection_init: its next ones are refused "+
		"with 429, or 4429 at an anonymous connection_init (logged once a minute at most; taskflow_streams_refused_total{reason=\"client\"} counts them). "+
		"Behind a proxy or load balancer, check TRUSTED_PROXIES: without it every client is the proxy",
		"client", client, "max", s.limits.MaxPerClient)
}

// release gives back the place acquire took for a stream of client.
func (s *streams) release(client streamClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	s.gauge.Dec()
	s.giveBack(client)
}

// giveBack takes one place off client's count, s.mu held.
func (s *streams) giveBack(client streamClient) {
	if s.held[client] <= 1 {
		delete(s.held, client)
	} else {
		s.held[client]--
	}
}

// closeAll closes every WebSocket connection with 1012 and refuses new
// streams.
func (s *streams) closeAll() {
	s.mu.Lock()
	s.closing = true
	conns := make([]*wsConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.closeWith(CloseServiceRestart, "the server is restarting: reconnect and subscribe again with the last cursor")
	}
}

// sameOrigin reports whether origin names the host the request came to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// wsTransport is graphql-ws (the graphql-transport-ws subprotocol) at /query:
// gqlgen's protocol implementation over a coder/websocket connection of
// TaskFlow's own (write deadlines, close codes, the instance's cap), after a
// check of the Origin header against CORS_ALLOWED_ORIGINS (cross-site
// WebSocket hijacking: a browser sends the cookies of the API's site from
// any page, so only listed origins and the API's own may open one).
type wsTransport struct {
	ws   transport.Websocket
	st   *streams
	cors CORS
	// limiter gives each subscription's document its caller's turn (inTurn).
	limiter *ratelimit.Limiter
	// timeout bounds each query and mutation sent over the connection
	// (REQUEST_TIMEOUT; inTurn).
	timeout time.Duration
}

var _ graphql.Transport = wsTransport{}

// newWSTransport configures gqlgen's WebSocket transport.
func newWSTransport(st *streams, cors CORS, readLimit int64, limiter *ratelimit.Limiter, timeout time.Duration) wsTransport {
	t := wsTransport{st: st, cors: cors, limiter: limiter, timeout: timeout}
	t.ws = transport.Websocket{
		Implementation:        wsImplementation{st},
		InitFunc:              st.wsInit,
		InitTimeout:           wsInitTimeout,
		KeepAlivePingInterval: st.limits.KeepAlive,
		PingPongInterval:      st.limits.KeepAlive,
		PayloadReadLimit:      &readLimit,
		ErrorFunc: func(ctx context.Context, err error) {
			st.log.DebugContext(ctx, "websocket", "err", err)
		},
	}
	return t
}

// Supports accepts upgrade requests.
func (t wsTransport) Supports(r *http.Request) bool { return r.Header.Get("Upgrade") != "" }

// Do checks the origin and the cap, then serves the connection until it
// closes.
func (t wsTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	if origin := r.Header.Get("Origin"); origin != "" && !t.cors.allows(origin) && !sameOrigin(origin, r.Host) {
		w.Header().Set("Content-Type", mediaJSON)
		writeJSON(w, http.StatusForbidden, struct {
			Errors gqlerror.List `json:"errors"`
		}{gqlerror.List{{Message: "this origin may not open a WebSocket to the API: list it in CORS_ALLOWED_ORIGINS",
			Extensions: map[string]any{"code": string(errs.CodeForbidden)}}}})
		return
	}
	if len(r.Header.Values(idempotency.HeaderKey)) > 0 {
		// gqlgen gives every operation of the connection the upgrade's
		// headers: the key would be every mutation's (an empty line, or an
		// empty first line, too: every mutation would be refused for it).
		w.Header().Set("Content-Type", mediaJSON)
		writeJSON(w, http.StatusBadRequest, struct {
			Errors gqlerror.List `json:"errors"`
		}{gqlerror.List{{Message: "the " + idempotency.HeaderKey + " header is the key of one HTTP request's mutation, " +
			"and a WebSocket carries many operations: send the upgrade without it and give each mutation its own idempotencyKey argument",
			Extensions: map[string]any{"code": string(errs.CodeBadUserInput)}}}})
		return
	}
	client, ok := t.st.acquire(w, r, wsClientOf(r.Context()))
	if !ok {
		return
	}
	c := &wsConn{st: t.st, client: client, limiter: t.limiter, caller: r.Context(),
		rate: rate.NewLimiter(WSMessagesPerSecond, WSMessageBurst)}
	c.closed, c.closeNow = context.WithCancel(context.Background())
	defer c.closeNow()
	defer t.st.releaseConn(c)
	t.ws.Do(w, r.WithContext(context.WithValue(r.Context(), wsConnKey{}, c)), inTurn{exec, t.limiter, t.st.db, t.st.guard, t.timeout})
	c.endTurn()
	c.stopIdle()
}

// wsInit authenticates a connection by the Authorization of the
// connection_init payload ("Bearer <token>"), which wins over the upgrade
// request's header; a bad one closes the connection with 4401. The
// connection's place moves to the user's count (claim); a user who holds
// MaxPerClient streams already closes it with 4429, the place left on the
// count it was on (its network's waiting for connection_init, or the
// upgrade's token's user's) until the connection ends. Without a token a
// place waiting for connection_init moves to the network's anonymous
// streams, and a network holding MaxPerClient of them closes the
// connection with 4429 likewise; the place of an upgrade's token's user
// stays there.
func (s *streams) wsInit(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	a := payload.Authorization()
	if a == "" {
		if c := wsConnFrom(ctx); c != nil {
			return s.claimOrRefuse(ctx, ctx, c, streamClient{network: s.networkOf(c)})
		}
		return ctx, nil, nil
	}
	refuse := func(err error) (context.Context, *transport.InitPayload, error) {
		ctx = transport.WithWebsocketCloseCode(ctx, CloseUnauthorized)
		return transport.AppendCloseReason(ctx, "Unauthorized: invalid, expired or revoked token"), nil, err
	}
	scheme, tok, ok := strings.Cut(a, " ")
	if tok = strings.TrimSpace(tok); !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return refuse(store.ErrInvalidToken)
	}
	authed, err := auth.Authenticate(ctx, s.db, s.guard, tok)
	if errs.CodeOf(err) == errs.CodeRateLimited {
		var e *errs.Error
		errors.As(err, &e)
		retry, _ := e.Extensions["retryAfter"].(int)
		ctx = transport.WithWebsocketCloseCode(ctx, CloseTooManyRequests)
		return transport.AppendCloseReason(ctx, "Too many invalid tokens: retry in "+strconv.Itoa(retry)+" s"), nil, err
	}
	if err != nil {
		return refuse(err)
	}
	if c := wsConnFrom(ctx); c != nil {
		return s.claimOrRefuse(ctx, authed, c, clientOf(authed))
	}
	return authed, nil, nil
}

// networkOf is the network whose anonymous streams c's place moves to at an
// anonymous connection_init: its own while it waits for one; none (the place
// stays) once it counts on a user.
func (s *streams) networkOf(c *wsConn) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.client.pending {
		return ""
	}
	return c.client.network
}

// claimOrRefuse moves c's place to to's count at connection_init and
// returns authed, the connection's context from then on; or, to holding
// MaxPerClient, counts the refusal and returns ctx and the error that
// closes the connection with 4429 (its place given back when it ends). A
// streamClient with neither user nor network set leaves the place where it
// is.
func (s *streams) claimOrRefuse(ctx, authed context.Context, c *wsConn, to streamClient) (context.Context, *transport.InitPayload, error) {
	if to == (streamClient{}) || s.claim(c, to) {
		c.mu.Lock()
		c.caller = authed // its messages take the turns of its user from now on
		c.mu.Unlock()
		return authed, nil, nil
	}
	s.refused.WithLabelValues(to.reason()).Inc()
	if to.user == "" {
		s.warnClientCap(ctx, to.network)
	}
	ctx = transport.WithWebsocketCloseCode(ctx, CloseTooManyRequests)
	return transport.AppendCloseReason(ctx, s.capReason(to)), nil,
		&errs.Error{Code: errs.CodeRateLimited, Message: s.tooManyMessage(to),
			Extensions: map[string]any{"retryAfter": 1, "limit": "connections", "maximum": s.limits.MaxPerClient}}
}

// capReason is the reason of a WebSocket closed at its connection_init for
// to's cap (its user's, or its network's of anonymous streams): the message
// of the 429 in the 123 bytes of a close frame (a count of up to 20 digits).
func (s *streams) capReason(to streamClient) string {
	if to.user == "" {
		return "Too many anonymous streams from your network: close one first (at most " +
			strconv.Itoa(s.limits.MaxPerClient) + " per network)"
	}
	return "Too many WebSocket connections and event streams for your user: close one first (at most " +
		strconv.Itoa(s.limits.MaxPerClient) + " per user)"
}

type wsConnKey struct{}

// wsConnFrom returns the WebSocket connection an operation runs on, or nil
// for other transports.
func wsConnFrom(ctx context.Context) *wsConn {
	c, _ := ctx.Value(wsConnKey{}).(*wsConn)
	return c
}

// wsImplementation accepts connections for gqlgen's transport.
type wsImplementation struct{ st *streams }

// Accept upgrades the request. The server's read and write deadlines are
// cleared first (a hijacked connection keeps them): the connection's own
// keep-alive and write timeouts bound it instead.
func (i wsImplementation) Accept(w http.ResponseWriter, r *http.Request, o transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	for k, vs := range o.ResponseHeader {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	tap := &hijackTap{ResponseWriter: w}
	conn, err := coderws.Accept(tap, r, &coderws.AcceptOptions{
		Subprotocols: o.Subprotocols,
		// The origin was checked by wsTransport, against the CORS list too.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return nil, err
	}
	c := wsConnFrom(r.Context())
	if c == nil {
		c = &wsConn{st: i.st}
	}
	c.conn, c.raw = conn, tap.conn
	i.st.mu.Lock()
	i.st.conns[c] = struct{}{}
	i.st.mu.Unlock()
	c.mu.Lock()
	c.idle = time.AfterFunc(i.st.limits.Idle, c.idleClose)
	c.mu.Unlock()
	return c, nil
}

// wsCloseDrain is how much more a connection the server closes (closeWith)
// reads of what its client sends, 4 KiB, while it waits for the client's
// close frame: coder/websocket waits up to 5 s for it, reading and
// discarding every byte sent meanwhile one at a time, so a client that
// streams on after the close took the server's CPU at its bandwidth for 5 s
// a connection (about 200 MB/s here: 90% of the server's CPU in
// bench/abuse's ws-big-messages once its connections were closed and
// opened again). A client that closes in turn sends its close frame within
// what it had in flight (a ping, a complete: what a client sends but a long
// subscribe); past 4 KiB the connection is cut without it. 64 KiB still
// took 41% of the server's CPU, read one byte at a time, when each of a
// client's connections sent a message refused for its items and opened
// again (ws-big-messages).
const wsCloseDrain = 4 << 10

// hijackTap hands coder/websocket the connection it hijacks as a
// drainBound, kept in conn.
type hijackTap struct {
	http.ResponseWriter
	conn *drainBound
}

// Hijack hijacks the connection of the ResponseWriter it wraps.
func (h *hijackTap) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &drainBound{Conn: c}
	h.conn.left.Store(wsCloseDrain)
	return h.conn, brw, nil
}

// drainBound is a hijacked WebSocket connection whose reads end (io.EOF)
// once left bytes more have been read after closing is set.
type drainBound struct {
	net.Conn
	closing atomic.Bool
	left    atomic.Int64
}

func (d *drainBound) Read(p []byte) (int, error) {
	if !d.closing.Load() {
		return d.Conn.Read(p)
	}
	left := d.left.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	n, err := d.Conn.Read(p[:min(int64(len(p)), left)])
	d.left.Add(-int64(n))
	return n, err
}

// wsConn is one WebSocket connection (gqlgen's transport.WebsocketConn).
type wsConn struct {
	st   *streams
	conn *coderws.Conn
	// raw is the connection conn reads and writes, which closeWith bounds
	// (drainBound).
	raw *drainBound
	// client is the client whose count holds the connection's place (st.mu):
	// its network's waiting for connection_init (or its upgrade's token's
	// user's), then its user's or its network's anonymous streams'
	// (streams.claim).
	client streamClient

	mu   sync.Mutex
	subs int
	idle *time.Timer
	// readBy is the read deadline gqlgen set (SetReadDeadline: its wait for
	// a pong; zero: none), and deadline the timer that closes the connection
	// then; none while holding (awaitRate).
	readBy   time.Time
	deadline *time.Timer
	holding  bool
	closing  bool
	// ops holds, by the client's id, each operation the client started on
	// the connection (subscribe; legacy graphql-ws: start) and has not
	// completed (legacy: stopped) nor seen end (the server's complete or
	// error): the id gqlgen runs it under. Each id is at most maxOperationID
	// bytes.
	ops map[string]string
	// runs holds, by the id gqlgen runs it under, the client's id of every
	// operation gqlgen has not ended yet, and whether the client completed it.
	runs map[string]*wsRun
	// seq numbers the operations of the connection: gqlgen runs each under
	// an id of its own (its number), never the client's. gqlgen forgets an
	// operation's id only after it sent its complete, so a client that
	// reused its id at once could have its new operation forgotten in its
	// place (never to be stopped by a complete); and a client that completed
	// an operation and reused its id must get nothing more of the old one.
	seq uint64
	// started is the id gqlgen runs the operation the client started last
	// under: gqlgen prepares it (and answers its refusal) before it reads
	// the next message.
	started string
	// refused holds, by the id gqlgen runs it under, the extensions of an
	// operation refused before it ran (its deprecations: inTurn.DispatchError),
	// which gqlgen's answer of it, errors only, lacks (fromServer adds them).
	refused map[string]map[string]any
	// inited is set by the client's connection_init (graphql-transport-ws):
	// a second one closes with 4429, a subscribe before it with 4401.
	inited bool

	// limiter gives each message its caller's turn (NextReader; nil: none).
	limiter *ratelimit.Limiter
	// caller is the context whose caller a message's turn is taken for: the
	// upgrade's (its token's user, else its network), then connection_init's
	// (claimOrRefuse).
	caller context.Context
	// closed ends when the connection closes (closeNow), and with it a wait
	// for a turn.
	closed   context.Context
	closeNow context.CancelFunc
	// turn is the turn a message that starts an operation was handed to
	// gqlgen in, since handed: gqlgen decodes the message and prepares the
	// operation in it (inTurn.prepare takes it), or NextReader ends it.
	turn   *heldTurn
	handed time.Time
	// rate bounds the messages read (awaitRate; nil: no bound). Per
	// connection: a client's connections are capped (MaxPerClient), and a
	// bucket shared by them would let one busy tab hold back the others.
	rate *rate.Limiter
}

// wsRun is an operation gqlgen runs for a client (wsConn.runs).
type wsRun struct {
	id        string // the client's
	completed bool   // by the client: nothing more of it is sent
}

var (
	_ transport.WebsocketConn          = (*wsConn)(nil)
	_ transport.WebsocketReadLimiter   = (*wsConn)(nil)
	_ transport.WebsocketReadDeadliner = (*wsConn)(nil)
)

// subscribed counts a subscription starting on the connection.
func (c *wsConn) subscribed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs++
	if c.idle != nil {
		c.idle.Stop()
	}
}

// unsubscribed counts one ending; the last one starts the idle timer.
func (c *wsConn) unsubscribed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs--; c.subs == 0 && c.idle != nil {
		c.idle.Reset(c.st.limits.Idle)
	}
}

func (c *wsConn) idleClose() {
	c.mu.Lock()
	busy := c.subs > 0
	c.mu.Unlock()
	if !busy {
		c.closeWith(coderws.StatusNormalClosure, "idle: no subscription for "+c.st.limits.Idle.String())
	}
}

func (c *wsConn) stopIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle != nil {
		c.idle.Stop()
	}
}

// NextReader reads the next message, one of more than wsSmallMessage bytes
// in its caller's turn (ratelimit.Limiter.Turn, in which an HTTP request's
// body is read and decoded: see below). One that starts an operation with
// the id of one still running, or with an id over maxOperationID bytes,
// closes the connection (fromClient) and reads as a closed connection. The
// id of a message that starts or stops an operation is replaced by the one
// gqlgen runs it under (fromClient).
//
// Decoding a message of 1 MiB (variables full of empty objects, say) takes
// about 60 ms of CPU and 45 MB of allocations, and gqlgen decodes a
// subscribe's payload before the operation's turn (inTurn) starts: a client
// sending such messages back to back on its WebSockets (200 of them for an
// anonymous network) took as much of the server as it sent. So a message
// longer than wsSmallMessage waits for its caller's turn once that much of
// it has arrived, before the rest is read: a waiting connection holds 4 KiB
// of its message, and the client is slowed by TCP's backpressure (a smaller
// cap on messages would have refused clients what the contract allows, and
// charging the work after the fact would still have let each connection
// decode one message beside the turns). It is read, checked (fromClient)
// and, one that starts an operation, decoded and prepared by gqlgen in that
// turn, which is charged that work, not the time spent waiting for the
// client's bytes. A refused turn (more than ratelimit.MaxWaitingTurns of the
// caller's requests waiting, or a pace past ratelimit.MaxTurnPace) is waited
// out, its retryAfter at a time, without reading on: the read loop never
// decodes a long message beside its caller's turn. The wait ends when the
// connection closes; meanwhile it holds the connection's goroutine and
// nothing shared. A small message (a ping, a pong, a complete, a subscribe
// of an ordinary document) is read at once, as before: its operation is
// prepared in a turn of its own (inTurn), refused with RATE_LIMITED as the
// contract says, and charged the decoding too (takeTurn); and a pong never
// waits behind a turn, which would let the keep-alive close the connection.
// A long message of more than MaxJSONItems items (a shorter one cannot
// have that many) closes the connection as soon as what is read of it is
// over (readItems), before anything decodes it, its reading charged to the
// turn: 1 MiB of empty objects is 700,000 items, and 10,000 decode in about
// a millisecond.
//
// Before each message is read, the connection waits for a token of its
// message rate (awaitRate): a ping, a pong or a complete is answered without
// a turn or a budget to pay, and a client sending them back to back took as
// much CPU as it sent.
func (c *wsConn) NextReader() (int, io.Reader, error) {
	c.endTurn() // the previous message's, when gqlgen did not take it
	for {
		if !c.awaitRate() {
			return int(coderws.MessageText), nil, transport.ErrWebsocketClosed
		}
		typ, r, err := c.conn.Reader(context.Background())
		if err != nil {
			return int(typ), nil, c.readError(err)
		}
		data, err := io.ReadAll(io.LimitReader(r, wsSmallMessage+1))
		if err != nil {
			return int(typ), nil, c.readError(err)
		}
		var turn *heldTurn
		reading := time.Now()
		body := &timedBody{ReadCloser: io.NopCloser(r)}
		within := true // a short message cannot be over MaxJSONItems
		if len(data) > wsSmallMessage {
			if turn, err = c.awaitTurn(); err != nil { // the connection closed meanwhile
				return int(typ), nil, transport.ErrWebsocketClosed
			}
			reading = time.Now()
			if data, within, err = readItems(body, data); err != nil {
				turn.end(0)
				return int(typ), nil, c.readError(err)
			}
		}
		var starts bool
		var code coderws.StatusCode
		var reason string
		if within {
			data, starts, code, reason = c.fromClient(data)
		} else {
			code, reason = c.badRequest(), tooManyItems("a message")
		}
		if turn != nil {
			cpumeter.Add(cpumeter.Into(context.Background(), turn.work), time.Since(reading)-body.waited)
		}
		if code != 0 {
			turn.end(0)
			c.closeWith(code, reason)
			return int(typ), nil, transport.ErrWebsocketClosed
		}
		if data == nil { // answered or dropped here (a ping before connection_init, a complete of no running operation)
			turn.end(0)
			continue
		}
		if !starts {
			turn.end(0) // what gqlgen decodes of it is a few bytes (fromClient)
		} else {
			c.mu.Lock()
			c.turn, c.handed = turn, time.Now()
			c.mu.Unlock()
		}
		return int(typ), bytes.NewReader(data), nil
	}
}

// readItems reads the rest of a message, whose first bytes are data, from
// r, and returns it whole; or, as soon as what it read is over MaxJSONItems
// (jsoncanon.Items), what it read so far with within false: the rest is
// not read, and the connection is to close. A megabyte of empty objects is
// past the bound after its first 30 KB.
func readItems(r io.Reader, data []byte) (_ []byte, within bool, _ error) {
	var items jsoncanon.Items
	if !items.Add(data, MaxJSONItems) {
		return data, false, nil
	}
	for {
		if len(data) == cap(data) {
			data = slices.Grow(data, len(data))
		}
		n, err := r.Read(data[len(data):cap(data)])
		within := items.Add(data[len(data):len(data)+n], MaxJSONItems)
		data = data[:len(data)+n]
		switch {
		case !within:
			return data, false, nil
		case err == io.EOF:
			return data, true, nil
		case err != nil:
			return data, true, err
		}
	}
}

// wsSmallMessage is the length of a WebSocket message (4 KiB) past which it
// is read in its caller's turn (NextReader): decoding that much is a few
// hundred microseconds at the most.
const wsSmallMessage = 4 << 10

// readError is what NextReader returns for err, an error reading from the
// connection: a normal close is transport.ErrWebsocketClosed.
func (c *wsConn) readError(err error) error {
	switch coderws.CloseStatus(err) {
	case coderws.StatusNormalClosure, coderws.StatusNoStatusRcvd:
		return transport.ErrWebsocketClosed
	}
	return err
}

// awaitRate waits until the connection's next message may be read, when its
// client sent more than its message rate (WSMessagesPerSecond after
// WSMessageBurst), and reports whether it may: false when the connection
// closed meanwhile (the client's close, the server's shutdown: closeNow). The
// bucket is golang.org/x/time/rate's. One message's wait is at most a token's
// time, 1/WSMessagesPerSecond: a client's backlog is read at the rate, each
// message after its own wait. While it waits the pong deadline is held
// (holdReads): the server is not reading, and a pong behind the backlog
// could not be seen; a client that floods a connection past its keep-alive
// is slowed, not dropped. The messages delayed are counted
// (taskflow_ws_messages_delayed_total). SSE has no such bound: a stream is
// one request, read once, in its caller's turn, and the client sends nothing
// more on it.
func (c *wsConn) awaitRate() bool {
	if c.rate == nil {
		return true
	}
	wait := c.rate.Reserve().Delay()
	if wait <= 0 {
		return true
	}
	c.st.delayed.Inc()
	c.holdReads(true, 0)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		c.holdReads(false, wait)
		return true
	case <-c.closed.Done():
		return false
	}
}

// holdReads stops the read deadline's timer while the connection's reads
// are held back (awaitRate), or, at the end of a hold of held, moves the
// deadline by held and starts its timer again (not once the connection is
// closing): the time the server did not read is not the client's.
func (c *wsConn) holdReads(hold bool, held time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = hold
	if !hold && !c.readBy.IsZero() {
		c.readBy = c.readBy.Add(held)
	}
	if !c.closing {
		c.armDeadline()
	}
}

// armDeadline starts the timer that closes the connection at readBy, in
// place of the one running, if any; none when readBy is zero or reads are
// held back (holdReads). c.mu held.
func (c *wsConn) armDeadline() {
	if c.deadline != nil {
		c.deadline.Stop()
		c.deadline = nil
	}
	if !c.readBy.IsZero() && !c.holding {
		c.deadline = time.AfterFunc(time.Until(c.readBy), func() { _ = c.conn.CloseNow() })
	}
}

// awaitTurn waits for the turn of the connection's caller, waiting out each
// refusal for its retryAfter, and returns it; or the error of the
// connection's close, which ends the wait. Without a limiter there is no
// turn (nil).
func (c *wsConn) awaitTurn() (*heldTurn, error) {
	if c.limiter == nil {
		return nil, nil
	}
	c.mu.Lock()
	caller := c.caller
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(caller)
	defer cancel()
	defer context.AfterFunc(c.closed, cancel)()
	for {
		end, err := c.limiter.Turn(ctx)
		if err == nil {
			_, work := cpumeter.With(ctx)
			return &heldTurn{work: work, done: end}, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		retry, _ := turnRefusal(err)
		timer := time.NewTimer(time.Duration(retry) * time.Second)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
	}
}

// takeTurn returns the turn the last message was handed to gqlgen in,
// charged gqlgen's work on it so far (decoding it), for the operation it
// starts to be prepared in (inTurn.prepare); nil when there is none (a small
// message), and decoded then is that work, to be charged to the turn the
// operation takes.
func (c *wsConn) takeTurn() (turn *heldTurn, decoded time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.handed.IsZero() {
		decoded = time.Since(c.handed)
		c.handed = time.Time{}
	}
	turn, c.turn = c.turn, nil
	if turn != nil {
		cpumeter.Add(cpumeter.Into(context.Background(), turn.work), decoded)
		decoded = 0
	}
	return turn, decoded
}

// endTurn ends the turn the last message was handed to gqlgen in, if
// gqlgen did not take it (a payload it could not decode), charged gqlgen's
// work on it.
func (c *wsConn) endTurn() {
	turn, _ := c.takeTurn()
	turn.end(0)
}

// fromClient follows the operation ids of a client's message, read for its
// type and id only, and returns the message to give gqlgen, or the code and
// reason to close the connection with. gqlgen would run a subscribe (legacy:
// start) with the id of a running operation beside it and lose the first
// one's cancel, so that no complete could stop it: such a duplicate closes
// the connection with 4409, as graphql-transport-ws requires, and with 4409
// too over the legacy protocol, which has no rule of its own (its reference
// server stops the first; gqlgen cannot be made to do that before the second
// starts). An id the client completed (legacy: stopped), or whose end the
// server sent, may be reused at once: gqlgen runs each operation under an id
// of its own (wsConn.seq), given here to subscribe, start, complete and stop
// messages. A connection_init is given gqlgen with its payload's
// Authorization alone (initMessage). starts reports a message that starts
// an operation (subscribe, legacy start), whose payload gqlgen decodes.
func (c *wsConn) fromClient(data []byte) (_ []byte, starts bool, _ coderws.StatusCode, _ string) {
	var m struct {
		Type    string          `json:"type"`
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload"`
	}
	// Decoded as gqlgen decodes it (its three fields, keys matched without
	// regard to case, the last of a key written twice winning). A message gqlgen would refuse, not JSON
	// or of a type the client does not send in the subprotocol, closes the
	// connection here: gqlgen closed it with 1000 once initialised (a
	// graphql-ws client reconnects after 1000, and would send it again).
	if json.NewDecoder(bytes.NewReader(data)).Decode(&m) != nil {
		return nil, false, c.badRequest(), "Invalid message received"
	}
	if !slices.Contains(clientMessages[c.Subprotocol() == transportWS], m.Type) {
		return nil, false, c.badRequest(), "Invalid message type"
	}
	var init transport.InitPayload
	if m.Type == "connection_init" && len(m.Payload) > 0 && json.Unmarshal(m.Payload, &init) != nil {
		// gqlgen returns from a connection_init whose payload is not an
		// object without closing the connection: it would stay open, unread,
		// its place given back.
		return nil, false, c.badRequest(), "Invalid message received"
	}
	if c.Subprotocol() == transportWS {
		// What gqlgen would take for an unexpected message (1002), with
		// graphql-transport-ws's own codes.
		c.mu.Lock()
		inited := c.inited
		c.inited = inited || m.Type == "connection_init"
		c.mu.Unlock()
		switch {
		case m.Type == "connection_init" && inited:
			return nil, false, CloseTooManyRequests, "Too many initialisation requests"
		case m.Type == "subscribe" && !inited:
			return nil, false, CloseUnauthorized, "Unauthorized"
		case (m.Type == "ping" || m.Type == "pong") && !inited:
			// A ping may come at any time (gqlgen takes one before
			// connection_init for an unexpected message): answered here; a
			// pong is dropped. The wait for connection_init runs on.
			if m.Type == "ping" {
				c.pong()
			}
			return nil, false, 0, ""
		}
	}
	var run string
	switch m.Type {
	case "connection_init":
		return initMessage(init), false, 0, ""
	case "subscribe", "start":
		if len(m.ID) > maxOperationID {
			return nil, false, c.badRequest(), "operation id over " + strconv.Itoa(maxOperationID) + " bytes"
		}
		c.mu.Lock()
		if _, running := c.ops[m.ID]; running {
			c.mu.Unlock()
			return nil, false, CloseSubscriberExists, subscriberFor + m.ID + alreadyExists
		}
		if c.ops == nil {
			c.ops, c.runs = map[string]string{}, map[string]*wsRun{}
		}
		c.seq++
		run = "#" + strconv.FormatUint(c.seq, 10)
		c.ops[m.ID], c.runs[run] = run, &wsRun{id: m.ID}
		c.started = run
		c.mu.Unlock()
	case "complete", "stop":
		c.mu.Lock()
		r, running := c.ops[m.ID]
		if running {
			delete(c.ops, m.ID)
			c.runs[r].completed = true
			run = r
		}
		c.mu.Unlock()
		if !running {
			// None of the client's running operations: dropped, since the
			// id could be one gqlgen runs another operation under ("#1").
			return nil, false, 0, ""
		}
	default:
		return data, false, 0, ""
	}
	// The message with the id gqlgen runs it under, made of m's fields as
	// read here: not the client's keys again (re-encoded, a key written twice
	// in two cases, "type" and "TYPE", came out sorted, and gqlgen read the
	// other one: a subscribe where a complete was followed).
	starts = m.Type == "subscribe" || m.Type == "start"
	if starts {
		m.Payload = operationPayload(m.Payload)
	}
	out, err := json.Marshal(struct {
		Type    string          `json:"type"`
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}{m.Type, run, m.Payload})
	if err != nil {
		return nil, false, c.badRequest(), "Invalid message received"
	}
	return out, starts, 0, ""
}

// operationPayload returns the payload of a subscribe (legacy: start)
// message with what gqlgen reads of it alone (graphql.RawParams: query,
// operationName, variables, extensions), compacted, or p as it is when it
// is not an object (for gqlgen to refuse). gqlgen keeps the payload it is
// given for the operation's life: a subscription sent in a message of 1 MiB
// padded with a member it does not read, or with whitespace, held the
// megabyte while it ran. Of an extensions object it keeps persistedQuery
// alone, all the server reads of it (extensionsKept): one padded in its
// extensions held its megabyte too.
func operationPayload(p json.RawMessage) json.RawMessage {
	var params struct {
		Query         json.RawMessage `json:"query,omitempty"`
		OperationName json.RawMessage `json:"operationName,omitempty"`
		Variables     json.RawMessage `json:"variables,omitempty"`
		Extensions    json.RawMessage `json:"extensions,omitempty"`
	}
	if len(p) == 0 || json.Unmarshal(p, &params) != nil {
		return p
	}
	var ext map[string]json.RawMessage
	if len(params.Extensions) > 0 && params.Extensions[0] == '{' && json.Unmarshal(params.Extensions, &ext) == nil {
		params.Extensions = nil
		if pq, ok := ext["persistedQuery"]; ok {
			params.Extensions, _ = json.Marshal(map[string]json.RawMessage{"persistedQuery": pq})
		}
	}
	out, err := json.Marshal(params) // a RawMessage is written compacted
	if err != nil {
		return p
	}
	return out
}

// initMessage is the connection_init given to gqlgen for one whose payload
// was p: its Authorization alone, the one member the server reads (wsInit).
// gqlgen keeps the payload it decodes for the connection's life, and the
// decoded form of a payload of up to a message's 1 MiB (empty objects,
// arrays) weighs twenty times as much: 200 idle anonymous connections of a
// network held gigabytes.
func initMessage(p transport.InitPayload) []byte {
	var payload map[string]string
	if a := p.Authorization(); a != "" {
		payload = map[string]string{"Authorization": a}
	}
	out, _ := json.Marshal(struct {
		Type    string            `json:"type"`
		Payload map[string]string `json:"payload,omitempty"`
	}{"connection_init", payload})
	return out
}

// fromServer follows the operation ids of a message gqlgen sends (the Type
// and ID fields of its message struct, by reflection: gqlgen's types are
// unexported; TestWSOperationIDReusedAfterComplete fails if they change),
// gives it back the client's id, and reports whether to send it: the end of
// an operation (complete, error) frees the client's id, and nothing more of
// one the client completed is sent (graphql-transport-ws: "no further
// events"; a client that reused its id would take them for the new
// operation's). The answer (next, legacy data) of an operation refused
// before it ran gets the extensions gqlgen left out (refusedWith; the
// Payload field, TestWebSocketRefusalsCarryTheirDeprecations fails if it
// changes).
func (c *wsConn) fromServer(v any) bool {
	m := reflect.Indirect(reflect.ValueOf(v))
	if m.Kind() != reflect.Struct {
		return true
	}
	typ, id := m.FieldByName("Type"), m.FieldByName("ID")
	if typ.Kind() != reflect.String || id.Kind() != reflect.String {
		return true
	}
	end := false
	switch typ.String() {
	case "complete", "error":
		end = true
	case "next", "data":
	default:
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[id.String()]
	if !ok {
		return true // an operation gqlgen ended already (cannot happen) or never ran
	}
	ext := c.refused[id.String()]
	if end {
		delete(c.runs, id.String())
		delete(c.refused, id.String())
		if !r.completed {
			delete(c.ops, r.id)
		}
	}
	if r.completed {
		return false
	}
	if ext != nil && !end {
		delete(c.refused, id.String())
		withExtensions(m.FieldByName("Payload"), ext)
	}
	if id.CanSet() {
		id.SetString(r.id)
	}
	return true
}

// refusedWith notes ext, the extensions of the refusal of the operation the
// client started last (gqlgen answers it before it reads another message),
// for fromServer to add to gqlgen's answer of it.
func (c *wsConn) refusedWith(ext map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == "" {
		return
	}
	if c.refused == nil {
		c.refused = map[string]map[string]any{}
	}
	c.refused[c.started] = ext
}

// withExtensions sets the extensions of payload, the JSON of a response
// with errors only (gqlgen's answer of a refused operation), to ext, when
// payload is a settable json.RawMessage that decodes as one.
func withExtensions(payload reflect.Value, ext map[string]any) {
	raw, ok := payload.Interface().(json.RawMessage)
	if !ok || !payload.CanSet() {
		return
	}
	var resp struct {
		Errors     json.RawMessage `json:"errors"`
		Data       json.RawMessage `json:"data"`
		Extensions map[string]any  `json:"extensions,omitempty"`
	}
	if json.Unmarshal(raw, &resp) != nil || resp.Extensions != nil {
		return
	}
	resp.Extensions = ext
	if b, err := json.Marshal(resp); err == nil {
		payload.Set(reflect.ValueOf(json.RawMessage(b)))
	}
}

// WriteJSON writes one message, within the write timeout: a client that does
// not read is disconnected (coder/websocket closes the connection when the
// write's context ends). A message of an operation the client completed is
// left out (fromServer).
func (c *wsConn) WriteJSON(v any) error {
	if !c.fromServer(v) {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.st.limits.WriteTimeout)
	defer cancel()
	return c.conn.Write(ctx, coderws.MessageText, data)
}

// WriteClose starts the close handshake with code, unless a close started
// already (the first code wins: 1012 at shutdown). gqlgen closes every
// protocol error with 1002; over graphql-transport-ws that is 4408 for the
// wait for connection_init (gqlgen's reason "connection initialisation
// timeout") and 4400 for the others (a message that is not JSON, or of a
// type the protocol does not have), as the protocol says.
func (c *wsConn) WriteClose(code int, reason string) error {
	if coderws.StatusCode(code) == coderws.StatusProtocolError && c.Subprotocol() == transportWS {
		if reason == "connection initialisation timeout" {
			code, reason = CloseInitTimeout, "Connection initialisation timeout"
		} else {
			code = CloseBadRequest
		}
	}
	c.closeWith(coderws.StatusCode(code), reason)
	return nil
}

// pong answers a ping that came before connection_init, within the write
// timeout; a failed write ends the connection with the next read.
func (c *wsConn) pong() {
	ctx, cancel := context.WithTimeout(context.Background(), c.st.limits.WriteTimeout)
	defer cancel()
	_ = c.conn.Write(ctx, coderws.MessageText, []byte(`{"type":"pong"}`))
}

// badRequest is the close code of a malformed message: 4400 over
// graphql-transport-ws, 1002 over the legacy subprotocol.
func (c *wsConn) badRequest() coderws.StatusCode {
	if c.Subprotocol() == transportWS {
		return CloseBadRequest
	}
	return coderws.StatusProtocolError
}

// closeWith closes the connection with code and reason, once, without
// waiting for the client's answer (coder/websocket waits up to 5 s for it).
func (c *wsConn) closeWith(code coderws.StatusCode, reason string) {
	c.mu.Lock()
	if c.closing || c.conn == nil {
		c.mu.Unlock()
		return
	}
	c.closing = true
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.mu.Unlock()
	c.stopWaiting()
	c.st.mu.Lock()
	delete(c.st.conns, c)
	c.st.mu.Unlock()
	if c.raw != nil {
		c.raw.closing.Store(true) // then reads wsCloseDrain more at the most
	}
	go func() { _ = c.conn.Close(code, reason) }()
}

// stopWaiting ends a wait for a turn (awaitTurn): the connection is closing.
func (c *wsConn) stopWaiting() {
	if c.closeNow != nil {
		c.closeNow()
	}
}

// Close closes the connection at once unless a close handshake is under way.
func (c *wsConn) Close() error {
	c.mu.Lock()
	closing := c.closing
	c.closing = true
	c.mu.Unlock()
	c.stopWaiting()
	c.st.mu.Lock()
	delete(c.st.conns, c)
	c.st.mu.Unlock()
	if closing {
		return nil
	}
	return c.conn.CloseNow()
}

// Subprotocol is the negotiated subprotocol.
func (c *wsConn) Subprotocol() string { return c.conn.Subprotocol() }

// SetReadLimit bounds one message from the client.
func (c *wsConn) SetReadLimit(limit int64) { c.conn.SetReadLimit(limit) }

// SetReadDeadline closes the connection at t unless cleared (zero t) first:
// gqlgen's wait for a pong. The time the connection's reads are held back
// by its message rate does not count (holdReads).
func (c *wsConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readBy = t
	c.armDeadline()
	return nil
}

// sseTransport is GraphQL over Server-Sent Events (the graphql-sse
// protocol's distinct connections mode) at /query: a POST (or GET) with
// Accept: text/event-stream; each result is an event "next", the end an
// event "complete". The request is read and refused as the HTTP transport
// does (the same bounds and statuses, 429 for RATE_LIMITED) before the
// stream starts; an error that ends a subscription is a last "next" event
// with errors. Writes have a deadline (WriteTimeout), so a client that stops
// reading is disconnected; pings are comments.
type sseTransport struct {
	http Transport
	st   *streams
}

var _ graphql.Transport = sseTransport{}

// Supports accepts GET and POST requests that accept text/event-stream.
func (t sseTransport) Supports(r *http.Request) bool {
	return r.Header.Get("Upgrade") == "" && (r.Method == http.MethodPost || r.Method == http.MethodGet) &&
		strings.Contains(strings.Join(r.Header.Values("Accept"), ","), "text/event-stream")
}

// Do serves one operation as an event stream. The operation is prepared in
// its caller's turn, and a query or mutation that executes in it
// (executesInTurn) keeps it until answered, as the HTTP transport's do.
func (t sseTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	w.Header().Set("Content-Type", mediaJSON)
	ctx, body, endTurn, ok := t.http.turn(r.Context(), w, r)
	if !ok {
		return
	}
	defer endTurn()
	var params *graphql.RawParams
	var reqErr *requestError
	decoding := time.Now()
	if r.Method == http.MethodGet {
		params, reqErr = paramsFromQuery(r)
		ctx = context.WithValue(ctx, getRequestKey{}, true)
	} else {
		params, reqErr = t.http.paramsFromBody(w, r)
	}
	cpumeter.Add(ctx, time.Since(decoding)-body.waited)
	if reqErr != nil {
		t.refuse(ctx, w, exec, nil, reqErr.status, gqlerror.List{{Message: reqErr.message,
			Extensions: map[string]any{"code": reqErr.code}}})
		return
	}
	params.Headers = r.Header
	client, ok := t.st.acquire(w, r, clientOf(r.Context()))
	if !ok {
		return
	}
	defer t.st.release(client)
	if t.http.Limiter != nil {
		ctx = ratelimit.WithOutcome(ctx)
	}
	rc, opErrs := exec.CreateOperationContext(ctx, params)
	if opErrs != nil || !executesInTurn(ctx, rc) {
		endTurn() // else once the operation is answered, as over plain HTTP
	}
	if opErrs != nil {
		status := http.StatusBadRequest
		if isGET(ctx) && rc != nil && rc.Operation != nil && rc.Operation.Operation == ast.Mutation {
			// As over plain HTTP (a subscription by GET is EventSource's).
			status = http.StatusMethodNotAllowed
			w.Header().Set("Allow", "POST")
		}
		t.refuse(ctx, w, exec, rc, status, opErrs)
		return
	}
	ctrl := http.NewResponseController(w)
	_ = ctrl.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	setRateLimitHeaders(w, t.http.outcome(ctx, rc))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &sseWriter{w: w, ctrl: ctrl, timeout: t.st.limits.WriteTimeout, cancel: cancel}
	// A query or a mutation runs within REQUEST_TIMEOUT, as over plain HTTP
	// (Transport.execute); a subscription lasts as long as its stream.
	subscription := rc.Operation != nil && rc.Operation.Operation == ast.Subscription
	opCtx := ctx
	if !subscription {
		var endOp context.CancelFunc
		opCtx, endOp = withRequestTimeout(ctx, t.http.Timeout)
		defer endOp()
	}
	responses, opCtx := exec.DispatchOperation(opCtx, rc)
	if subscription {
		ctx = opCtx
	}
	// A query or a mutation has one result: it runs before the headers go, so
	// that those it sets are sent (Idempotent-Replayed on a replay), as over
	// plain HTTP. A subscription's headers go at once.
	var resp *graphql.Response
	if !subscription {
		executing := time.Now()
		resp = responses(opCtx)
		if querydoc.Heavy(rc) {
			cpumeter.Add(ctx, time.Since(executing)) // gqlgen collecting its fields
		}
		endTurn()
	}
	w.WriteHeader(http.StatusOK)
	out.write(":\n\n")
	stopPings := out.pings(ctx, t.st.limits.KeepAlive)
	defer stopPings()
	if subscription {
		resp = responses(opCtx)
	}
	for ; resp != nil; resp = responses(opCtx) {
		b, err := json.Marshal(resp)
		if err != nil {
			b = []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`)
		}
		if !out.write("event: next\ndata: " + string(b) + "\n\n") {
			return
		}
	}
	out.write("event: complete\ndata:\n\n")
}

// refuse answers a request whose operation did not start, as the HTTP
// transport does (429 with Retry-After for RATE_LIMITED, else status), with
// the errors and the operation's extensions.deprecations, if any.
func (t sseTransport) refuse(ctx context.Context, w http.ResponseWriter, exec graphql.GraphExecutor,
	rc *graphql.OperationContext, status int, list gqlerror.List,
) {
	if rc != nil {
		ctx = graphql.WithOperationContext(ctx, rc)
	}
	presented := exec.DispatchError(ctx, list)
	o := t.http.outcome(ctx, rc)
	setRateLimitHeaders(w, o)
	if o != nil && o.Limited != "" {
		writeTooManyFor(w, o.RetryAfterSeconds(), presented)
		return
	}
	if apqMiss(presented.Errors) {
		status = http.StatusOK
	}
	writeJSON(w, status, struct {
		Errors     gqlerror.List  `json:"errors"`
		Extensions map[string]any `json:"extensions,omitempty"`
	}{presented.Errors, deprecationsOnly(presented.Extensions)})
}

// apqMiss reports a persisted query the server does not know (the client
// sends the text next).
func apqMiss(list gqlerror.List) bool {
	for _, e := range list {
		if code, _ := e.Extensions["code"].(string); code == string(errs.CodePersistedQueryNotFound) {
			return true
		}
	}
	return false
}

// sseWriter writes the events of one stream, one at a time, each within the
// write timeout; a failed write cancels the stream.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	ctrl    *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	failed  bool
}

// write writes s and flushes; false once a write failed.
func (o *sseWriter) write(s string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed {
		return false
	}
	_ = o.ctrl.SetWriteDeadline(time.Now().Add(o.timeout))
	if _, err := io.WriteString(o.w, s); err == nil {
		if err = o.ctrl.Flush(); err == nil {
			return true
		}
	}
	o.failed = true
	o.cancel()
	return false
}

// pings writes a comment every interval until ctx ends or the returned
// function is called.
func (o *sseWriter) pings(ctx context.Context, every time.Duration) func() {
	t := time.NewTicker(every)
	done := make(chan struct{})
	go func() {
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				if !o.write(": ping\n\n") {
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// liveExtension runs each subscription with what the hub needs from the
// transport: a holder for why it ends (told to the client after its last
// event: a graphql-ws "error" message, or a last SSE "next" event with
// errors), the price of each event charged to the caller's budget, fresh
// data loaders for each event (its task "as it is now"), and the count of
// subscriptions of a WebSocket connection (its idle timer).
type liveExtension struct {
	db      *store.DB
	limiter *ratelimit.Limiter
	present graphql.ErrorPresenterFunc
}

var (
	_ graphql.HandlerExtension     = liveExtension{}
	_ graphql.OperationInterceptor = liveExtension{}
	_ graphql.ResponseInterceptor  = liveExtension{}
)

// ExtensionName names the extension.
func (liveExtension) ExtensionName() string { return "LiveSubscriptions" }

// Validate accepts any schema.
func (liveExtension) Validate(graphql.ExecutableSchema) error { return nil }

func isSubscription(ctx context.Context) bool {
	if !graphql.HasOperationContext(ctx) {
		return false
	}
	rc := graphql.GetOperationContext(ctx)
	return rc.Operation != nil && rc.Operation.Operation == ast.Subscription
}

// InterceptOperation wraps a subscription's responses.
func (e liveExtension) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	if !isSubscription(ctx) {
		return next(ctx)
	}
	rc := graphql.GetOperationContext(ctx)
	ctx, end := live.WithEnd(ctx)
	release := func() {}
	if e.limiter != nil {
		price := cost.Event(rc.Operation, rc.Variables)
		ctx = live.WithCharge(ctx, func(ctx context.Context) *errs.Error { return e.limiter.ChargeEvent(ctx, price) })
		// A catch-up read's worst case is held against the caller's budget
		// from its check until it is charged what it looked at, or the
		// stream ends (a read that failed).
		held := &ratelimit.Hold{}
		release = held.Done
		ctx = live.WithScanPay(ctx, live.ScanPay{
			Afford: func(ctx context.Context, events int) *errs.Error {
				held.Done()
				r, err := e.limiter.AffordScan(ctx, ratelimit.ScanCost(int64(events)))
				held.Keep(r)
				return err
			},
			Charge: func(ctx context.Context, events int) *errs.Error {
				held.Done()
				return e.limiter.ChargeScan(ctx, ratelimit.ScanCost(int64(events)))
			},
		})
	}
	conn := wsConnFrom(ctx)
	if conn != nil {
		conn.subscribed()
	}
	responses := next(ctx)
	var done atomic.Bool
	return func(ctx context.Context) *graphql.Response {
		if done.Load() {
			return nil
		}
		if resp := responses(ctx); resp != nil {
			if conn != nil && len(resp.Errors) > 0 && (len(resp.Data) == 0 || string(resp.Data) == "null") {
				// Refused (or failed) as a whole: for graphql-transport-ws an
				// "error" message, which ends the subscription, not "next".
				for _, err := range resp.Errors {
					transport.AddSubscriptionError(ctx, err)
				}
				release()
				done.Store(true)
				conn.unsubscribed()
				return nil
			}
			return resp
		}
		if done.Swap(true) {
			return nil
		}
		release()
		if conn != nil {
			conn.unsubscribed()
		}
		err := end.Err()
		if err == nil {
			return nil
		}
		gqlErr := e.present(ctx, err)
		if conn != nil {
			// graphql-transport-ws: an "error" message ends the subscription.
			transport.AddSubscriptionError(ctx, gqlErr)
			return nil
		}
		return &graphql.Response{Errors: gqlerror.List{gqlErr}}
	}
}

// InterceptResponse gives each event of a subscription fresh data loaders,
// its own sum of the overruns of its lists (ratelimit.WithEvent), and the
// subscription's field as the parent of its fields: gqlgen resolves an
// event's fields in the context of the response, which has no field, so an
// error in an event had a path without its root (["task", ...] for
// ["taskChanges", "task", ...]), and each field of an event was taken for a
// root field (a span of its own).
func (e liveExtension) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	if isSubscription(ctx) {
		ctx = ratelimit.WithEvent(resolvers.WithLoaders(ctx, e.db))
		rc := graphql.GetOperationContext(ctx)
		if graphql.GetFieldContext(ctx) == nil {
			if root := graphql.CollectFields(rc, rc.Operation.SelectionSet, []string{"Subscription"}); len(root) == 1 {
				ctx = graphql.WithFieldContext(ctx, &graphql.FieldContext{Object: "Subscription", Field: root[0],
					IsMethod: true, IsResolver: true})
			}
		}
	}
	return next(ctx)
}
