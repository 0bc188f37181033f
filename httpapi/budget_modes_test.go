package httpapi_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"taskflow/ratelimit"
	"taskflow/ratelimit/ratelimittest"
)

// budgetSeen is every number one response tells about the caller's budget.
type budgetSeen struct {
	Status                int
	Code                  string
	RateLimit, Policy     string // the RateLimit and RateLimit-Policy headers
	RetryAfter            string
	Cost                  any // extensions.cost.requestedQueryCost
	Throttle              any // extensions.cost.throttleStatus
	Limit, Remaining, Use any // data.rateLimit {limit remaining cost}
}

// TestBudgetIsTheSameInEveryMode runs the same operations against the
// in-process limiter, Redis with leases (the default) and Redis with a check
// per operation (RATE_LIMIT_LEASE=0), and expects the same numbers from each,
// exactly: headers, extensions.cost, the rateLimit field, statuses and
// Retry-After. (Budgets other than the first refill over 1000 hours, so the
// few milliseconds the steps take never bring a point back; the first case is
// the contract's default budget, whose first charge is exact at any speed.)
func TestBudgetIsTheSameInEveryMode(t *testing.T) {
	t.Parallel()
	const (
		cheap    = `{ rateLimit { limit remaining cost } }`                                                          // 1
		two      = `{ rateLimit { limit remaining cost } me { id } }`                                                // 2
		five     = `{ a: rateLimit { cost } b: rateLimit { cost } c: rateLimit { cost } d: me { id } e: me { id } }` // 5
		costly   = `{ me { workspaces { members { user { id } } } } }`                                               // 512
		parseErr = `{ me {`
	)
	long := 1000 * time.Hour
	cases := []struct {
		name  string
		cfg   ratelimit.Config
		steps []string
		want  []budgetSeen
	}{{
		name:  "default budget, first charge",
		cfg:   ratelimit.Config{},
		steps: []string{cheap},
		want: []budgetSeen{
			{Status: 200, RateLimit: `"cost";r=999;t=1`, Policy: `"cost";q=1000;w=60`, Cost: 1.0,
				Throttle: throttle(1000, 999, 1000.0/60), Limit: 1000.0, Remaining: 999.0, Use: 1.0},
		},
	}, {
		// An emission interval of 1000h/7, not a whole number of nanoseconds.
		name:  "seven points",
		cfg:   ratelimit.Config{Points: 7, Window: long},
		steps: []string{parseErr, cheap, two, costly, five, cheap, cheap, cheap, cheap, cheap},
		want: func() []budgetSeen {
			p := `"cost";q=7;w=3600000`
			rate := 7 / long.Seconds()
			return []budgetSeen{
				{Status: 200, Code: "GRAPHQL_PARSE_FAILED", RateLimit: `"cost";r=7;t=0`, Policy: p, Cost: 0.0, Throttle: throttle(7, 7, rate)},
				{Status: 200, RateLimit: `"cost";r=6;t=514286`, Policy: p, Cost: 1.0, Throttle: throttle(7, 6, rate), Limit: 7.0, Remaining: 6.0, Use: 1.0},
				{Status: 200, RateLimit: `"cost";r=4;t=1542858`, Policy: p, Cost: 2.0, Throttle: throttle(7, 4, rate), Limit: 7.0, Remaining: 4.0, Use: 2.0},
				{Status: 200, Code: "QUERY_TOO_COSTLY", RateLimit: `"cost";r=4;t=1542858`, Policy: p, Cost: 512.0, Throttle: throttle(7, 4, rate)},
				{Status: 429, Code: "RATE_LIMITED", RateLimit: `"cost";r=4;t=1542858`, Policy: p, RetryAfter: "514286"},
				{Status: 200, RateLimit: `"cost";r=3;t=2057143`, Policy: p, Cost: 1.0, Throttle: throttle(7, 3, rate), Limit: 7.0, Remaining: 3.0, Use: 1.0},
				{Status: 200, RateLimit: `"cost";r=2;t=2571429`, Policy: p, Cost: 1.0, Throttle: throttle(7, 2, rate), Limit: 7.0, Remaining: 2.0, Use: 1.0},
				{Status: 200, RateLimit: `"cost";r=1;t=3085715`, Policy: p, Cost: 1.0, Throttle: throttle(7, 1, rate), Limit: 7.0, Remaining: 1.0, Use: 1.0},
				{Status: 200, RateLimit: `"cost";r=0;t=3600000`, Policy: p, Cost: 1.0, Throttle: throttle(7, 0, rate), Limit: 7.0, Remaining: 0.0, Use: 1.0},
				{Status: 429, Code: "RATE_LIMITED", RateLimit: `"cost";r=0;t=3600000`, Policy: p, RetryAfter: "514286"},
			}
		}(),
	}, {
		// A budget large enough for leases: after the second operation an
		// instance holds some of it.
		name:  "leased budget",
		cfg:   ratelimit.Config{Points: 1000, Window: long},
		steps: []string{cheap, cheap, cheap, two, costly, costly, five, cheap},
		want: func() []budgetSeen {
			p := `"cost";q=1000;w=3600000`
			rate := 1000 / long.Seconds()
			ok := func(left, reset int, cost float64, field bool) budgetSeen {
				s := budgetSeen{Status: 200, RateLimit: fmt.Sprintf(`"cost";r=%d;t=%d`, left, reset), Policy: p,
					Cost: cost, Throttle: throttle(1000, left, rate)}
				if field {
					s.Limit, s.Remaining, s.Use = 1000.0, float64(left), cost
				}
				return s
			}
			return []budgetSeen{
				ok(999, 3600, 1, true),
				ok(998, 7200, 1, true),
				ok(997, 10800, 1, true),
				ok(995, 18000, 2, true),
				ok(483, 1861200, 512, false),
				{Status: 429, Code: "RATE_LIMITED", RateLimit: `"cost";r=483;t=1861200`, Policy: p, RetryAfter: "104400"},
				ok(478, 1879200, 5, false),
				ok(477, 1882800, 1, true),
			}
		}(),
	}}
	modes := []struct {
		name  string
		redis bool
		lease float64
	}{{"memory", false, 0}, {"redis", true, 0}, {"redis-exact", true, -1}}
	for _, c := range cases {
		for _, m := range modes {
			t.Run(c.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				cfg := c.cfg
				cfg.Lease = m.lease
				var rdb redis.UniversalClient
				if m.redis {
					rdb = ratelimittest.Redis(t)
				}
				env, _ := limited(t, cfg, rdb, "")
				u := env.NewUser(t, "ann")
				for i, q := range c.steps {
					r := env.Post(t, u.Token, q, nil)
					rateLimitHeader(t, r) // both headers parse as structured fields
					got := budgetSeen{Status: r.Status, Code: r.Code(), RateLimit: r.Header.Get("RateLimit"),
						Policy: r.Header.Get("RateLimit-Policy"), RetryAfter: r.Header.Get("Retry-After")}
					if ext, ok := r.Body.Extensions["cost"].(map[string]any); ok {
						got.Cost, got.Throttle = ext["requestedQueryCost"], ext["throttleStatus"]
					}
					if ext, ok := firstErrorExtensions(r.Body.Errors); ok && got.Code == "QUERY_TOO_COSTLY" {
						got.Cost = ext["cost"]
					}
					var data struct{ RateLimit map[string]any }
					if len(r.Body.Data) > 0 && json.Unmarshal(r.Body.Data, &data) == nil && data.RateLimit != nil {
						got.Limit, got.Remaining, got.Use = data.RateLimit["limit"], data.RateLimit["remaining"], data.RateLimit["cost"]
					}
					if !reflect.DeepEqual(got, c.want[i]) {
						t.Errorf("step %d %s:\n got %+v\nwant %+v", i, q, got, c.want[i])
					}
				}
			})
		}
	}
}

// throttle is extensions.cost.throttleStatus as JSON decodes it.
func throttle(max, left int, rate float64) map[string]any {
	return map[string]any{"maximumAvailable": float64(max), "currentlyAvailable": float64(left), "restoreRate": rate}
}

// firstErrorExtensions returns the extensions of the first error.
func firstErrorExtensions(list []map[string]any) (map[string]any, bool) {
	if len(list) == 0 {
		return nil, false
	}
	ext, ok := list[0]["extensions"].(map[string]any)
	return ext, ok
}
