package resolvers

import (
	"github.com/99designs/gqlgen/graphql"

	"taskflow/audit"
	"taskflow/graph/model"
	"taskflow/store"
)

// auditFilter converts the GraphQL filter to the store's (absent and null are
// both "no condition").
func auditFilter(f *model.AuditEventFilter) store.AuditFilter {
	if f == nil {
		return store.AuditFilter{}
	}
	return store.AuditFilter{
		Actions:    f.Actions.Value(),
		ActorID:    f.ActorID.Value(),
		EntityType: f.EntityType.Value(),
		EntityID:   f.EntityID.Value(),
		Since:      f.Since.Value(),
		Until:      f.Until.Value(),
	}
}

// auditCheckpoint converts a checkpoint given to verifyAuditLog (nil: none);
// an absent version or chain key stays empty, which the store reads as v1
// and the workspace's chain.
func auditCheckpoint(in *model.AuditCheckpointInput) *audit.Checkpoint {
	if in == nil {
		return nil
	}
	str := func(o graphql.Omittable[*string]) string {
		if v := o.Value(); v != nil {
			return *v
		}
		return ""
	}
	return &audit.Checkpoint{Version: str(in.Version), ChainKey: str(in.ChainKey), Position: int64(in.Position),
		HeadHash: in.HeadHash, SignedAt: in.SignedAt, KeyID: in.KeyID, Signature: in.Signature}
}
