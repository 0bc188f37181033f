// Command load is TaskFlow's load harness: it creates a database of its own on
// the local Postgres, migrates it, fills it with fixtures, and measures side by
// side, scenario by scenario, TaskFlow's GraphQL API over real HTTP, the least
// raw SQL the same work needs (pgx), and PostGraphile 5 over the same tables
// (bench/peer), each at fixed concurrency after a warm-up, with CPU time per
// request of the server and of its Postgres backends; it prints a markdown
// table and drops the database. See bench/README.md.
//
//	go run ./bench/load -exec -out bench/results.md
//
// The exit status is 3 when a target is missed, 4 when a request failed (the
// run is invalid).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"taskflow/bench/loadgen"
)

func main() {
	var cfg loadgen.Config
	admin := loadgen.EnvOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	flag.StringVar(&admin, "pg", admin, "Postgres URL of a database from which the bench database is created (TEST_DATABASE_URL)")
	flag.StringVar(&cfg.RedisURL, "redis", loadgen.EnvOr("REDIS_URL", "redis://127.0.0.1:6379/0"), `Redis of the rate limiter ("" : in process)`)
	flag.IntVar(&cfg.Concurrency, "c", 16, "requests in flight")
	flag.DurationVar(&cfg.Duration, "d", 8*time.Second, "length of each measured run")
	flag.DurationVar(&cfg.Warmup, "warmup", 3*time.Second, "length of each contender's warm-up before its measured run")
	flag.IntVar(&cfg.Rounds, "rounds", 4, "split each contender's measured run into this many rounds, the contenders taking turns (1: one run each, back to back)")
	flag.IntVar(&cfg.Users, "users", 200, "fixture users the requests are spread over (one after another): with many, each user sends about one request a second, as a real client does")
	flag.IntVar(&cfg.Requests, "n", 0, "at most this many requests per run and per warm-up (0: only -d and -warmup bound them)")
	scenarios := flag.String("scenarios", "", "comma-separated scenarios (default all: "+strings.Join(scenarioNames(), ",")+")")
	flag.BoolVar(&cfg.Exec, "exec", false, "run the server as a subprocess of the built binary (its own RSS and CPU time)")
	flag.BoolVar(&cfg.Peer, "peer", true, "also measure PostGraphile 5 (bench/peer; npm fetches Node 22 and PostGraphile on first use)")
	flag.BoolVar(&cfg.Replay, "replay", false, "also measure TaskFlow's own SQL statements of each request, replayed with pgx")
	flag.BoolVar(&cfg.Compare, "compare", false, "also measure createTask and task with the rate limiter and idempotency off vs on")
	flag.BoolVar(&cfg.Seal, "seal", false, "run the audit sealer next to the in-process server and report sealing against the write scenarios")
	flag.BoolVar(&cfg.GuardsOff, "guards-off", false, "in process: run the scenarios with the rate limiter and idempotency off")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "profile the in-process server runs into <prefix>.<scenario>.pprof")
	flag.StringVar(&cfg.Client, "client", loadgen.ClientFast, "HTTP client of the load generator: "+loadgen.ClientFast+" or "+loadgen.ClientNet)
	out := flag.String("out", "", "also write the table to this file")
	stmts := flag.Bool("statements", false, "print the SQL statements of each scenario's request")
	keep := flag.Bool("keep", false, "keep the bench database")
	poolMax := flag.Int("pool", 0, "pool_max_conns of the server's, raw SQL's and PostGraphile's pools (0: the server's default, 16)")
	env := flag.String("server-env", "", "with -exec: space-separated VAR=value added to the server binary's environment (e.g. GOMAXPROCS=1)")
	flag.Parse()
	if *env != "" {
		if !cfg.Exec {
			fmt.Fprintln(os.Stderr, "load: -server-env needs -exec (the in-process server shares the harness's environment)")
			os.Exit(2)
		}
		cfg.ServerEnv = strings.Fields(*env)
	}
	if *scenarios != "" {
		for _, s := range strings.Split(*scenarios, ",") {
			if _, ok := loadgen.ScenarioNamed(strings.TrimSpace(s)); !ok {
				fmt.Fprintf(os.Stderr, "load: unknown scenario %q\n", s)
				os.Exit(2)
			}
			cfg.Scenarios = append(cfg.Scenarios, strings.TrimSpace(s))
		}
	}
	cfg.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dbURL, drop, err := loadgen.CreateDatabase(ctx, admin, *keep, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		os.Exit(1)
	}
	if *poolMax > 0 {
		dbURL += fmt.Sprintf("&pool_max_conns=%d", *poolMax)
	}
	cfg.DatabaseURL = dbURL
	rep, err := loadgen.Run(ctx, cfg)
	drop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		os.Exit(1)
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	if *stmts {
		b.WriteString("\n")
		rep.Statements(&b)
	}
	os.Stdout.Write(b.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "load: %v\n", err)
			os.Exit(1)
		}
	}
	if !rep.Valid() {
		os.Exit(4)
	}
	if !rep.Passed() {
		os.Exit(3)
	}
}

func scenarioNames() []string {
	var out []string
	for _, s := range loadgen.Scenarios {
		out = append(out, s.Name)
	}
	return out
}
