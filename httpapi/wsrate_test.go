package httpapi_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	coderws "github.com/coder/websocket"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
)

// flooded is what a connection flooding pings got back.
type flooded struct {
	pongs int
	// over is the first pong that came sooner than the bound allows, if any.
	over string
	err  error
}

// floodPings sends n pings on ws back to back (before reading anything) and
// reads their pongs (TryNext answers the server's pings meanwhile), checking
// at each that no more came than the bound lets through since since, a time
// before the connection was dialed: WSMessageBurst, then WSMessagesPerSecond.
// The count of pongs so far goes to progress after each one. It ends at the
// n-th pong or the first error (a close).
func floodPings(ws *apitest.WS, n int, since time.Time, progress chan<- int) flooded {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for range n {
			if ws.Conn.Write(ctx, coderws.MessageText, []byte(`{"type":"ping"}`)) != nil {
				return
			}
		}
	}()
	var f flooded
	for f.pongs < n {
		m, err := ws.TryNext()
		if err != nil {
			f.err = err
			return f
		}
		if m.Type != "pong" {
			f.err = fmt.Errorf("a flooding connection got %s %s", m.Type, m.Payload)
			return f
		}
		f.pongs++
		// The +1: the bucket's arithmetic is in floating point. The
		// connection_init took a token too: the bound is not reached.
		allowed := httpapi.WSMessageBurst + httpapi.WSMessagesPerSecond*time.Since(since).Seconds() + 1
		if f.over == "" && float64(f.pongs) > allowed {
			f.over = fmt.Sprintf("%d pongs %s after the dial: the bound lets through at most %.0f", f.pongs, time.Since(since), allowed)
		}
		select {
		case progress <- f.pongs:
		default:
		}
	}
	return f
}

// floodPastBurst starts floodPings on ws and returns, once more pongs than
// WSMessageBurst came (the connection's reads are held back from then on),
// where its outcome will come.
func floodPastBurst(t *testing.T, ws *apitest.WS, n int, since time.Time) <-chan flooded {
	t.Helper()
	progress := make(chan int, 1)
	done := make(chan flooded, 1)
	go func() { done <- floodPings(ws, n, since, progress) }()
	for got := 0; got <= httpapi.WSMessageBurst; {
		select {
		case got = <-progress:
		case f := <-done:
			t.Fatalf("the flood ended after %d pongs: %v %s", f.pongs, f.err, f.over)
		}
	}
	return done
}

// A connection that floods the server with pings is read no faster than
// its message rate (WSMessageBurst, then WSMessagesPerSecond): it gets every
// pong, nothing closed or lost, at that pace, the server's reads held back
// (TCP's flow control slows the client). A pong the client sent behind its
// backlog is read late, past twice the keep-alive, and the connection is not
// dropped for it: the time its reads wait is not counted against its pong.
// Another connection of the same network is served meanwhile, and the
// messages held back are counted (taskflow_ws_messages_delayed_total). Then a
// connection waiting to read is ended by the server's shutdown (1012), its
// place given back. Not parallel: the flood's pace is a count of pongs over
// elapsed time, which cannot come out higher than the bound however slow the
// machine is, but the pongs must come.
func TestWSMessageRateIsBounded(t *testing.T) {
	env := apitest.New(t, func(o *httpapi.Options) {
		// Pings every 2 s: the flooder's pong waits behind its backlog (about
		// 10 s of it) well past twice that.
		o.Streams.KeepAlive = 2 * time.Second
	})
	url := env.Server.URL + "/query"
	const pings = 600
	start := time.Now()
	flooder := apitest.DialWS(t, url, apitest.WSOptions{})
	victim := apitest.DialWS(t, url, apitest.WSOptions{})
	if flooder.Ack.Type != "connection_ack" || victim.Ack.Type != "connection_ack" {
		t.Fatalf("connection_init answered %+v, %+v", flooder.Ack, victim.Ack)
	}
	// The victim answers the server's pings while it is not asked anything.
	victimMsgs := make(chan apitest.WSMessage, 16)
	go func() {
		defer close(victimMsgs)
		for {
			m, err := victim.TryNext()
			if err != nil {
				return
			}
			victimMsgs <- m
		}
	}()
	// Once the flooder is held back (past its burst), the other connection
	// is answered at once: a ping, and a query.
	done := floodPastBurst(t, flooder, pings, start)
	victim.Send(apitest.WSMessage{Type: "ping"})
	victim.Subscribe("q", `{ __typename }`, nil)
	for _, want := range []string{"pong", "next", "complete"} {
		select {
		case m, ok := <-victimMsgs:
			if !ok || m.Type != want {
				t.Fatalf("the other connection got %+v (open: %v), want %s", m, ok, want)
			}
		case f := <-done:
			t.Fatalf("the flood of %d pings was answered before the other connection's %s (%d pongs, %v)", pings, want, f.pongs, f.err)
		}
	}

	f := <-done
	if f.err != nil {
		t.Fatalf("the flooding connection after %d of %d pongs: %v (close %d)", f.pongs, pings, f.err, coderws.CloseStatus(f.err))
	}
	if f.over != "" {
		t.Errorf("read faster than the bound: %s", f.over)
	}
	t.Logf("%d pongs in %s", f.pongs, time.Since(start))
	if d, _ := strconv.Atoi(metricValue(t, env, "taskflow_ws_messages_delayed_total")); d == 0 {
		t.Errorf("taskflow_ws_messages_delayed_total = %q after a flood of %d pings",
			metricValue(t, env, "taskflow_ws_messages_delayed_total"), pings)
	}

	// A flood held back when the server shuts down: its connection closes
	// with 1012 and gives its place back (its read loop ended).
	start = time.Now()
	done = floodPastBurst(t, apitest.DialWS(t, url, apitest.WSOptions{}), pings, start)
	env.Live.Close()
	f = <-done
	if code := coderws.CloseStatus(f.err); code != httpapi.CloseServiceRestart || f.pongs == pings {
		t.Fatalf("a flood held back at shutdown: %d of %d pongs, then %v (close %d), want a close 1012 first", f.pongs, pings, f.err, code)
	}
	waitForMetric(t, env, "taskflow_streams_open", "0") // every connection's read loop ended
}
