// Package ratelimittest helps tests of rate limiting: the shared test Redis
// with a key prefix per test, and a private redis-server a test can stop and
// start again to cut the limiter off Redis.
package ratelimittest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// SharedAddr is the test Redis of the contract's test set-up.
const SharedAddr = "127.0.0.1:6379"

// Redis returns a client of the shared test Redis (closed with the test).
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: SharedAddr})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("test Redis at %s: %v", SharedAddr, err)
	}
	return c
}

// Prefix returns a key prefix no other test uses.
func Prefix() string { return "test:" + uuid.NewString() + ":" }

// Server is a redis-server of one test.
type Server struct {
	t    testing.TB
	Port int
	cmd  *exec.Cmd
	live atomic.Bool
}

// StartRedis starts a private redis-server (no persistence) on a free port; it
// is stopped when the test ends.
func StartRedis(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed for this test: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{t: t, Port: port}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Client returns a client of the server with short timeouts (closed with the test).
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts the server (again) and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	s.live.Store(true)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if i > 200 {
			s.t.Fatalf("redis-server on %d does not answer: %v", s.Port, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	if !s.live.CompareAndSwap(true, false) {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// String describes the server.
func (s *Server) String() string { return fmt.Sprintf("redis-server :%d", s.Port) }
