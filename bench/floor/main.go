// Command floor measures what the layers below TaskFlow cost a task(id)
// request, with the load generator and the machine of bench/load:
//
//   - http: net/http alone. The server reads the request's body and writes a
//     fixed answer of task(id)'s shape.
//   - gqlgen: gqlgen's handler (POST transport, the query cache of
//     handler.NewDefaultServer) over
//     TaskFlow's schema, parsing, validating and executing the operation with
//     resolvers that answer from memory: no middleware, no authentication, no
//     limiter, no database.
//
// TaskFlow's own server, with all of that, is bench/load's `task` scenario.
// The server runs as a child process, so that the CPU time read from
// /proc/<pid>/stat is its own; the client is fasthttp's with 16 requests in
// flight, as in bench/load. See bench/README.md ("Run 39").
//
//	go run ./bench/floor                  # both layers, 8 s each after a 2 s warm-up
//	go run ./bench/floor -layer gqlgen -d 20s
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/valyala/fasthttp"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/graph"
	"taskflow/resolvers"
	"taskflow/store"
)

// query is bench/load's task(id) operation.
const query = `query($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`

// taskID and assigneeID are the ids of the task the servers answer with.
const (
	taskID     = "0192f8a1-1111-7aaa-8bbb-123456789abc"
	assigneeID = "0192f8a1-2222-7aaa-8bbb-123456789abc"
)

// answer is the http layer's body: what the gqlgen layer answers.
const answer = `{"data":{"task":{"id":"` + taskID + `","title":"Task 12","status":"TODO","priority":"MEDIUM","dueDate":null,"assignee":{"id":"` + assigneeID + `","name":"User 7"}}}}`

func main() {
	serve := flag.String("serve", "", "internal: serve this layer and print the address")
	layer := flag.String("layer", "http,gqlgen", "layers to measure: http, gqlgen")
	d := flag.Duration("d", 8*time.Second, "length of each measured run")
	warmup := flag.Duration("warmup", 2*time.Second, "length of the warm-up before each run")
	c := flag.Int("c", 16, "requests in flight")
	flag.Parse()
	if *serve != "" {
		if err := serveLayer(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	for _, l := range strings.Split(*layer, ",") {
		r, err := measure(l, *c, *warmup, *d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		fmt.Printf("%-7s %6.0f req/s, server CPU %5.1f µs a request, load generator CPU %5.1f µs a request (%d requests)\n",
			l, r.rate, r.serverCPU, r.clientCPU, r.requests)
	}
}

// handlerOf returns the server of layer.
func handlerOf(layer string) (http.Handler, error) {
	switch layer {
	case "http":
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, answer)
		}), nil
	case "gqlgen":
		real := &resolvers.Resolver{}
		root := memoryRoot{Resolver: real}
		srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: root}))
		srv.AddTransport(transport.POST{})
		// As handler.NewDefaultServer: parsed and validated documents cached.
		srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
		return srv, nil
	}
	return nil, fmt.Errorf("unknown layer %q (http or gqlgen)", layer)
}

// memoryRoot is TaskFlow's resolvers with task(id) and Task.assignee
// answered from memory; every other field is TaskFlow's (and unused here).
type memoryRoot struct{ *resolvers.Resolver }

func (r memoryRoot) Query() graph.QueryResolver { return memoryQuery{r.Resolver.Query()} }
func (r memoryRoot) Task() graph.TaskResolver   { return memoryTask{r.Resolver.Task()} }

// memoryQuery answers task(id) with a task of that id.
type memoryQuery struct{ graph.QueryResolver }

func (memoryQuery) Task(_ context.Context, id string) (*store.Task, error) {
	a := assigneeID
	return &store.Task{ID: id, Title: "Task 12", Status: "TODO", Priority: "MEDIUM", AssigneeID: &a}, nil
}

// memoryTask answers Task.assignee with a user of that id.
type memoryTask struct{ graph.TaskResolver }

func (memoryTask) Assignee(_ context.Context, t *store.Task) (*store.User, error) {
	if t.AssigneeID == nil {
		return nil, nil
	}
	return &store.User{ID: *t.AssigneeID, Name: "User 7"}, nil
}

// serveLayer serves layer on a loopback port, printing the address first.
func serveLayer(layer string) error {
	h, err := handlerOf(layer)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	return (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// result is one layer's measured run.
type result struct {
	requests             int64
	rate                 float64
	serverCPU, clientCPU float64 // µs a request
}

// measure starts layer's server as a child process and loads it.
func measure(layer string, c int, warmup, d time.Duration) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(self, "-serve", layer)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return result{}, fmt.Errorf("the %s server did not start: %w", layer, err)
	}
	url := "http://" + strings.TrimSpace(addr) + "/query"
	body := []byte(`{"query":` + strconv.Quote(query) + `,"variables":{"id":"` + taskID + `"}}`)
	client := &fasthttp.Client{Name: "taskflow-floor", MaxConnsPerHost: 4 * c}
	if _, err := load(client, url, body, c, warmup); err != nil {
		return result{}, err
	}
	server0, err := processCPU(cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	self0 := ownCPU()
	start := time.Now()
	n, err := load(client, url, body, c, d)
	if err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	server1, err := processCPU(cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	self1 := ownCPU()
	per := func(t time.Duration) float64 { return float64(t.Nanoseconds()) / 1e3 / float64(n) }
	return result{requests: n, rate: float64(n) / elapsed.Seconds(), serverCPU: per(server1 - server0), clientCPU: per(self1 - self0)}, nil
}

// load sends c requests at a time for d, checks every answer, and returns
// how many were answered.
func load(client *fasthttp.Client, url string, body []byte, c int, d time.Duration) (int64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	stop := time.Now().Add(d)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			req.SetRequestURI(url)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			req.SetBody(body)
			for time.Now().Before(stop) {
				if err := client.Do(req, res); err != nil {
					errs <- err
					return
				}
				if res.StatusCode() != http.StatusOK || !bytes.Equal(res.Body(), []byte(answer)) {
					errs <- fmt.Errorf("answer %d %q, want 200 %q", res.StatusCode(), res.Body(), answer)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return n.Load(), errors.Join(<-errs)
}

// processCPU is the user and system time pid has used (/proc/<pid>/stat, in
// clock ticks of 10 ms).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// ownCPU is the user and system time this process has used.
func ownCPU() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
