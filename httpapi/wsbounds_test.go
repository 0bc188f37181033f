package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	coderws "github.com/coder/websocket"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
)

// padded returns `{"query":"{ __typename }","variables":{"pad":[0,...]}}`
// with items JSON items in all (the body's two members, the variables' one
// and the array's elements), and its variables alone.
func padded(items int) (body, variables string) {
	variables = `{"pad":[` + strings.TrimSuffix(strings.Repeat("0,", items-3), ",") + `]}`
	return `{"query":"{ __typename }","variables":` + variables + `}`, variables
}

// A request's JSON is bounded by its items (members and elements), not only
// by its bytes: decoding a megabyte of empty objects took 90 ms of CPU and
// 45 MB. One of httpapi.MaxJSONItems is run; one more is refused before it
// is decoded: 400 GRAPHQL_PARSE_FAILED over POST and GET, the WebSocket
// closed with 4400 (a message that is not the protocol's) whatever it is.
func TestJSONItemsAreBounded(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t)
	check := func(t *testing.T, items int, res *http.Response) {
		t.Helper()
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var out struct {
			Data struct {
				Typename string `json:"__typename"`
			}
			Errors []struct {
				Message    string
				Extensions struct{ Code string }
			}
		}
		_ = json.Unmarshal(raw, &out)
		if items <= httpapi.MaxJSONItems {
			if res.StatusCode != http.StatusOK || out.Data.Typename != "Query" {
				t.Fatalf("%d items: %d %.300s, want the query run", items, res.StatusCode, raw)
			}
			return
		}
		if res.StatusCode != http.StatusBadRequest || len(out.Errors) != 1 || out.Errors[0].Extensions.Code != "GRAPHQL_PARSE_FAILED" ||
			!strings.Contains(out.Errors[0].Message, "10000") {
			t.Fatalf("%d items: %d %.300s, want 400 GRAPHQL_PARSE_FAILED naming the limit", items, res.StatusCode, raw)
		}
	}
	for _, items := range []int{httpapi.MaxJSONItems, httpapi.MaxJSONItems + 1} {
		body, variables := padded(items)
		t.Run("POST", func(t *testing.T) {
			res, err := http.Post(e.Server.URL+"/query", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			check(t, items, res)
		})
		t.Run("GET", func(t *testing.T) {
			// variables has two items fewer than the body: the same count
			// of the array's elements, bounded as the body is.
			q := url.Values{"query": {"{ __typename }"}, "variables": {strings.Replace(variables, `[`, `[0,0,`, 1)}}
			res, err := http.Get(e.Server.URL + "/query?" + q.Encode())
			if err != nil {
				t.Fatal(err)
			}
			check(t, items, res)
		})
		t.Run("WebSocket", func(t *testing.T) {
			ws := apitest.DialWS(t, e.Server.URL+"/query", apitest.WSOptions{})
			if ws.Ack.Type != "connection_ack" {
				t.Fatalf("connection_init answered %+v", ws.Ack)
			}
			// {"type","id","payload":{"query","variables":{"pad":[...]}}}:
			// three items more than the body's around the same variables.
			_, variables := padded(items - 3)
			msg := `{"type":"subscribe","id":"1","payload":{"query":"{ __typename }","variables":` + variables + `}}`
			if err := ws.Conn.Write(t.Context(), coderws.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if items <= httpapi.MaxJSONItems {
				if m := ws.Next(); m.Type != "next" || !strings.Contains(string(m.Payload), `"Query"`) {
					t.Fatalf("%d items: answered %s %.300s, want the query run", items, m.Type, m.Payload)
				}
				return
			}
			if ce := wsClosed(t, ws); ce.Code != httpapi.CloseBadRequest || !strings.Contains(ce.Reason, "10000") {
				t.Fatalf("%d items: closed with %d %q, want 4400 naming the limit", items, ce.Code, ce.Reason)
			}
		})
	}
}

// padding returns a JSON array of 120-byte strings about size bytes long,
// within httpapi.MaxJSONItems up to 1 MiB: the heaviest padding a request
// may carry, decoded to about 1.2 times its length (a megabyte of empty
// objects, 20 times, is refused since the items are bounded).
func padding(size int) string {
	item := `"` + strings.Repeat("x", 120) + `"`
	n := max(size/(len(item)+1), 1)
	return "[" + strings.Repeat(item+",", n-1) + item + "]"
}

// A connection the server closes (here for a message of no type the
// protocol has, 4400) stops reading what its client sends after the close
// frame: coder/websocket waits up to 5 s for the client's close frame,
// reading and discarding every byte sent meanwhile one at a time, so a
// client streaming on after it took the server's CPU at its bandwidth for
// 5 s a connection (bench/abuse's ws-big-messages, reconnecting, spent 90%
// of the server's CPU there). The server now reads at most 4 KiB more, and
// the client's writes fail once the sockets' buffers are full. Counted in
// bytes the client could write, never timed.
func TestWSCloseReadsLittleMore(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t)
	ws := apitest.DialWS(t, e.Server.URL+"/query", apitest.WSOptions{})
	if ws.Ack.Type != "connection_ack" {
		t.Fatalf("connection_init answered %+v", ws.Ack)
	}
	if err := ws.Conn.Write(t.Context(), coderws.MessageText, []byte(`{"type":"bogus"}`)); err != nil {
		t.Fatal(err)
	}
	chunk := []byte(`{"type":"ping","payload":{"pad":"` + strings.Repeat("x", 256<<10) + `"}}`)
	const most = 512 << 20
	written := 0
	for written < most {
		if err := ws.Conn.Write(t.Context(), coderws.MessageText, chunk); err != nil {
			break
		}
		written += len(chunk)
	}
	t.Logf("written after the close: %d MiB", written>>20)
	if written > 32<<20 {
		t.Errorf("the client wrote %d MiB after the server closed the connection: the server read on", written>>20)
	}
}

// A subscribe's extensions are cut to persistedQuery before gqlgen keeps
// its payload: the persisted query still runs over a WebSocket, by its text
// with its hash and then by its hash alone, beside a member the server does
// not read.
func TestWSPersistedQueryKeepsItsExtension(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t)
	query := `query PQ { __typename }`
	sum := sha256.Sum256([]byte(query))
	ext := `{"other":{"x":[1,2]},"persistedQuery":{"version":1,"sha256Hash":"` + hex.EncodeToString(sum[:]) + `"}}`
	ws := e.dial(t, e.member)
	for i, payload := range []string{
		`{"query":` + mustJSON(query) + `,"extensions":` + ext + `}`,
		`{"extensions":` + ext + `}`,
	} {
		id := strconv.Itoa(i)
		ws.Send(apitest.WSMessage{Type: "subscribe", ID: id, Payload: json.RawMessage(payload)})
		if m := ws.Next(); m.Type != "next" || m.ID != id || !strings.Contains(string(m.Payload), `"__typename":"Query"`) {
			t.Fatalf("%s: answered %s %s %s", payload, m.Type, m.ID, m.Payload)
		}
		if m := ws.Next(); m.Type != "complete" {
			t.Fatalf("%s: then %s %s", payload, m.Type, m.Payload)
		}
	}
}

// A client may open streams at most httpapi.StreamOpensPerSecond a second,
// after a burst of httpapi.StreamOpenBurst: an anonymous network opening and
// closing WebSockets back to back is refused 429 RATE_LIMITED, limit
// "opens", with Retry-After, before its upgrade, once past the burst. A
// client whose WebSockets the server closed opened them again 811 times a
// second, no bound on how often (bench/abuse's ws-big-messages). Checked as
// an upper bound on the opens accepted, which a slow machine cannot exceed.
func TestStreamOpensAreBounded(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t)
	url := "ws" + strings.TrimPrefix(e.Server.URL, "http") + "/query"
	start := time.Now()
	opened := 0
	for attempt := 0; ; attempt++ {
		if attempt == 20*httpapi.StreamOpenBurst {
			t.Fatalf("%d WebSockets opened and closed back to back, none refused", attempt)
		}
		c, res, err := coderws.Dial(t.Context(), url, &coderws.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
		if err == nil {
			opened++
			_ = c.CloseNow()
			continue
		}
		if res == nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" ||
			!strings.Contains(string(raw), `"limit":"opens"`) || !strings.Contains(string(raw), `"RATE_LIMITED"`) {
			t.Fatalf("open %d refused %d %s %s, want 429 RATE_LIMITED limit opens, Retry-After 1", attempt+1, res.StatusCode, res.Header, raw)
		}
		break
	}
	most := httpapi.StreamOpenBurst + int(time.Since(start).Seconds()*httpapi.StreamOpensPerSecond) + 1
	t.Logf("%d WebSockets opened before a refusal (at most %d)", opened, most)
	if opened > most {
		t.Errorf("%d WebSockets opened before a refusal, over the %d the rate allows", opened, most)
	}
	// Another client is not refused for it: a user whose token comes with
	// the upgrade (one sent in connection_init counts on the network until
	// then).
	ws := apitest.DialWS(t, e.Server.URL+"/query", apitest.WSOptions{
		Header: http.Header{"Authorization": {"Bearer " + e.member.Token}}})
	if ws.Ack.Type != "connection_ack" {
		t.Fatalf("a signed-in user's WebSocket: %+v", ws.Ack)
	}
}
