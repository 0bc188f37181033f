package scaleout_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"taskflow/store/storetest"
)

// startRedisCluster starts a Redis Cluster of three masters (no replicas) on free
// loopback ports with the local redis-server, waits until it reports
// cluster_state:ok, and returns the node addresses. The nodes are killed when
// the test ends.
func startRedisCluster(t *testing.T) []string {
	t.Helper()
	var addrs []string
	for _, n := range startRedisClusterNodes(t) {
		addrs = append(addrs, n.addr)
	}
	return addrs
}

// clusterNode is one redis-server process of a test cluster; it keeps its port
// and its cluster config file across restarts, so a restarted node rejoins.
type clusterNode struct {
	t    *testing.T
	addr string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// start starts the node's process and waits until it answers PING.
func (n *clusterNode) start() {
	n.t.Helper()
	cmd := exec.Command("redis-server", n.args...)
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("redis-server: %v", err)
	}
	n.mu.Lock()
	n.cmd = cmd
	n.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: n.addr})
	defer c.Close()
	for range 400 { // readiness poll
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.t.Fatalf("cluster node %s does not answer", n.addr)
}

// kill SIGKILLs the node's process and waits until it is gone.
func (n *clusterNode) kill() {
	n.mu.Lock()
	cmd := n.cmd
	n.cmd = nil
	n.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// waitClusterOK polls every node until it reports cluster_state:ok.
func waitClusterOK(t *testing.T, addrs []string) {
	t.Helper()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		ok := false
		for range 800 {
			if info, err := c.ClusterInfo(context.Background()).Result(); err == nil && strings.Contains(info, "cluster_state:ok") {
				ok = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.Close()
		if !ok {
			t.Fatalf("cluster node %s never reports cluster_state:ok", a)
		}
	}
}

// startRedisClusterNodes is startRedisCluster returning the nodes themselves.
func startRedisClusterNodes(t *testing.T) []*clusterNode {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed for this test: %v", bin, err)
		}
	}
	dir := t.TempDir()
	var nodes []*clusterNode
	var addrs []string
	for i := range 3 {
		addr := freeAddr(t)
		_, port, _ := strings.Cut(addr, ":")
		n := &clusterNode{t: t, addr: addr, args: []string{"--port", port, "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(i)+".conf"),
			"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no", "--dir", dir}}
		t.Cleanup(n.kill)
		n.start()
		nodes = append(nodes, n)
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitClusterOK(t, addrs)
	return nodes
}

// REDIS_URL naming the nodes of a Redis Cluster gives every instance the same
// budgets, kept in the cluster, with keys spread over its nodes.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := startRedisCluster(t)
	dbURL := storetest.URL(t)
	ins := startInstances(t, 2, append([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=redis://" + strings.Join(nodes, ",")}, budgetEnv...)...)
	for _, in := range ins {
		if code, body := in.healthz(t); code != 200 || body["status"] != "ok" {
			t.Fatalf("/healthz on the cluster: %d %v", code, body)
		}
	}
	checkBudgetsShared(t, ins, openPool(t, dbURL), false)

	// The budgets live in the cluster: its nodes hold the keys between them.
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
	defer cluster.Close()
	var keys atomic.Int64
	err := cluster.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		keys.Add(n)
		return err
	})
	if err != nil || keys.Load() < 4 {
		t.Fatalf("%d keys in the cluster (%v): the budgets are not kept there", keys.Load(), err)
	}
}
