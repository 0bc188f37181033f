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
// /proc/<pid>/stat is its own, and bench/load's harness loads it
// (loadgen.MeasureServer: its client, 16 requests in flight, every answer
// checked). See bench/README.md ("Run 39").
//
//	go run ./bench/floor                  # both layers, 8 s each after a 2 s warm-up
//	go run ./bench/floor -layer gqlgen -d 20s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"taskflow/bench/loadgen"
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
	cfg := loadgen.Config{Concurrency: *c, Warmup: *warmup, Duration: *d}
	µs := func(t time.Duration) float64 { return float64(t.Nanoseconds()) / 1e3 }
	for _, l := range strings.Split(*layer, ",") {
		r, err := measure(context.Background(), l, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		fmt.Printf("%-7s %6.0f req/s, server CPU %5.1f µs a request, load generator CPU %5.1f µs a request (%d requests)\n",
			l, r.RPS, µs(r.PerRequest(r.ServerCPU)), µs(r.PerRequest(r.LoadCPU)), r.Requests)
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

// measure starts layer's server as a child process and loads it as bench/load
// loads a contender (loadgen.MeasureServer), its answers checked against
// answer.
func measure(ctx context.Context, layer string, cfg loadgen.Config) (loadgen.Stats, error) {
	self, err := os.Executable()
	if err != nil {
		return loadgen.Stats{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-serve", layer)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return loadgen.Stats{}, err
	}
	if err := cmd.Start(); err != nil {
		return loadgen.Stats{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return loadgen.Stats{}, fmt.Errorf("the %s server did not start: %w", layer, err)
	}
	url := "http://" + strings.TrimSpace(addr) + "/query"
	body := []byte(`{"query":` + strconv.Quote(query) + `,"variables":{"id":"` + taskID + `"}}`)
	s, err := loadgen.MeasureServer(ctx, cfg, url, cmd.Process.Pid, body, answer)
	if err == nil && s.Errors > 0 {
		err = fmt.Errorf("%s: %d of %d requests failed: %s", layer, s.Errors, s.Requests, s.FirstError)
	}
	return s, err
}
