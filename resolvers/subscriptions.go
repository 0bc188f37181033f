package resolvers

import (
	"context"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/live"
)

// liveSpec is the subscription of kind from after for the caller of ctx,
// authenticated by its token (header or connection_init payload).
func (r *Resolver) liveSpec(ctx context.Context, kind live.Kind, after *string) (live.Spec, error) {
	u, err := auth.RequireUser(ctx)
	if err != nil {
		return live.Spec{}, err
	}
	if r.Live == nil {
		return live.Spec{}, errs.Errorf(errs.CodeStreamInterrupted, "this server serves no subscriptions")
	}
	spec := live.Spec{Kind: kind, User: u, TokenHash: auth.HashToken(auth.TokenFrom(ctx))}
	if after != nil {
		spec.After = *after
	}
	return spec, nil
}

// gone maps NOT_FOUND to null: an item's thing as it is now, deleted since
// the event or no longer visible.
func gone[T any](v *T, err error) (*T, error) {
	if errs.CodeOf(err) == errs.CodeNotFound {
		return nil, nil
	}
	return v, err
}
