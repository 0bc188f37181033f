package httpapi

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/auth"
	"taskflow/live"
	"taskflow/reqinfo"
	"taskflow/store"
)

// newTestStreams returns a stream registry with limits, its hub closed when
// the test ends.
func newTestStreams(t *testing.T, limits StreamLimits) *streams {
	t.Helper()
	hub := live.New(live.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(hub.Close)
	return newStreams(limits, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), hub, prometheus.NewRegistry())
}

// streamRequest is an SSE request of a client at ip, as requestContext
// leaves it.
func streamRequest(ip string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(`{"query":"{ __typename }"}`))
	r.Header.Set("Content-Type", mediaJSON)
	r.Header.Set("Accept", "text/event-stream")
	return r.WithContext(reqinfo.With(r.Context(), reqinfo.Info{IP: ip}))
}

// The places of each client are counted apart, a client is its network, a
// refusal takes nothing (the client's cap is checked first, and a refusal by
// the instance's cap leaves no count behind), and a client whose streams all
// ended has no entry left: the map holds only clients with a stream open.
func TestStreamsCountEachClient(t *testing.T) {
	t.Parallel()
	st := newTestStreams(t, StreamLimits{MaxConnections: 3, MaxPerClient: 2})
	take := func(ip string, want int) streamClient {
		t.Helper()
		w := httptest.NewRecorder()
		r := streamRequest(ip)
		client, ok := st.acquire(w, r, clientOf(r.Context()))
		if ok != (want == 0) || !ok && w.Code != want {
			t.Fatalf("%s: acquired %v, answered %d, want %d", ip, ok, w.Code, want)
		}
		return client
	}
	a1, a2 := take("2001:db8::1", 0), take("2001:db8::2", 0)
	take("2001:db8::3", http.StatusTooManyRequests)
	b := take("192.0.2.1", 0)
	take("192.0.2.2", http.StatusServiceUnavailable) // the instance is full
	if st.open != 3 || len(st.held) != 2 || st.held[streamClient{network: "2001:db8::/64"}] != 2 ||
		st.held[streamClient{network: "192.0.2.1"}] != 1 {
		t.Fatalf("open %d, per client %v", st.open, st.held)
	}
	st.release(a1)
	take("192.0.2.2", 0)
	for _, c := range []streamClient{a2, b, {network: "192.0.2.2"}} {
		st.release(c)
	}
	if st.open != 0 || len(st.held) != 0 {
		t.Fatalf("all released: open %d, per client %v", st.open, st.held)
	}
}

// panicking is an executor that panics as it prepares an operation, with
// the number of streams open then.
type panicking struct {
	graphql.GraphExecutor
	st *streams
}

func (p panicking) CreateOperationContext(context.Context, *graphql.RawParams) (*graphql.OperationContext, gqlerror.List) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	panic(p.st.open)
}

// A stream whose handler panics gives its place back too (the release is
// deferred; net/http recovers the panic of a handler).
func TestStreamPlaceGivenBackOnPanic(t *testing.T) {
	t.Parallel()
	st := newTestStreams(t, StreamLimits{MaxPerClient: 1})
	func() {
		defer func() {
			if open := recover(); open != 1 {
				t.Fatalf("the executor panicked with %v streams open, want 1", open)
			}
		}()
		sseTransport{st: st}.Do(httptest.NewRecorder(), streamRequest("192.0.2.1"), panicking{st: st})
	}()
	if st.open != 0 || len(st.held) != 0 {
		t.Fatalf("after a panic: open %d, per client %v", st.open, st.held)
	}
}

// A signed-in stream counts on its user, an anonymous one on its network; a
// WebSocket upgraded without a token counts on its network's connections
// waiting for their connection_init (wsClientOf), apart from its anonymous
// streams, and its place moves from there (claim) to its user's count, or,
// anonymous, to its network's, unless that holds MaxPerClient already, and
// then stays where it was; release gives the place back to whichever count
// holds it, and nothing is left counted once every stream ended.
func TestStreamsCountEachUser(t *testing.T) {
	t.Parallel()
	st := newTestStreams(t, StreamLimits{MaxPerClient: 2})
	ann, bob := streamClient{user: "ann"}, streamClient{user: "bob"}
	office := streamClient{network: "192.0.2.1"}
	waiting := streamClient{network: "192.0.2.1", pending: true}
	signedIn := func(id string) *http.Request {
		r := streamRequest("192.0.2.1")
		return r.WithContext(auth.WithUser(r.Context(), &store.User{ID: id}))
	}
	take := func(r *http.Request, ws bool, want int) streamClient {
		t.Helper()
		w := httptest.NewRecorder()
		client := clientOf(r.Context())
		if ws {
			client = wsClientOf(r.Context())
		}
		client, ok := st.acquire(w, r, client)
		if ok != (want == 0) || !ok && w.Code != want {
			t.Fatalf("acquired %v, answered %d, want %d", ok, w.Code, want)
		}
		return client
	}
	counts := func(want map[streamClient]int) {
		t.Helper()
		open := 0
		for _, n := range want {
			open += n
		}
		if st.open != open || !maps.Equal(st.held, want) {
			t.Fatalf("open %d, held %v, want %v", st.open, st.held, want)
		}
	}
	sse := []streamClient{take(signedIn("ann"), false, 0), take(signedIn("bob"), false, 0), take(signedIn("bob"), false, 0),
		take(streamRequest("192.0.2.1"), false, 0)}
	take(signedIn("bob"), false, http.StatusTooManyRequests)
	if c := take(signedIn("ann"), true, 0); c != ann { // a token in the upgrade: the user's from the start
		t.Fatalf("a WebSocket upgraded with ann's token counts on %v", c)
	} else {
		st.release(c)
	}
	c1 := &wsConn{st: st, client: take(streamRequest("192.0.2.1"), true, 0)}
	c2 := &wsConn{st: st, client: take(streamRequest("192.0.2.1"), true, 0)}
	take(streamRequest("192.0.2.1"), true, http.StatusTooManyRequests)
	counts(map[streamClient]int{ann: 1, bob: 2, office: 1, waiting: 2})
	if !st.claim(c1, ann) || !st.claim(c2, office) || c1.client != ann || c2.client != office {
		t.Fatalf("claims: %v %v", c1.client, c2.client)
	}
	counts(map[streamClient]int{ann: 2, bob: 2, office: 2})
	if !st.claim(c1, ann) {
		t.Fatal("a place claimed again by its user refused")
	}
	// The network holds its anonymous cap, its waiting connections none: an
	// upgrade takes a place; its claims over a cap leave it waiting.
	c3 := &wsConn{st: st, client: take(streamRequest("192.0.2.1"), true, 0)}
	if st.claim(c3, office) || st.claim(c3, bob) || c3.client != waiting {
		t.Fatalf("claims over the caps: %v", c3.client)
	}
	counts(map[streamClient]int{ann: 2, bob: 2, office: 2, waiting: 1})
	st.releaseConn(c3)
	counts(map[streamClient]int{ann: 2, bob: 2, office: 2})
	st.releaseConn(c2)
	counts(map[streamClient]int{ann: 2, bob: 2, office: 1})
	st.releaseConn(c1)
	for _, c := range sse {
		st.release(c)
	}
	counts(map[streamClient]int{})
}
