package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coderws "github.com/coder/websocket"
)

// attack is one row of the table.
type attack struct {
	name, what string
	// settle makes the harness watch the server's RSS for Settle after it.
	settle bool
	// opens says that the attack opens streams: the harness first waits for
	// its network's rate of opening them to be whole again (refill), so that
	// an attack does not meet the opens the one before it left.
	opens bool
	// cpuBound is the most server CPU one request may take (0: no bound).
	cpuBound time.Duration
	// perRequestCPU says whether CPU per request means anything (not for
	// slow clients, whose cost is held connections).
	perRequestCPU bool
	run           func(ctx context.Context, h *harness, o *outcome) error
	// prepare, when set, builds what the attack sends and returns its run:
	// the harness calls it before the victim and the CPU meter start, since
	// the victim runs in the harness's process and building megabytes of
	// documents there would slow the client that measures the server.
	prepare func(h *harness) func(ctx context.Context, h *harness, o *outcome) error
}

// attacks are every attack, in the order they run.
var attacks = []attack{
	documentFlood("typename", "{ __typename } 14,000 times, a random comment per request (cache miss)",
		func(h *harness) string { return "{" + strings.Repeat(" __typename", h.size(14000)) + " }" }, nil),
	documentFlood("typename-9999", "{ __typename } 9,999 times (under the selection limit: validated, executed)",
		func(h *harness) string { return "{" + strings.Repeat(" __typename", h.size(9999)) + " }" }, nil),
	documentFlood("unknown-fields", "an unknown field 9,999 times (100 errors shown)",
		func(h *harness) string { return "{" + strings.Repeat(" nope", h.size(9999)) + " }" }, nil),
	documentFlood("fragments", "1,400 fragments, each spread once (gqlparser compared every pair)",
		func(h *harness) string {
			n := h.size(1400)
			return "{" + repeatf(n, func(i int) string { return fmt.Sprintf(" ...F%d", i) }) + " }" +
				repeatf(n, func(i int) string { return fmt.Sprintf(" fragment F%d on Query { __typename }", i) })
		}, nil),
	documentFlood("fragment-chain", "1,500 fragments each spreading the next (walked the square of it)",
		func(h *harness) string {
			n := h.size(1500)
			return "{ ...F0 }" +
				repeatf(n, func(i int) string { return fmt.Sprintf(" fragment F%d on Query { ...F%d }", i, i+1) }) +
				fmt.Sprintf(" fragment F%d on Query { __typename }", n)
		}, nil),
	documentFlood("operations", "1,000 operations spreading one fragment of 5,000 fields",
		func(h *harness) string {
			return repeatf(h.size(1000), func(i int) string { return fmt.Sprintf(" query Q%d { ...F }", i) }) +
				" fragment F on Query {" + strings.Repeat(" __typename", h.size(5000)) + " }"
		}, nil),
	documentFlood("long-name", "an unknown field whose name is 900 KB (gqlparser suggested names for it)",
		func(h *harness) string { return "{ " + strings.Repeat("a", h.size(900_000)) + " }" }, nil),
	documentFlood("huge-variables", "{ __typename } with a variables object of 40,000 keys (1 MB of JSON)",
		func(*harness) string { return "{ __typename }" },
		func(h *harness) map[string]any {
			vars := make(map[string]int, h.size(40000))
			for k := range h.size(40000) {
				vars[fmt.Sprintf("key%06d", k)] = k
			}
			return map[string]any{"v": vars}
		}),
	memoryFlood("aliases-240", "240 distinct documents of 4,900 aliases each (the issue's memory attack)",
		func(h *harness, k int) string {
			return fmt.Sprintf("# %d\n{", k) + repeatf(h.size(4900), func(i int) string { return fmt.Sprintf(" a%d: __typename", i) }) + " }"
		}),
	memoryFlood("cache-fill", "240 distinct valid documents at the limits (256 aliases, then 9,700 fields)",
		func(h *harness, k int) string {
			return fmt.Sprintf("# %d\n{", k) + repeatf(h.size(256), func(i int) string { return fmt.Sprintf(" a%d: __typename", i) }) +
				strings.Repeat(" __typename", h.size(9700)) + " }"
		}),
	{name: "nul", what: "a NUL character in text arguments, variables and /audit/export parameters", run: nul},
	{name: "slowloris", what: "connections sending a header line a second, never finishing the headers", run: slowloris},
	{name: "slow-body", what: "connections sending a 1 MB body a byte a second", run: slowBody},
	{name: "idle-connections", what: "keep-alive connections left idle after one request", run: idleConnections},
	{name: "idle-websockets", what: "anonymous WebSockets from one client, acknowledged then left idle", opens: true, run: idleWebSockets},
	{name: "ws-big-messages", what: "50 anonymous WebSockets from one client, each sending 1 MiB subscribe messages (variables of empty objects) back to back",
		cpuBound: documentCPU, perRequestCPU: true, opens: true, prepare: wsBigMessages},
	{name: "ws-message-flood", what: "200 anonymous WebSockets from one client, each sending pings and completes of unknown ids back to back",
		run: wsMessageFlood, opens: true},
	// Last: argon2id's memory is not the document attacks' to answer for.
	{name: "register", what: "60 concurrent register calls (argon2id each)", perRequestCPU: true, run: register},
}

func selected(names []string) ([]attack, error) {
	if len(names) == 0 {
		return attacks, nil
	}
	var out []attack
	for _, n := range names {
		i := slices.IndexFunc(attacks, func(a attack) bool { return a.name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown attack %q", n)
		}
		out = append(out, attacks[i])
	}
	return out, nil
}

// size scales n by the run's Scale (at least 1).
func (h *harness) size(n int) int { return max(1, int(float64(n)*h.cfg.Scale)) }

func repeatf(n int, f func(i int) string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(f(i))
	}
	return b.String()
}

// documentFlood sends anonymous documents doc, each made unique by a random
// comment (no cache answers it), with vars as variables (nil: none),
// Attackers at a time, for Duration. The document and the variables are
// encoded once, before the measurement starts; a request costs the harness
// one copy of them.
func documentFlood(name, what string, doc func(h *harness) string, vars func(h *harness) map[string]any) attack {
	return attack{name: name, what: what, cpuBound: documentCPU, perRequestCPU: true,
		prepare: func(h *harness) func(ctx context.Context, h *harness, o *outcome) error {
			q, err := json.Marshal(doc(h))
			if err != nil {
				panic(err)
			}
			v := []byte("null")
			if vars != nil {
				if v, err = json.Marshal(vars(h)); err != nil {
					panic(err)
				}
			}
			return func(ctx context.Context, h *harness, o *outcome) error {
				return h.flood(ctx, o, h.cfg.Duration, func(r *rand.Rand, _ int) []byte {
					b := make([]byte, 0, len(q)+len(v)+64)
					b = append(b, `{"query":"# `...)
					b = strconv.AppendUint(b, r.Uint64(), 16)
					b = append(b, `\n`...)
					b = append(b, q[1:]...) // the document, after its opening quote
					b = append(b, `,"variables":`...)
					b = append(b, v...)
					return append(b, '}')
				})
			}
		}}
}

// memoryFlood sends Documents distinct documents made by doc, Attackers at a
// time, each once. They are all made before the measurement starts.
func memoryFlood(name, what string, doc func(h *harness, k int) string) attack {
	return attack{name: name, what: what, cpuBound: documentCPU, perRequestCPU: true, settle: name == "cache-fill",
		prepare: func(h *harness) func(ctx context.Context, h *harness, o *outcome) error {
			bodies := make([][]byte, h.cfg.Documents)
			for k := range bodies {
				bodies[k] = body(doc(h, k), nil)
			}
			return func(ctx context.Context, h *harness, o *outcome) error {
				var next sync.Mutex
				k := 0
				var wg sync.WaitGroup
				for range h.cfg.Attackers {
					wg.Go(func() {
						for ctx.Err() == nil {
							next.Lock()
							mine := k
							k++
							next.Unlock()
							if mine >= len(bodies) {
								return
							}
							status, resp, err := post(ctx, h.client, h.srv.URL()+"/query", "", bodies[mine])
							o.answer(status, resp, err)
						}
					})
				}
				wg.Wait()
				return nil
			}
		}}
}

// flood sends the bodies of next, Attackers at a time, for d (each attacker
// sends at least one).
func (h *harness) flood(ctx context.Context, o *outcome, d time.Duration, next func(r *rand.Rand, i int) []byte) error {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for a := range h.cfg.Attackers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(a), uint64(time.Now().UnixNano())))
			for i := 0; ctx.Err() == nil; i++ {
				status, resp, err := post(ctx, h.client, h.srv.URL()+"/query", "", next(r, i))
				o.answer(status, resp, err)
				if time.Now().After(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func body(query string, vars map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		panic(err)
	}
	return b
}

// register sends Registers register calls at once, each a new account, and
// notes how many accounts were made before the first 429.
func register(ctx context.Context, h *harness, o *outcome) error {
	type result struct {
		at     time.Time
		status int
		ok     bool
	}
	results := make([]result, h.cfg.Registers)
	run := time.Now().UnixNano()
	var start, wg sync.WaitGroup
	start.Add(1)
	client := newClient(h.cfg.Registers)
	for i := range h.cfg.Registers {
		wg.Go(func() {
			start.Wait()
			b := body(`mutation($in: RegisterInput!) { register(input: $in) { token } }`, map[string]any{"in": map[string]any{
				"email": fmt.Sprintf("abuse-%d-%d@example.com", run, i), "password": "correct horse battery staple",
				"name": fmt.Sprintf("Abuse %d", i)}})
			status, resp, err := post(ctx, client, h.srv.URL()+"/query", "", b)
			o.answer(status, resp, err)
			results[i] = result{at: time.Now(), status: status,
				ok: err == nil && status == http.StatusOK && bytes.Contains(resp, []byte(`"token"`))}
		})
	}
	start.Done()
	wg.Wait()
	slices.SortFunc(results, func(a, b result) int { return a.at.Compare(b.at) })
	created, refused, before := 0, 0, -1
	for _, r := range results {
		if r.ok {
			created++
		}
		if r.status == http.StatusTooManyRequests {
			if before < 0 {
				before = created
			}
			refused++
		}
	}
	if refused == 0 {
		o.note("%d accounts created, no 429", created)
	} else {
		// A refusal answers at once and argon2id takes a while: by the time
		// they answered, the first 429 usually came before any account.
		o.note("%d accounts created, %d calls refused with 429 (%d accounts answered before the first 429)",
			created, refused, before)
	}
	return nil
}

// nul sends a NUL character where text goes and notes each answer.
func nul(ctx context.Context, h *harness, o *outcome) error {
	u := h.fix.Users[0]
	gqlProbe := func(name, query string, vars map[string]any, token string) {
		status, resp, err := post(ctx, h.client, h.srv.URL()+"/query", token, body(query, vars))
		o.answer(status, resp, err)
		o.note("%s: %s", name, answerKey(status, resp, err))
	}
	gqlProbe("createTask title (literal \\u0000)",
		fmt.Sprintf(`mutation { createTask(input: {projectId: %q, title: "a\u0000b"}) { id } }`, h.fix.InboxID), nil, u.Token)
	gqlProbe("createTask title (variable)", `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"projectId": h.fix.InboxID, "title": "a\x00b"}}, u.Token)
	gqlProbe("register name (variable)", `mutation($in: RegisterInput!) { register(input: $in) { token } }`,
		map[string]any{"in": map[string]any{"email": fmt.Sprintf("nul-%d@example.com", time.Now().UnixNano()),
			"password": "correct horse battery staple", "name": "a\x00b"}}, "")
	gqlProbe("searchTasks query (variable)", `query($ws: ID!, $q: String!) { searchTasks(workspaceId: $ws, query: $q) { nodes { id } } }`,
		map[string]any{"ws": h.fix.WorkspaceID, "q": "a\x00b"}, u.Token)
	gqlProbe("task id (variable)", `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": "a\x00b"}, u.Token)
	status, resp, err := post(ctx, h.client, h.srv.URL()+"/query", "",
		[]byte(`{"query":"query A { __typename }","operationName":"A\u0000"}`))
	o.answer(status, resp, err)
	o.note("operationName: %s", answerKey(status, resp, err))
	for _, p := range []struct{ name, query string }{
		{"export workspaceId", "workspaceId=" + url.QueryEscape("a\x00b")},
		{"export actions", "workspaceId=" + h.fix.WorkspaceID + "&actions=" + url.QueryEscape("task.\x00")},
		{"export entityType", "workspaceId=" + h.fix.WorkspaceID + "&entityType=" + url.QueryEscape("\x00")},
		{"export actorId", "workspaceId=" + h.fix.WorkspaceID + "&actorId=" + url.QueryEscape("\x00")},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL()+"/audit/export?"+p.query, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+u.Token)
		status, resp, err := do(h.client, req)
		o.answer(status, resp, err)
		o.note("%s: %s", p.name, answerKey(status, resp, err))
	}
	return nil
}

// answerKey is how outcome.answer files an answer.
func answerKey(status int, resp []byte, err error) string {
	o := &outcome{answers: map[string]int{}}
	o.answer(status, resp, err)
	for k := range o.answers {
		return k
	}
	return ""
}

// slowConns opens n connections to the server, starts each with start and
// then sends one byte of trickle a second, until the server closes it or
// SlowFor has passed; it notes how long the server kept them.
func (h *harness) slowConns(ctx context.Context, o *outcome, n int, start, trickle string) error {
	addr := strings.TrimPrefix(h.srv.URL(), "http://")
	ctx, cancel := context.WithTimeout(ctx, h.cfg.SlowFor)
	defer cancel()
	var mu sync.Mutex
	var closedAfter []time.Duration
	open := 0
	var wg sync.WaitGroup
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			o.note("dial: %v", err)
			break
		}
		o.mu.Lock()
		o.requests++
		o.mu.Unlock()
		began := time.Now()
		wg.Go(func() {
			closed := make(chan struct{})
			var ours atomic.Bool                   // the harness closes the connection
			defer func() { c.Close(); <-closed }() // the reader has counted its answer
			go func() {                            // the server's answer, if any, then its close
				b, _ := io.ReadAll(c)
				status := "closed"
				if bytes.HasPrefix(b, []byte("HTTP/1.1 ")) && len(b) >= 12 {
					status = string(b[9:12])
				}
				if ours.Load() && status == "closed" {
					status = "still open"
				}
				o.mu.Lock()
				o.answers[status]++
				o.mu.Unlock()
				close(closed)
			}()
			if _, err := io.WriteString(c, start); err != nil {
				return
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-closed:
					mu.Lock()
					closedAfter = append(closedAfter, time.Since(began))
					mu.Unlock()
					return
				case <-ctx.Done():
					ours.Store(true)
					mu.Lock()
					open++
					mu.Unlock()
					return
				case <-tick.C:
					if trickle != "" {
						_, _ = io.WriteString(c, trickle)
					}
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(closedAfter)
	if len(closedAfter) > 0 {
		o.note("%d closed by the server after %.1f s (median), %d still open after %s",
			len(closedAfter), closedAfter[len(closedAfter)/2].Seconds(), open, h.cfg.SlowFor)
	} else {
		o.note("none closed by the server in %s", h.cfg.SlowFor)
	}
	return nil
}

func slowloris(ctx context.Context, h *harness, o *outcome) error {
	return h.slowConns(ctx, o, h.cfg.SlowConns, "POST /query HTTP/1.1\r\nHost: taskflow\r\n", "X-Slow: 1\r\n")
}

func slowBody(ctx context.Context, h *harness, o *outcome) error {
	return h.slowConns(ctx, o, h.cfg.SlowConns, "POST /query HTTP/1.1\r\nHost: taskflow\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{", " ")
}

// idleConnections makes one request on each of IdleConns connections and
// leaves them open and idle (the server keeps a keep-alive connection for
// its IdleTimeout).
func idleConnections(ctx context.Context, h *harness, o *outcome) error {
	return h.slowConns(ctx, o, h.cfg.IdleConns, "GET /healthz HTTP/1.1\r\nHost: taskflow\r\n\r\n", "")
}

// idleWebSockets opens IdleWebSockets anonymous graphql-ws connections from
// the harness (one client), one after the other, sends each connection_init
// and leaves it idle (answering the server's pings, as a client that means to
// stay does: the server keeps it for SUBSCRIPTION_IDLE_TIMEOUT, 5 minutes),
// and holds them for SlowFor. Past SUBSCRIPTION_MAX_PER_CLIENT (200)
// anonymous ones the connection_init is closed with 4429 (from 2026-12-05;
// before, the upgrade was refused with 429, and until 2026-12-04 every one
// was accepted, up to the instance's SUBSCRIPTION_MAX_CONNECTIONS, after
// which every other client's stream was 503).
func idleWebSockets(ctx context.Context, h *harness, o *outcome) error {
	url := "ws" + strings.TrimPrefix(h.srv.URL(), "http") + "/query"
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	held := 0
	for range h.cfg.IdleWebSockets { // each answer counts a request
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		c := dialWS(dctx, url, o)
		if c == nil {
			dcancel()
			continue
		}
		err := c.Write(dctx, coderws.MessageText, []byte(`{"type":"connection_init"}`))
		var ack []byte
		if err == nil {
			_, ack, err = c.Read(dctx)
		}
		dcancel()
		if err == nil && !bytes.Contains(ack, []byte(`"connection_ack"`)) {
			err = fmt.Errorf("connection_init answered %s", ack)
		}
		o.answer(http.StatusSwitchingProtocols, nil, err)
		if err != nil {
			_ = c.CloseNow()
			continue
		}
		held++
		wg.Go(func() {
			defer c.CloseNow()
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					return
				}
				if bytes.Contains(b, []byte(`"ping"`)) {
					_ = c.Write(ctx, coderws.MessageText, []byte(`{"type":"pong"}`))
				}
			}
		})
	}
	o.note("%d of %d connections accepted and held for %s", held, h.cfg.IdleWebSockets, h.cfg.SlowFor)
	select {
	case <-time.After(h.cfg.SlowFor):
	case <-ctx.Done():
	}
	return nil
}

// wsBigMessages opens 50 anonymous WebSockets (one client) and sends on each,
// for Duration, subscribe messages of { __typename } with 1 MiB of variables
// (an array of empty objects: about 60 ms of CPU and 45 MB allocated to
// decode each) as fast as the server reads them; each answer counts a
// request, as does each connection acknowledged, and a connection the
// server closes is opened again, as a hostile client would. Until
// 2026-12-05 the server decoded each message before its caller's turn, so
// the client took as much CPU as it sent; since, a long message is read in
// its caller's turn, and (later that day) one of more than 10,000 JSON
// items closes its connection before it is decoded.
func wsBigMessages(h *harness) func(ctx context.Context, h *harness, o *outcome) error {
	conns := h.size(50)
	head := `{"type":"subscribe","id":"00000000","payload":{"query":"{ __typename }","variables":{"junk":[{}`
	idAt := strings.Index(head, "00000000")
	n := (h.size(1<<20) - len(head) - 32) / 3
	msg := head + strings.Repeat(",{}", max(n, 0)) + `]}}}`
	return func(ctx context.Context, h *harness, o *outcome) error {
		url := "ws" + strings.TrimPrefix(h.srv.URL(), "http") + "/query"
		ctx, cancel := context.WithTimeout(ctx, h.cfg.Duration)
		defer cancel()
		var wg sync.WaitGroup
		for range conns {
			wg.Go(func() {
				// At least once: each try is answered, if only "cancelled".
				for first := true; first || ctx.Err() == nil; first = false {
					if !wsBigSession(ctx, url, msg, idAt, o) {
						// Refused or not answered: not a busy loop.
						select {
						case <-ctx.Done():
						case <-time.After(100 * time.Millisecond):
						}
					}
				}
			})
		}
		wg.Wait()
		return nil
	}
}

// wsBigSession is one connection of wsBigMessages: it opens it, sends msg
// (an id of its own at idAt each time) back to back until the connection
// closes or ctx ends, and reports whether the connection was acknowledged.
func wsBigSession(ctx context.Context, url, msg string, idAt int, o *outcome) bool {
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c := dialWS(dctx, url, o)
	if c == nil {
		return false
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	err := c.Write(dctx, coderws.MessageText, []byte(`{"type":"connection_init"}`))
	if err == nil {
		_, _, err = c.Read(dctx)
	}
	if err != nil {
		o.answer(0, nil, err)
		return false
	}
	o.answered("connection_ack") // a request too (ws-message-flood counts them so)
	var wg sync.WaitGroup
	wg.Go(func() { // reads the answers
		defer c.CloseNow()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				if ctx.Err() == nil {
					o.answer(0, nil, err)
				}
				return
			}
			var m struct {
				Type    string          `json:"type"`
				Payload json.RawMessage `json:"payload"`
			}
			_ = json.Unmarshal(b, &m)
			switch m.Type {
			case "ping":
				_ = c.Write(ctx, coderws.MessageText, []byte(`{"type":"pong"}`))
			case "next":
				o.answer(http.StatusOK, m.Payload, nil)
			case "error":
				o.answer(http.StatusOK, []byte(`{"errors":`+string(m.Payload)+`}`), nil)
			}
		}
	})
	m := []byte(msg) // built once: the harness runs the victim
	for i := 0; ctx.Err() == nil; i++ {
		copy(m[idAt:], fmt.Sprintf("%08d", i%100_000_000)) // an id of its own
		if c.Write(ctx, coderws.MessageText, m) != nil {
			break
		}
	}
	wg.Wait()
	return true
}

// dialWS opens a graphql-transport-ws WebSocket to url, or records in o the
// answer that refused the upgrade (its status and body, or the error of no
// answer) and returns nil.
func dialWS(ctx context.Context, url string, o *outcome) *coderws.Conn {
	c, res, err := coderws.Dial(ctx, url, &coderws.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err == nil {
		return c
	}
	if res == nil {
		o.answer(0, nil, err)
		return nil
	}
	b, _ := io.ReadAll(res.Body)
	o.answer(res.StatusCode, b, nil)
	return nil
}
