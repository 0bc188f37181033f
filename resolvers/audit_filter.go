package resolvers

import (
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
