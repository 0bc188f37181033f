package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/live"
	"taskflow/reqinfo"
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
	take := func(ip string, want int) string {
		t.Helper()
		w := httptest.NewRecorder()
		client, ok := st.acquire(w, streamRequest(ip))
		if ok != (want == 0) || !ok && w.Code != want {
			t.Fatalf("%s: acquired %v, answered %d, want %d", ip, ok, w.Code, want)
		}
		return client
	}
	a1, a2 := take("2001:db8::1", 0), take("2001:db8::2", 0)
	take("2001:db8::3", http.StatusTooManyRequests)
	b := take("192.0.2.1", 0)
	take("192.0.2.2", http.StatusServiceUnavailable) // the instance is full
	if st.open != 3 || len(st.perClient) != 2 || st.perClient["2001:db8::/64"] != 2 || st.perClient["192.0.2.1"] != 1 {
		t.Fatalf("open %d, per client %v", st.open, st.perClient)
	}
	st.release(a1)
	take("192.0.2.2", 0)
	for _, c := range []string{a2, b, "192.0.2.2"} {
		st.release(c)
	}
	if st.open != 0 || len(st.perClient) != 0 {
		t.Fatalf("all released: open %d, per client %v", st.open, st.perClient)
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
	if st.open != 0 || len(st.perClient) != 0 {
		t.Fatalf("after a panic: open %d, per client %v", st.open, st.perClient)
	}
}
