package resolvers

import (
	"context"
	"time"

	"github.com/vikstrous/dataloadgen"

	"taskflow/graph/model"
	"taskflow/store"
)

// auditLoaders batch the reads of the audit log: the actors of a page of events.
type auditLoaders struct {
	// auditActor loads a user by id (nil when the account is gone); an actor
	// stays readable after leaving the workspace.
	auditActor *dataloadgen.Loader[string, *store.User]
}

func newAuditLoaders(db *store.DB) auditLoaders {
	fetch := func(ctx context.Context, ids []string) ([]*store.User, []error) {
		users, err := db.AuditActors(ctx, ids)
		if err != nil {
			return nil, []error{err}
		}
		return users, nil
	}
	return auditLoaders{auditActor: dataloadgen.NewLoader(fetch, dataloadgen.WithWait(time.Millisecond))}
}

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
