package main

import (
	"errors"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisTarget is a parsed REDIS_URL: one Redis server or a Redis Cluster.
type redisTarget struct {
	single  *redis.Options
	cluster *redis.ClusterOptions
}

// parseRedisURL parses REDIS_URL. One server is redis://[user:password@]host:port/db
// (rediss:// for TLS). A Redis Cluster is given by several seed nodes, as
// redis://host1:port1,host2:port2,host3:port3 or redis+cluster://host1:port1,...
// (rediss+cluster:// for TLS; the form with a single node names a cluster of which
// it is a seed), or in go-redis's form redis://host1:port1?addr=host2:port2&addr=...
// A cluster has only database 0. Query parameters are go-redis's options
// (dial_timeout=3s, pool_size=20, ...).
func parseRedisURL(s string) (redisTarget, error) {
	u, err := url.Parse(s)
	if err != nil {
		return redisTarget{}, errors.New("not a URL")
	}
	scheme, cluster := strings.CutSuffix(u.Scheme, "+cluster")
	if scheme != "redis" && scheme != "rediss" {
		return redisTarget{}, errors.New("the scheme must be redis, rediss, redis+cluster or rediss+cluster")
	}
	hosts := strings.Split(u.Host, ",")
	q := u.Query()
	if len(hosts) > 1 || q.Has("addr") {
		cluster = true
	}
	if !cluster {
		opt, err := redis.ParseURL(s)
		if err != nil {
			return redisTarget{}, err
		}
		return redisTarget{single: opt}, nil
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return redisTarget{}, errors.New("a Redis Cluster has only database 0")
	}
	for _, h := range hosts {
		if h == "" {
			return redisTarget{}, errors.New("an empty cluster node address")
		}
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.Scheme, u.Host, u.Path, u.RawQuery = scheme, hosts[0], "", q.Encode()
	opt, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return redisTarget{}, err
	}
	return redisTarget{cluster: opt}, nil
}

// client returns a client of the target: a *redis.Client or a *redis.ClusterClient.
func (r redisTarget) client() redis.UniversalClient {
	if r.cluster != nil {
		return redis.NewClusterClient(r.cluster)
	}
	return redis.NewClient(r.single)
}

// addrs lists the addresses of the target (the seed nodes of a cluster).
func (r redisTarget) addrs() []string {
	if r.cluster != nil {
		return r.cluster.Addrs
	}
	return []string{r.single.Addr}
}
