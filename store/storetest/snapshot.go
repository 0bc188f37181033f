package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tables is what a database holds, table by table: the number of rows and a
// checksum of their text. Two snapshots are equal when no row was inserted,
// updated or deleted in between, whatever the tables are (a table added by a
// later migration is covered without changing a test).
type Tables map[string]Table

// Table is one table's rows: how many, and the md5 of their text in order.
type Table struct {
	Rows int64
	Sum  string
}

// derived are the tables that background workers of a running server keep
// from what was committed before: the sealer's seals, heads, checkpoints and
// cursor, the webhook dispatcher's deliveries and cursor, River's own tables,
// the blob sweeper's claims and the server's secret. They change while a
// server runs whatever its requests do; what they derive from (audit_events
// and the tables of the data) is compared, so a request that changed anything
// is still caught.
func derived(table string) bool {
	switch table {
	case "audit_seals", "audit_chain_heads", "audit_checkpoints", "audit_seal_cursor",
		"webhook_deliveries", "webhook_dispatch_cursor", "blob_sweeps", "server_secrets":
		return true
	}
	return strings.HasPrefix(table, "river_")
}

// Snapshot reads every table of the database of pool (a partitioned table
// through its parent) in one statement, with one snapshot of the data; the
// tables background workers keep (derived) are left out.
func Snapshot(t testing.TB, pool *pgxpool.Pool) Tables {
	t.Helper()
	ctx := t.Context()
	rows, err := pool.Query(ctx, `SELECT c.oid::regclass::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
			AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		ORDER BY 1`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	names = slices.DeleteFunc(names, derived)
	out := Tables{}
	if len(names) == 0 {
		return out
	}
	parts := make([]string, len(names))
	for i, name := range names {
		// The names come from the catalog already quoted where needed (regclass).
		parts[i] = fmt.Sprintf(`SELECT %s, count(*), coalesce(md5(string_agg(r::text, E'\n' ORDER BY r::text)), '') FROM %s r`,
			quoteLiteral(name), name)
	}
	rows, err = pool.Query(ctx, strings.Join(parts, " UNION ALL "))
	if err != nil {
		t.Fatalf("snapshot tables: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var tbl Table
		if err := rows.Scan(&name, &tbl.Rows, &tbl.Sum); err != nil {
			t.Fatalf("snapshot tables: %v", err)
		}
		out[name] = tbl
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("snapshot tables: %v", err)
	}
	return out
}

// Changed lists the tables whose rows differ between s and later, as
// "workspaces: 1 → 2 rows", in name order; nil when nothing changed.
func (s Tables) Changed(later Tables) []string {
	names := slices.Concat(slices.Collect(maps.Keys(s)), slices.Collect(maps.Keys(later)))
	slices.Sort(names)
	var out []string
	for _, name := range slices.Compact(names) {
		a, b := s[name], later[name]
		if a != b {
			out = append(out, fmt.Sprintf("%s: %d → %d rows", name, a.Rows, b.Rows))
		}
	}
	return out
}

// AssertUnchanged fails the test, naming what was done, if a table of the
// database of pool differs from before.
func AssertUnchanged(t testing.TB, pool *pgxpool.Pool, before Tables, what string) {
	t.Helper()
	if changed := before.Changed(Snapshot(t, pool)); changed != nil {
		t.Errorf("%s changed the database: %s", what, strings.Join(changed, "; "))
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
