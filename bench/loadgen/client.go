package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Clients the harness can send its HTTP requests with (Config.Client).
const (
	// ClientFast is fasthttp's client, the default: a load generator that
	// costs the machine little, as wrk does (issue #17's first table was
	// measured with wrk). The harness shares the machine's two cores with
	// the contenders: what it spends on a request is taken from a contender
	// that can use both cores (TaskFlow, raw SQL), not from one bound to a
	// single core (PostGraphile's node).
	ClientFast = "fasthttp"
	// ClientNet is net/http's client, the harness's client until
	// 2026-12-03: 61–63 µs of CPU a task(id) against fasthttp's 41–42 (see
	// docs/decisions/2026-12-03-lean-load-generator.md).
	ClientNet = "net/http"
)

// userAgent is the User-Agent of the harness's requests, which TaskFlow's
// audit events record; raw SQL's createTask writes it as well.
const userAgent = "taskflow-bench"

// requestTimeout bounds one request of the harness.
const requestTimeout = 30 * time.Second

// poster sends a GraphQL request (with a bearer token unless token is "") over
// HTTP/1.1 keep-alive connections and checks that it succeeded: HTTP 200, no
// errors, and want in the answer.
type poster interface {
	post(ctx context.Context, url, token string, body []byte, want string) error
	// closeIdle closes the connections not in use: every contender starts on
	// fresh ones, since one left idle since the contender's last run may be
	// closed by its server as it is reused.
	closeIdle()
}

// newPoster returns the client named (ClientFast or ClientNet) with room for
// concurrency requests in flight.
func newPoster(name string, concurrency int) (poster, error) {
	switch name {
	case ClientFast, "":
		return fastPoster{&fasthttp.Client{
			Name:            userAgent,
			MaxConnsPerHost: 4 * concurrency,
			ReadTimeout:     requestTimeout,
			WriteTimeout:    requestTimeout,
		}}, nil
	case ClientNet:
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 4 * concurrency
		t.MaxIdleConnsPerHost = 4 * concurrency
		return netPoster{&http.Client{Transport: t, Timeout: requestTimeout}}, nil
	}
	return nil, fmt.Errorf("unknown client %q (%s or %s)", name, ClientFast, ClientNet)
}

// fastPoster is a poster on fasthttp: requests and responses from its pools,
// and its connections' buffers reused.
type fastPoster struct{ c *fasthttp.Client }

func (p fastPoster) post(ctx context.Context, url, token string, body []byte, want string) error {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI(url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.SetBodyRaw(body)
	// fasthttp takes no context: the deadline is the earlier of the
	// context's and the timeout (the harness cancels between requests).
	deadline := time.Now().Add(requestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := p.c.DoDeadline(req, res, deadline); err != nil {
		return err
	}
	return checkAnswer(res.StatusCode(), res.Body(), want)
}

func (p fastPoster) closeIdle() { p.c.CloseIdleConnections() }

// netPoster is a poster on net/http.
type netPoster struct{ c *http.Client }

func (p netPoster) post(ctx context.Context, url, token string, body []byte, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := p.c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	return checkAnswer(res.StatusCode, out, want)
}

func (p netPoster) closeIdle() { p.c.CloseIdleConnections() }

// checkAnswer returns nil when an answer is a success: HTTP 200, no errors,
// and want in it.
func checkAnswer(status int, out []byte, want string) error {
	if status != http.StatusOK || bytes.Contains(out, []byte(`"errors"`)) || !bytes.Contains(out, []byte(want)) {
		return fmt.Errorf("HTTP %d: %.200s", status, out)
	}
	return nil
}

// selfCPU returns the CPU time (user + system, all threads) this process has
// used, in µs resolution (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
