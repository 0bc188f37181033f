package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	coderws "github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
)

// bigSubscribe is a graphql-transport-ws subscribe message of about 1 MiB,
// its variables padded (padding): read, checked, compacted and decoded, it
// is about 6 MB allocated on the server.
func bigSubscribe(id string) []byte {
	head := `{"type":"subscribe","id":"` + id + `","payload":{"query":"{ __typename }","variables":{"junk":`
	return []byte(head + padding(1<<20-len(head)-16) + `}}}`)
}

// A WebSocket message is read and decoded in its caller's turn, as an HTTP
// request's body is (ratelimit.Limiter.Turn): while the caller's turn is held
// (here by one of its HTTP requests, whose body is still arriving), the
// server decodes none of the big subscribe messages the caller sends on its
// WebSockets; they wait, unread, and are answered once the turn comes back.
// gqlgen decoded each message (about 45 MB allocated for 1 MiB of empty
// objects, since refused for their items: httpapi.MaxJSONItems) before the
// operation's turn: an anonymous client holding 200
// WebSockets took as much CPU as it sent. Measured by the bytes the process
// allocates while the messages wait, not by time. Not parallel: it weighs
// the process's allocations.
func TestWSMessagesAreDecodedInTheirCallersTurn(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Registry = reg
		o.Limiter = limiterWith(t, ratelimit.Config{Points: 1 << 30, MaxCost: 1 << 30}, reg)
		// The messages are decoded one after another at the caller's pace
		// (slow under -race): a connection whose message waits more than
		// twice the keep-alive is dropped for its late pong.
		o.Streams.KeepAlive = 5 * time.Minute
	})
	const conns = 6
	url := env.Server.URL + "/query"
	wss := make([]*apitest.WS, conns)
	msgs := make([][]byte, conns)
	for i := range wss {
		wss[i] = apitest.DialWS(t, url, apitest.WSOptions{}) // anonymous: the network's turn
		if wss[i].Ack.Type != "connection_ack" {
			t.Fatalf("connection %d: connection_init answered %+v", i+1, wss[i].Ack)
		}
		msgs[i] = bigSubscribe(strconv.Itoa(i))
	}

	// The anonymous caller's turn, held by a request whose body is arriving.
	body, stalled := io.Pipe()
	held := make(chan *apitest.Response, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, url, body)
		if err != nil {
			t.Error(err)
			held <- nil
			return
		}
		req.Header.Set("Content-Type", "application/json")
		held <- env.Do(t, req)
	}()
	t.Cleanup(func() { stalled.Close() }) // lets the server end, so a failure is reported
	if _, err := stalled.Write([]byte(`{"query":"{ __typ`)); err != nil {
		t.Fatal(err)
	}
	waitForMetric(t, env, "taskflow_ratelimit_turns_active", "1") // the anonymous request holds its caller's turn

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	written := make(chan error, conns)
	for i, ws := range wss {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			written <- ws.Conn.Write(ctx, coderws.MessageText, msgs[i])
		}()
	}
	// Each connection waits for the caller's turn: before it reads its
	// message now; before its operation is prepared, its message decoded,
	// it did.
	waitForMetric(t, env, "taskflow_ratelimit_turns_waiting", strconv.Itoa(conns))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated while %d messages of 1 MiB waited for their caller's turn: %d MiB", conns, allocated>>20)
	if allocated > 16<<20 {
		t.Errorf("the process allocated %d MiB while %d messages of 1 MiB waited for their caller's turn: "+
			"they were decoded beside it (about 6 MB each)", allocated>>20, conns)
	}

	// The turn given back, every message is decoded and answered, one at a
	// time.
	if _, err := stalled.Write([]byte(`ename }"}`)); err != nil {
		t.Fatal(err)
	}
	stalled.Close()
	if r := <-held; r == nil || r.Code() != "" {
		t.Fatalf("the request that held the turn: %+v", r)
	}
	for i, ws := range wss {
		if m := ws.Next(); m.Type != "next" || !strings.Contains(string(m.Payload), `"__typename":"Query"`) {
			t.Fatalf("connection %d: answered %s %.200s", i+1, m.Type, m.Payload)
		}
		if m := ws.Next(); m.Type != "complete" {
			t.Fatalf("connection %d: then %s %.200s", i+1, m.Type, m.Payload)
		}
	}
	for range conns {
		if err := <-written; err != nil {
			t.Fatal(err)
		}
	}
}
