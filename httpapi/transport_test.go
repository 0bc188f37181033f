package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/ratelimit"
)

func TestTransportStatuses(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	gqlResp := []string{"Accept", "application/graphql-response+json"}
	cases := []struct {
		name    string
		body    string
		headers []string
		status  int
		code    string
		media   string
	}{
		{"malformed JSON", `{"query": `, nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"not an object", `"{ rateLimit { cost } }"`, nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"trailing garbage", `{"query":"{ rateLimit { cost } }"} {}`, nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"missing query", `{"variables":{}}`, nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"variables not an object", `{"query":"{ rateLimit { cost } }","variables":"x"}`, nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"invalid UTF-8", "{\"query\":\"{ rateLimit { cost } } #\xff\"}", nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"batch", `[{"query":"{ rateLimit { cost } }"}]`, nil, 400, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"document parse error", `{"query":"{ rateLimit { "}`, nil, 200, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"document parse error, graphql-response", `{"query":"{ rateLimit { "}`, gqlResp, 400, "GRAPHQL_PARSE_FAILED", "application/graphql-response+json"},
		{"validation error", `{"query":"{ nope }"}`, nil, 200, "GRAPHQL_VALIDATION_FAILED", "application/json"},
		{"validation error, graphql-response", `{"query":"{ nope }"}`, gqlResp, 400, "GRAPHQL_VALIDATION_FAILED", "application/graphql-response+json"},
		{"bad variable", `{"query":"query($n: Int) { searchTasks(workspaceId: \"1\", query: \"x\", first: $n) { nodes { id } } }","variables":{"n":"ten"}}`,
			nil, 200, "GRAPHQL_VALIDATION_FAILED", "application/json"},
		{"bad variable, graphql-response", `{"query":"query($n: Int) { searchTasks(workspaceId: \"1\", query: \"x\", first: $n) { nodes { id } } }","variables":{"n":"ten"}}`,
			gqlResp, 400, "GRAPHQL_VALIDATION_FAILED", "application/graphql-response+json"},
		{"unknown operation name", `{"query":"query A { rateLimit { cost } }","operationName":"B"}`, nil, 200, "GRAPHQL_VALIDATION_FAILED", "application/json"},
		{"malformed JSON, graphql-response", `{"query": `, gqlResp, 400, "GRAPHQL_PARSE_FAILED", "application/graphql-response+json"},
		{"argument coercion stays BAD_USER_INPUT", `{"query":"{ auditEvents(workspaceId: \"1\", filter: {since: \"yesterday\"}) { nodes { id } } }"}`,
			nil, 200, "BAD_USER_INPUT", "application/json"},
		{"success, graphql-response preferred", `{"query":"{ rateLimit { cost } }"}`,
			[]string{"Accept", "application/json;q=0.5, application/graphql-response+json"}, 200, "", "application/graphql-response+json"},
		{"success, json preferred", `{"query":"{ rateLimit { cost } }"}`,
			[]string{"Accept", "application/graphql-response+json;q=0.1, application/json"}, 200, "", "application/json"},
		{"form posts are refused", `query=x`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "GRAPHQL_PARSE_FAILED", "application/json"},
		{"too large", `{"query":"{ rateLimit { cost } }","pad":"` + strings.Repeat("x", httpapi.DefaultMaxBodyBytes) + `"}`,
			nil, 413, "GRAPHQL_PARSE_FAILED", "application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := post(t, env, c.body, c.headers...)
			if r.Status != c.status || r.Code() != c.code || r.Header.Get("Content-Type") != c.media {
				t.Fatalf("got %d %q %q: %.300s", r.Status, r.Code(), r.Header.Get("Content-Type"), r.Raw)
			}
			if c.code != "" && c.code != "BAD_USER_INPUT" && strings.Contains(string(r.Raw), `"data"`) {
				t.Fatalf("a request error has a data key: %s", r.Raw)
			}
			if r.Header.Get("RateLimit") == "" || r.Header.Get("RateLimit-Policy") == "" {
				t.Fatalf("no RateLimit headers: %v", r.Header)
			}
		})
	}
	t.Run("other methods", func(t *testing.T) {
		t.Parallel()
		req, _ := http.NewRequest(http.MethodPut, env.Server.URL+"/query", strings.NewReader(`{"query":"{ rateLimit { cost } }"}`))
		req.Header.Set("Content-Type", "application/json")
		r := env.Do(t, req)
		if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, POST" {
			t.Fatalf("PUT: %d %v", r.Status, r.Header)
		}
	})
	t.Run("GET query", func(t *testing.T) {
		t.Parallel()
		r := get(t, env, `query($n: Int) { searchTasks(workspaceId: "1", query: "x", first: $n) { nodes { id } } }`, map[string]any{"n": 3})
		if r.Status != http.StatusOK || r.Body.Extensions["cost"].(map[string]any)["requestedQueryCost"] != 4.0 {
			t.Fatalf("GET: %d %s", r.Status, r.Raw)
		}
		if r := get(t, env, "", nil); r.Status != http.StatusBadRequest || r.Code() != "GRAPHQL_PARSE_FAILED" {
			t.Fatalf("GET without query: %d %s", r.Status, r.Raw)
		}
	})
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	lim, err := ratelimit.New(ratelimit.Options{Config: ratelimit.Config{Points: 2, MaxCost: 1}, Registerer: reg, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	env := apitest.New(t, func(o *httpapi.Options) { o.Limiter = lim })
	env.Post(t, "", cheap, nil)
	env.Post(t, "", cheap, nil)
	env.Post(t, "", cheap, nil)                          // limited
	env.Post(t, "", `{ me { workspaces { id } } }`, nil) // too costly
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"taskflow_ratelimit_operations_total,limit=cost,outcome=allowed":    2,
		"taskflow_ratelimit_operations_total,limit=cost,outcome=limited":    1,
		"taskflow_ratelimit_operations_total,limit=cost,outcome=too_costly": 1,
		"taskflow_query_cost": 4,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
