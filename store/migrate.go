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

// migrationLockID is the advisory lock key that serialises migrations between
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
	if err := hashRiverMigrations(h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Migrate applies every embedded migration that has not been applied yet, in
// order, each in its own transaction that first takes a transaction-level
// advisory lock (pg_advisory_xact_lock), so that several instances starting
// together apply each migration exactly once: the others wait for the lock,
// then find the migration recorded in schema_migrations and skip it. No lock
// outlives its transaction: nothing is left held on a connection when an
// unlock fails or the context ends, and no two statements rely on running in
// one server session (docs/decisions/2026-12-01-migrations-stay-hand-written.md).
// River's migrations follow, under the same lock (migrateRiver). It then
// creates the audit log's partitions for this month and the next
// (EnsureAuditPartitions).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := underMigrationLock(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
		return err
	})
	if err != nil {
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
		err = underMigrationLock(ctx, pool, func(tx pgx.Tx) error {
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
	if err := migrateRiver(ctx, pool); err != nil {
		return err
	}
	// The audit log's monthly partitions exist before any row needs them.
	return ensureAuditPartitions(ctx, pool, time.Now(), nil)
}

// underMigrationLock runs f in a transaction that holds the migrations'
// advisory lock from its first statement to its end.
func underMigrationLock(ctx context.Context, pool *pgxpool.Pool, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockID); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		return f(tx)
	})
}
