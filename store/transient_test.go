package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/store"
	"taskflow/store/storetest"
)

// Transient tells the failures of the moment (conflicts with other
// transactions, timeouts, a lost or refused connection, an ended context)
// from those of the statement (a refused value, a constraint, a scan), on
// the errors pgx and Postgres really return.
func TestTransient(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := t.Context()
	exec := func(sql string) error {
		_, err := pool.Exec(ctx, sql)
		return err
	}
	raise := func(code string) error {
		return exec(`DO $$BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '` + code + `'; END$$`)
	}
	timedOut := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '10ms'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_sleep(1)`)
		return err
	})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, cancelledErr := pool.Exec(cancelled, `SELECT 1`)
	shortCtx, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancelShort()
	_, deadlineErr := pool.Exec(shortCtx, `SELECT pg_sleep(1)`)
	_, refusedErr := pgx.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	conn, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, closedErr := conn.Exec(ctx, `SELECT 1`)
	var n int
	scanErr := pool.QueryRow(ctx, `SELECT 'x'`).Scan(&n)

	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"deadlock":              {raise("40P01"), true},
		"serialization failure": {raise("40001"), true},
		"lock not available":    {raise("55P03"), true},
		"too many connections":  {raise("53300"), true},
		"admin shutdown":        {raise("57P01"), true},
		"connection failure":    {raise("08006"), true},
		"statement timeout":     {timedOut, true},
		"context cancelled":     {cancelledErr, true},
		"context deadline":      {deadlineErr, true},
		"connection refused":    {refusedErr, true},
		"closed connection":     {closedErr, true},
		"wrapped":               {fmt.Errorf("claim webhook attempt: %w", raise("40P01")), true},
		"division by zero":      {exec(`SELECT 1/0`), false},
		"unique violation":      {raise("23505"), false},
		"raised by a trigger":   {raise("P0001"), false},
		"undefined column":      {exec(`SELECT nope FROM users`), false},
		"scan":                  {scanErr, false},
		"another error":         {errors.New("something else"), false},
		"none":                  {nil, false},
	} {
		if (c.err == nil) != (name == "none") {
			t.Errorf("%s: no error", name)
			continue
		}
		if got := store.Transient(c.err); got != c.want {
			t.Errorf("%s (%v): Transient %v, want %v", name, c.err, got, c.want)
		}
	}
}
