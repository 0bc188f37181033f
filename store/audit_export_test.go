package store

import (
	"context"
	"time"

	"taskflow/audit"
)

// Internals of the audit log for the external tests of package store.

// AppendAudit is db.appendAudit.
func AppendAudit(ctx context.Context, db *DB, tx Querier, ev audit.Event) error {
	return db.appendAudit(ctx, tx, ev)
}

// AppendAuditAt appends ev in the unit of work of ctx (or its own), with the clock now.
func AppendAuditAt(ctx context.Context, db *DB, ev audit.Event, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	return db.WithTx(ctx, func(ctx context.Context, tx Querier) error { return appendAuditAt(ctx, tx, ev, now) })
}

// EnsureAuditPartitionsAt is EnsureAuditPartitions as if the time were now.
func EnsureAuditPartitionsAt(ctx context.Context, db *DB, now time.Time) error {
	return ensureAuditPartitions(ctx, db.Pool, now, db.log)
}

// EnsureAuditPartitionOf creates the partition of the month of t.
func EnsureAuditPartitionOf(ctx context.Context, db *DB, t time.Time) error {
	return ensureAuditPartition(ctx, db.Pool, monthStart(t), db.log)
}

// AuditPartitionNames returns the monthly partitions of audit_events.
func AuditPartitionNames(ctx context.Context, db *DB) ([]string, error) {
	names, _, err := auditPartitions(ctx, db.Pool)
	return names, err
}

// AuditPartitionName is auditPartitionName of the month of t.
func AuditPartitionName(t time.Time) string { return auditPartitionName(monthStart(t)) }

// SealWake is the channel on which db's units of work wake its sealer.
func SealWake(db *DB) <-chan struct{} { return db.sealWake }

// SealRoundWithin is s.Round reading about budget seals at most to check
// the chains it signs.
func SealRoundWithin(ctx context.Context, s *AuditSealer, budget int64) (SealRound, error) {
	return s.round(ctx, budget, s.batch())
}

// SealRoundPaged is s.Round reading page chains at most in a checkpoint
// sweep.
func SealRoundPaged(ctx context.Context, s *AuditSealer, page int) (SealRound, error) {
	return s.round(ctx, DefaultVerifyBudget, page)
}

// ForgetVerified makes s forget how far it found the seals of chain to
// recompute, as it forgets a chain's when it remembers maxRemembered others.
func ForgetVerified(s *AuditSealer, chain string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.verified, chain)
}

// ExtendSQL is extendSQL, for TestSealerDoesNotReadBackWhatItVerified.
const ExtendSQL = extendSQL

// BackdateTolerance is backdateTolerance, for the tests of verification.
const BackdateTolerance = backdateTolerance
