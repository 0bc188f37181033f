package store

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLockID is the pg_advisory_lock key that serialises migrations between
// instances starting at the same time.
const migrationLockID = 7_261_015_001

// migrationFiles returns the embedded migration names in the order they apply.
func migrationFiles() ([]string, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// MigrationsHash returns a SHA-256 over every embedded migration's name and text; it
// identifies the schema the migrations produce (tests use it to cache a template).
func MigrationsHash() (string, error) {
	names, err := migrationFiles()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, n := range names {
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Migrate applies every embedded migration that has not been applied yet, each in
// its own transaction, while holding a session-level advisory lock so that several
// instances starting together apply each migration exactly once. It then creates
// the audit log's partitions for this month and the next (EnsureAuditPartitions).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockID); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockID) //nolint:errcheck
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	names, err := migrationFiles()
	if err != nil {
		return err
	}
	for _, name := range names {
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1) ON CONFLICT DO NOTHING`, name)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			_, err = tx.Exec(ctx, string(body))
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	// The audit log's monthly partitions exist before any row needs them.
	return ensureAuditPartitions(ctx, conn, time.Now(), nil)
}
