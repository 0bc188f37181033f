package store_test

import (
	"testing"

	"taskflow/store"
)

func TestPoolConfigSize(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]int32{
		"postgres://u@127.0.0.1:5432/db":                  store.DefaultPoolMaxConns,
		"postgres://u@127.0.0.1:5432/db?pool_max_conns=7": 7,
		"host=127.0.0.1 dbname=db pool_max_conns=3":       3,
		"host=127.0.0.1 dbname=db":                        store.DefaultPoolMaxConns,
	} {
		cfg, err := store.PoolConfig(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if cfg.MaxConns != want {
			t.Errorf("%s: MaxConns %d, want %d", url, cfg.MaxConns, want)
		}
	}
}
