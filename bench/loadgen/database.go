package loadgen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/store"
)

// CreateDatabase creates taskflow_bench_<time> next to the database of admin,
// migrates it, and returns its URL and a function that drops it (or, with
// keep, only says on progress that it is kept).
func CreateDatabase(ctx context.Context, admin string, keep bool, progress io.Writer) (string, func(), error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", admin, err)
	}
	name := fmt.Sprintf("taskflow_bench_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	q := u.Query()
	q.Set("sslmode", q.Get("sslmode")) // so that parameters can be appended with &
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "prefer")
	}
	u.RawQuery = q.Encode()
	drop := func() {
		if keep {
			fmt.Fprintf(progress, "kept database %s\n", name)
		} else if _, err := conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(progress, "drop %s: %v\n", name, err)
		}
		conn.Close(context.Background())
	}
	db, err := store.Open(ctx, u.String(), slog.New(slog.DiscardHandler))
	if err != nil {
		drop()
		return "", nil, err
	}
	db.Close()
	return u.String(), drop, nil
}

// EnvOr returns the environment variable name, or def when it is empty.
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
