package store_test

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"

	"taskflow/audit"
	"taskflow/store"
)

// Found in review (2026-12-04): auditCheckpoint looked the chain up by the
// workspace id as given, while verifyAuditLog and the export take any
// spelling of the id (as Postgres compares uuids): for the id in upper case
// the access check passed and the answer was null, "no checkpoint signed
// yet", though one was.
func TestAuditCheckpointOfAnIDInUpperCase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, owner, ws, _ := sealedWorkspace(t)
	key := audit.GenerateSigningKey()
	kept, err := (&store.AuditSealer{DB: f.db, Key: key}).Checkpoint(ctx, ws)
	if err != nil || kept == nil {
		t.Fatalf("checkpoint: %+v, %v", kept, err)
	}
	cp, err := f.db.AuditCheckpoint(ctx, owner, strings.ToUpper(ws), []ed25519.PublicKey{key.Public().(ed25519.PublicKey)})
	if err != nil || cp == nil || cp.Position != kept.Position || cp.ChainKey != ws {
		t.Fatalf("auditCheckpoint(%s) = %+v, %v; want the checkpoint at %d", strings.ToUpper(ws), cp, err, kept.Position)
	}
}
