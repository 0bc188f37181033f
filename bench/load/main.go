// Command load is TaskFlow's load harness: it creates a database of its own on
// the local Postgres, migrates it, fills it with fixtures, drives the GraphQL
// API at fixed concurrency over real HTTP and the same SQL statements directly
// with pgx, prints a markdown table of throughput and latency, and drops the
// database. See bench/README.md.
//
//	go run ./bench/load -c 16 -d 5s -compare -exec -out bench/results.md
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"taskflow/bench/loadgen"
)

func main() {
	var cfg loadgen.Config
	admin := loadgen.EnvOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	flag.StringVar(&admin, "pg", admin, "Postgres URL of a database from which the bench database is created (TEST_DATABASE_URL)")
	flag.StringVar(&cfg.RedisURL, "redis", loadgen.EnvOr("REDIS_URL", "redis://127.0.0.1:6379/0"), `Redis of the rate limiter ("" : in process)`)
	flag.IntVar(&cfg.Concurrency, "c", 16, "requests in flight")
	flag.DurationVar(&cfg.Duration, "d", 5*time.Second, "length of each measured run")
	flag.IntVar(&cfg.Requests, "n", 0, "at most this many requests per run (0: only -d bounds a run)")
	scenarios := flag.String("scenarios", "", "comma-separated scenarios (default all: createTask,replayStorm,task,taskPage,searchTasks,auditEvents)")
	flag.BoolVar(&cfg.Exec, "exec", false, "run the server as a subprocess of the built binary (honest server RSS)")
	flag.BoolVar(&cfg.Compare, "compare", false, "also measure createTask and task with the rate limiter and idempotency off vs on")
	flag.BoolVar(&cfg.GuardsOff, "guards-off", false, "in process: run the scenarios with the rate limiter and idempotency off")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "profile the in-process server runs into <prefix>.<scenario>.pprof")
	out := flag.String("out", "", "also write the table to this file")
	stmts := flag.Bool("statements", false, "print the SQL statements of each scenario's request")
	keep := flag.Bool("keep", false, "keep the bench database")
	poolMax := flag.Int("pool", 0, "pool_max_conns of the server's (and the baseline's) pool (0: the server's default)")
	flag.Parse()
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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
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
	if !rep.Passed() {
		os.Exit(3)
	}
}
