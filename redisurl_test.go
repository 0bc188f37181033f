package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseRedisURL(t *testing.T) {
	t.Parallel()
	single := map[string]string{
		"redis://127.0.0.1:6379/0":      "127.0.0.1:6379",
		"redis://:pw@cache:6380/2":      "cache:6380",
		"rediss://user:pw@cache:6380/1": "cache:6380",
	}
	for in, addr := range single {
		r, err := parseRedisURL(in)
		if err != nil || r.cluster != nil || r.single.Addr != addr {
			t.Errorf("%s: %+v %v", in, r, err)
		}
	}
	cluster := map[string][]string{
		"redis://a:7000,b:7001,c:7002":                     {"a:7000", "b:7001", "c:7002"},
		"redis+cluster://a:7000":                           {"a:7000"},
		"rediss+cluster://u:pw@a:7000,b:7001/0":            {"a:7000", "b:7001"},
		"redis://a:7000?addr=b:7001&addr=c:7002":           {"a:7000", "b:7001", "c:7002"},
		"redis+cluster://a:7000,b:7001?dial_timeout=3s&x=": nil, // unknown option
		"redis+cluster://a:7000,b:7001?dial_timeout=3s":    {"a:7000", "b:7001"},
		"redis://a:7000,,b:7001":                           nil,
		"redis://a:7000,b:7001/3":                          nil,
		"http+cluster://a:7000":                            nil,
	}
	for in, addrs := range cluster {
		r, err := parseRedisURL(in)
		if addrs == nil {
			if err == nil {
				t.Errorf("%s: accepted as %+v", in, r)
			}
			continue
		}
		if err != nil || r.cluster == nil || !slices.Equal(r.addrs(), addrs) {
			t.Errorf("%s: %+v %v, want the cluster %v", in, r, err, addrs)
		}
	}
	r, err := parseRedisURL("rediss+cluster://u:pw@a:7000,b:7001?dial_timeout=3s")
	if err != nil || r.cluster.Username != "u" || r.cluster.Password != "pw" || r.cluster.TLSConfig == nil ||
		r.cluster.DialTimeout != 3*time.Second {
		t.Errorf("options lost: %+v %v", r.cluster, err)
	}
	if c := r.client(); c == nil {
		t.Error("no client")
	} else {
		c.Close()
	}
}
