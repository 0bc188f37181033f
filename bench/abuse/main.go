// Command abuse is TaskFlow's adversarial harness (issue #13): it creates a
// database of its own, starts the real server binary on it, and runs each
// attack of the table (quadratic documents, memory-filling documents,
// concurrent register calls, NUL characters, slow clients) beside a normal
// signed-in client, reporting per attack the server's CPU per request (from
// /proc/<pid>/stat), its peak RSS, and the normal client's p99 latency
// against its idle value. See bench/abuse/README.md.
//
//	go run ./bench/abuse -out bench/abuse/results.md
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"taskflow/bench/loadgen"
)

func main() {
	var cfg Config
	admin := loadgen.EnvOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	flag.StringVar(&admin, "pg", admin, "Postgres URL of a database from which the run's database is created (TEST_DATABASE_URL)")
	flag.StringVar(&cfg.RedisURL, "redis", loadgen.EnvOr("REDIS_URL", "redis://127.0.0.1:6379/0"), `the server's Redis ("": none)`)
	names := make([]string, len(attacks))
	for i, a := range attacks {
		names[i] = a.name
	}
	only := flag.String("attacks", "", "comma-separated attacks to run (default all: "+strings.Join(names, ",")+")")
	flag.DurationVar(&cfg.Duration, "d", 0, "how long each flooding attack sends (default 20s)")
	flag.IntVar(&cfg.Attackers, "c", 0, "requests in flight of a flooding attack (default 4)")
	flag.Float64Var(&cfg.Scale, "scale", 1, "multiplies the sizes of the attack documents")
	flag.IntVar(&cfg.Registers, "registers", 0, "concurrent register calls (default 60)")
	flag.IntVar(&cfg.SlowConns, "slow", 0, "connections of each slow-client attack (default 200)")
	flag.IntVar(&cfg.IdleConns, "idle", 0, "idle keep-alive connections (default 2000)")
	flag.IntVar(&cfg.IdleWebSockets, "idle-ws", 0, "idle anonymous WebSockets of one client (default 300)")
	flag.DurationVar(&cfg.SlowFor, "slow-for", 0, "how long slow clients are held (default 40s)")
	flag.DurationVar(&cfg.Settle, "settle", 0, "how long the server's RSS is watched after the last attack (default 60s)")
	env := flag.String("server-env", "", "space-separated VAR=value added to the server's environment (e.g. GOMEMLIMIT=200MiB)")
	out := flag.String("out", "", "also write the report to this file")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench/abuse [flags]\n\n"+
			"Runs the attacks of issue #13 against the real server binary on a fresh database,\n"+
			"beside a signed-in client, and prints a markdown report (about 10 minutes with the defaults).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *only != "" {
		cfg.Attacks = strings.Split(*only, ",")
	}
	if *env != "" {
		cfg.ServerEnv = strings.Fields(*env)
	}
	if _, err := selected(cfg.Attacks); err != nil {
		fmt.Fprintf(os.Stderr, "abuse: %v\n", err)
		os.Exit(2)
	}
	cfg.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dbURL, drop, err := loadgen.CreateDatabase(ctx, admin, false, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "abuse: %v\n", err)
		os.Exit(1)
	}
	cfg.DatabaseURL = dbURL
	rep, err := Run(ctx, cfg)
	drop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "abuse: %v\n", err)
		os.Exit(1)
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	os.Stdout.Write(b.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "abuse: %v\n", err)
			os.Exit(1)
		}
	}
}
