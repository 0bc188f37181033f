package store

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
)

// AuditCheckpoint is a signed checkpoint of a chain's head as the API returns
// it: the fields of audit.Checkpoint (what a customer keeps and later
// presents), the public key that verifies it and the text it signs.
type AuditCheckpoint struct {
	audit.Checkpoint
	// PublicKey is the standard base64 of the Ed25519 public key named by
	// KeyID.
	PublicKey string `json:"publicKey"`
	// Message is the text the signature covers (audit.CheckpointMessage).
	Message string `json:"message"`
}

// AuditSigningKey is an Ed25519 public key that verifies checkpoints.
type AuditSigningKey struct {
	KeyID     string `json:"keyId"`
	PublicKey string `json:"publicKey"`
	Algorithm string `json:"algorithm"`
	// Current reports that the key signs new checkpoints.
	Current bool `json:"current"`
}

// AuditSigningKeys returns the keys of pubs as the API lists them, the first
// one current (the one that signs); the list is public.
func AuditSigningKeys(pubs []ed25519.PublicKey) []*AuditSigningKey {
	out := make([]*AuditSigningKey, len(pubs))
	for i, p := range pubs {
		out[i] = &AuditSigningKey{KeyID: audit.KeyID(p), PublicKey: audit.EncodePublicKey(p), Algorithm: "Ed25519", Current: i == 0}
	}
	return out
}

// auditCheckpointColumns are the columns scanAuditCheckpoint reads.
const auditCheckpointColumns = `chain_key, position, head_hash, signed_at, key_id, public_key, signature`

// scanAuditCheckpoint reads a checkpoint row of auditCheckpointColumns.
func scanAuditCheckpoint(row pgx.Row) (*AuditCheckpoint, error) {
	var chain, keyID string
	var position int64
	var signedAt time.Time
	var hash, pub, sig []byte
	if err := row.Scan(&chain, &position, &hash, &signedAt, &keyID, &pub, &sig); err != nil {
		return nil, err
	}
	cp := AuditCheckpoint{Checkpoint: checkpointOfRow(chain, position, hash, signedAt, keyID, sig)}
	cp.PublicKey = base64.StdEncoding.EncodeToString(pub)
	cp.Message = string(audit.CheckpointMessage(cp.ChainKey, cp.Position, hash, cp.SignedAt))
	return &cp, nil
}

// checkpointOfRow returns the checkpoint that a row of audit_checkpoints
// holds, from its columns as stored (head_hash and signature as bytes).
func checkpointOfRow(chain string, position int64, hash []byte, signedAt time.Time, keyID string, sig []byte) audit.Checkpoint {
	return audit.Checkpoint{Version: audit.CheckpointVersion, ChainKey: chain, Position: position,
		HeadHash: hex.EncodeToString(hash), SignedAt: signedAt.UTC(), KeyID: keyID,
		Signature: base64.StdEncoding.EncodeToString(sig)}
}

// AuditCheckpoint returns the newest checkpoint of the workspace's chain
// whose signature verifies with one of keys, the keys the server trusts
// (LatestAuditCheckpoint), or nil when there is none. It returns
// UNAUTHENTICATED for no user, NOT_FOUND if the workspace does not exist or
// user is not a member, and FORBIDDEN for a MEMBER or VIEWER.
func (db *DB) AuditCheckpoint(ctx context.Context, user *User, workspaceID string, keys []ed25519.PublicKey) (*AuditCheckpoint, error) {
	if err := db.requireAuditReader(ctx, workspaceID, user); err != nil {
		return nil, err
	}
	// The chain key is the id's canonical text; the access check took any
	// spelling of it.
	return db.LatestAuditCheckpoint(ctx, mustCanonical(workspaceID), keys)
}

// maxCheckpointsTried is the most rows of audit_checkpoints one
// LatestAuditCheckpoint reads, newest first, looking for one that verifies:
// a chain keeps a row for every head the sealer signed, and the rows below
// the first that verifies are never read.
const maxCheckpointsTried = 64

// LatestAuditCheckpoint returns the newest checkpoint of the chain chainKey
// signed by one of keys (the keys the server trusts, as verifyAuditLog
// does: the one it signs with first), or nil when there is none among the
// newest maxCheckpointsTried rows of those keys' ids, or keys is empty. A
// row that names a key's id but whose signature does not verify with it,
// or whose public key is another (a row inserted by someone with write
// access to the database), is skipped, and logged at ERROR and counted
// (UnverifiedCheckpoints) the first time this DB skips it, not at each read
// (reportedRows); a row of another key (one the server no longer trusts,
// after a rotation) is skipped without a word. It is one query. It returns
// the query's error, wrapped.
func (db *DB) LatestAuditCheckpoint(ctx context.Context, chainKey string, keys []ed25519.PublicKey) (*AuditCheckpoint, error) {
	// trusted is a key and its encoding, encoded once: a read compares
	// up to maxCheckpointsTried rows' public keys with it.
	type trusted struct {
		pub     ed25519.PublicKey
		encoded string
	}
	byID := make(map[string]trusted, len(keys))
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		if len(k) == ed25519.PublicKeySize {
			id := audit.KeyID(k)
			byID[id] = trusted{pub: k, encoded: audit.EncodePublicKey(k)}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+auditCheckpointColumns+` FROM audit_checkpoints
		WHERE chain_key = $1 AND key_id = ANY($2::text[]) ORDER BY position DESC, signed_at DESC LIMIT `+
		strconv.Itoa(maxCheckpointsTried), chainKey, ids)
	if err != nil {
		return nil, fmt.Errorf("audit checkpoint: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		cp, err := scanAuditCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("audit checkpoint: %w", err)
		}
		key := byID[cp.KeyID]
		verr := cp.Verify(key.pub)
		if verr == nil && cp.PublicKey == key.encoded {
			return cp, nil
		}
		if verr == nil {
			verr = errors.New("the row's public key is not the key its key id names")
		}
		if !db.unverifiedRows.first(cp) {
			continue // reported before
		}
		db.unverifiedCheckpoints.Add(1)
		db.log.ErrorContext(ctx, "audit checkpoint: a row of audit_checkpoints with the id of a key the server trusts does not verify with that key (inserted by someone with write access to the database): not answered; verify the chain",
			"chain", chainKey, "position", cp.Position, "key_id", cp.KeyID, "reason", verr.Error())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit checkpoint: %w", err)
	}
	return nil, nil
}

// UnverifiedCheckpoints returns how many distinct rows of audit_checkpoints
// that name a trusted key's id but do not verify with it
// LatestAuditCheckpoint skipped: each counts once however often it is read,
// as long as this DB remembers it (the first maxReportedRows rows; past
// them, a row not remembered counts at each read that skips it). The server
// exports it as taskflow_audit_checkpoints_unverified_total.
func (db *DB) UnverifiedCheckpoints() uint64 {
	return db.unverifiedCheckpoints.Load()
}

// maxReportedRows is the most rows of audit_checkpoints a DB remembers
// having reported as not verifying (reportedRows), about 400 bytes each.
const maxReportedRows = 1024

// reportedRows remembers the rows of audit_checkpoints LatestAuditCheckpoint
// reported as not verifying, up to maxReportedRows: past them, it remembers
// no new one, and one not remembered is reported at each read (a row
// planted is never left unreported, and the memory stays bounded).
type reportedRows struct {
	mu   sync.Mutex
	rows map[reportedRow]struct{}
}

// reportedRow is what tells a row of audit_checkpoints from another: its
// key (chain, position, key id) and what a row planted at the same key
// again may change.
type reportedRow struct {
	chain, keyID       string
	position, signedAt int64 // signedAt in Unix microseconds
	headHash, sig, pub string
}

// first reports whether cp, a row read, is reported for the first time,
// and remembers it while fewer than maxReportedRows are.
func (r *reportedRows) first(cp *AuditCheckpoint) bool {
	row := reportedRow{chain: cp.ChainKey, keyID: cp.KeyID, position: cp.Position, signedAt: cp.SignedAt.UnixMicro(),
		headHash: cp.HeadHash, sig: cp.Signature, pub: cp.PublicKey}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.rows[row]; ok {
		return false
	}
	if r.rows == nil {
		r.rows = map[reportedRow]struct{}{}
	}
	if len(r.rows) < maxReportedRows {
		r.rows[row] = struct{}{}
	}
	return true
}
