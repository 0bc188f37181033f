package ratelimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ping asks Redis whether it answers, for Check and the outage probe. On a
// Redis Cluster every master must answer: a PING goes to one node only, and a
// live node answering says nothing of the slots of a dead master (without
// replicas they stay down), which made the limiter go back to a cluster whose
// budget checks still failed, and fail again, every probe interval.
func ping(ctx context.Context, rdb redis.UniversalClient) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.Ping(ctx).Err()
		})
	}
	return rdb.Ping(ctx).Err()
}
