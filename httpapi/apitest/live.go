package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	coderws "github.com/coder/websocket"
)

// streamWait bounds every wait of the stream clients for the next message:
// a guard against a test hanging, not a timing assertion.
const streamWait = 60 * time.Second

// WSMessage is a graphql-transport-ws message.
type WSMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// WS is a graphql-transport-ws client connection, as graphql-ws speaks it.
type WS struct {
	t    testing.TB
	Conn *coderws.Conn
	// Ack is the connection_ack (or the first message after
	// connection_init).
	Ack WSMessage
}

// WSOptions change how DialWS connects.
type WSOptions struct {
	// Header is sent with the upgrade request (Authorization, Origin, ...).
	Header http.Header
	// Init is the connection_init payload (nil: none).
	Init map[string]any
	// NoInit skips connection_init.
	NoInit bool
	// Subprotocol is the one subprotocol asked for (empty:
	// graphql-transport-ws); "graphql-ws" is the legacy
	// subscriptions-transport-ws protocol, whose messages (start, data, stop,
	// ka) WS sends and reads as they are.
	Subprotocol string
}

// DialWS opens a graphql-transport-ws connection to url (http://host/query)
// and sends connection_init; it fails the test when the upgrade fails.
func DialWS(t testing.TB, url string, o WSOptions) *WS {
	t.Helper()
	ws, res, err := TryDialWS(t, url, o)
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("websocket dial %s: %v (HTTP %d)", url, err, status)
	}
	return ws
}

// TryDialWS is DialWS returning the failure.
func TryDialWS(t testing.TB, url string, o WSOptions) (*WS, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamWait)
	defer cancel()
	protocol := o.Subprotocol
	if protocol == "" {
		protocol = "graphql-transport-ws"
	}
	conn, res, err := coderws.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), &coderws.DialOptions{
		HTTPHeader: o.Header, Subprotocols: []string{protocol}})
	if err != nil {
		return nil, res, err
	}
	conn.SetReadLimit(16 << 20)
	ws := &WS{t: t, Conn: conn}
	t.Cleanup(func() { _ = conn.CloseNow() })
	if o.NoInit {
		return ws, res, nil
	}
	init := WSMessage{Type: "connection_init"}
	if o.Init != nil {
		init.Payload, _ = json.Marshal(o.Init)
	}
	ws.Send(init)
	ws.Ack, err = ws.TryNext()
	return ws, res, err
}

// Send writes a message.
func (w *WS) Send(m WSMessage) {
	w.t.Helper()
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), streamWait)
	defer cancel()
	if err := w.Conn.Write(ctx, coderws.MessageText, b); err != nil {
		w.t.Fatalf("websocket write: %v", err)
	}
}

// Subscribe starts operation query with vars under id.
func (w *WS) Subscribe(id, query string, vars map[string]any) {
	w.t.Helper()
	p, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	w.Send(WSMessage{Type: "subscribe", ID: id, Payload: p})
}

// Next returns the next message that is not a ping (answered with a pong).
func (w *WS) Next() WSMessage {
	w.t.Helper()
	m, err := w.TryNext()
	if err != nil {
		w.t.Fatalf("websocket read: %v", err)
	}
	return m
}

// TryNext is Next returning the failure (a close: coderws.CloseStatus). It
// waits at most streamWait in all, however many pings come meanwhile (a
// stream that sends nothing else fails the test instead of hanging it).
func (w *WS) TryNext() (WSMessage, error) {
	deadline := time.Now().Add(streamWait)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, b, err := w.Conn.Read(ctx)
		cancel()
		if err != nil {
			return WSMessage{}, err
		}
		var m WSMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return WSMessage{}, err
		}
		if m.Type == "ping" {
			b, _ := json.Marshal(WSMessage{Type: "pong"})
			ctx, cancel := context.WithTimeout(context.Background(), streamWait)
			_ = w.Conn.Write(ctx, coderws.MessageText, b)
			cancel()
			continue
		}
		return m, nil
	}
}

// SSE is one GraphQL-over-SSE stream.
type SSE struct {
	t      testing.TB
	Res    *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// SSEEvent is one event of a stream.
type SSEEvent struct {
	Event string
	Data  string
}

// OpenSSE posts query with vars and Accept: text/event-stream; the answer's
// status and headers are in Res (a refusal's body is not a stream).
func (e *Env) OpenSSE(t testing.TB, token, query string, vars map[string]any, headers ...string) *SSE {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	return e.OpenSSEBody(t, token, body, headers...)
}

// OpenSSEBody is OpenSSE with the JSON body given as written.
func (e *Env) OpenSSEBody(t testing.TB, token string, body []byte, headers ...string) *SSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// A MultiReader lets go of the body once sent: the request, which the
	// response keeps, does not hold it (tests weigh the heap while streams
	// are open).
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Server.URL+"/query", io.MultiReader(bytes.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	SetHeaders(req, token, headers...)
	res, err := e.Server.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &SSE{t: t, Res: res, r: bufio.NewReader(res.Body), cancel: cancel}
	t.Cleanup(s.Close)
	return s
}

// Close ends the stream from the client's side.
func (s *SSE) Close() {
	s.cancel()
	_ = s.Res.Body.Close()
}

// Next returns the next event that is not a comment; ok is false at the end
// of the stream.
func (s *SSE) Next() (SSEEvent, bool) {
	s.t.Helper()
	var ev SSEEvent
	timer := time.AfterFunc(streamWait, s.cancel)
	defer timer.Stop()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, false
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.Event != "" || ev.Data != "" {
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			ev.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			ev.Data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}
