package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseScript is GCRA in Redis, in redis_rate's storage format (the theoretical
// arrival time as seconds since 2017-01-01 under "rate:"+key, so a fleet mixing
// both during a rolling deploy shares one budget), with two additions redis_rate
// lacks: it first gives back refund points an instance leased and did not spend,
// then, when the n points are allowed, it also takes up to want points more as a
// lease for the calling instance, never more than a quarter of what is left, so
// leases shrink as the budget runs low and vanish near its end.
//
// KEYS[1] the budget; ARGV: emission interval (seconds per point), window
// (seconds), n, refund, want. It returns {allowed, granted, retry_after,
// reset_after}, the durations in seconds as strings.
var leaseScript = redis.NewScript(`
redis.replicate_commands()
local key = KEYS[1]
local emission = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local refund = tonumber(ARGV[4])
local want = tonumber(ARGV[5])

local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local tat = tonumber(redis.call("GET", key) or now)
local stored = tat
if refund > 0 then tat = tat - refund * emission end
tat = math.max(tat, now)

local function store(v)
  if v > now then
    redis.call("SET", key, v, "EX", math.ceil(v - now))
  elseif stored > now then
    redis.call("DEL", key)
  end
end

local new_tat = tat + n * emission
local allow_at = new_tat - window
if now < allow_at then
  if refund > 0 then store(tat) end
  return {0, 0, tostring(allow_at - now), tostring(tat - now)}
end
local granted = 0
if want > 0 then
  local left = math.floor((now - allow_at) / emission + 1e-6)
  granted = math.max(0, math.min(want, math.floor(left / 4)))
end
new_tat = new_tat + granted * emission
store(new_tat)
return {1, granted, "-1", tostring(new_tat - now)}
`)

// leaseStore is GCRA in Redis with leases: an instance that sees a budget in use
// takes a slice of it from Redis in the same round trip as a check (a lease,
// already charged there) and spends it locally, so most operations of a busy
// caller cost no round trip. Leases last one period; what is left of one is
// given back to Redis with the next check of that budget, or by a sweep when
// the budget goes quiet, or at Close.
//
// What it keeps of the contract: a budget is never overspent (leased points are
// charged in Redis before they are spent); on one instance every answer
// (allowed, remaining, reset, Retry-After) is what per-operation checks would
// give; a refusal always comes from Redis, with the exact Retry-After. Across
// instances, the remaining points an instance reports leave out what the other
// instances hold in leases and have spent since its last check, and a caller can
// be refused while another instance holds unspent points; both last at most one
// lease period, and no instance holds more than Config.Lease of the budget, or a
// quarter of what is left.
type leaseStore struct {
	rdb    redis.Scripter
	prefix string
	share  float64       // most of a budget one lease may take
	period time.Duration // how long a lease lasts
	every  time.Duration // how often leases of quiet budgets are given back
	now    func() time.Time

	mu     sync.Mutex
	leases map[string]*lease
	sweep  sync.Once
	done   chan struct{}
	hits   func() // counts an operation served from a lease
}

// lease is what one instance knows of one budget.
type lease struct {
	unused  int           // points taken from Redis and not yet spent
	spent   int           // points spent from leases since the last round trip
	tat     time.Time     // the budget's theoretical arrival time in Redis, leases included
	expires time.Time     // end of the period; until then the budget is busy here
	limit   Limit         // the budget's policy, for giving points back
	syncing chan struct{} // closed when the check of this budget in Redis returns
	checked bool          // a check of this budget has returned
}

func newLeaseStore(rdb redis.Scripter, prefix string, share float64, period time.Duration, hits func()) *leaseStore {
	return &leaseStore{rdb: rdb, prefix: prefix, share: share, period: period, every: period / 2, now: time.Now,
		leases: map[string]*lease{}, done: make(chan struct{}), hits: hits}
}

// result is the answer for an operation at now: the budget as if every point
// spent here had been charged on its own, that is the leases' unspent points
// left out.
func (ls *lease) result(l Limit, now time.Time) Result {
	return answer(l, true, 0, ls.tat.Add(-time.Duration(ls.unused)*l.emission()).Sub(now))
}

// local answers the check from this instance's lease when it holds enough of
// one; ok is false when the check needs Redis.
func (s *leaseStore) local(key string, l Limit, n int) (res Result, ok bool) {
	now := s.now()
	s.mu.Lock()
	ls := s.leases[key]
	if ls != nil && now.Before(ls.expires) && ls.unused >= n && ls.limit == l {
		ls.unused -= n
		ls.spent += n
		res = ls.result(l, now)
		s.mu.Unlock()
		s.hits()
		return res, true
	}
	s.mu.Unlock()
	return Result{}, false
}

// allowN answers from the lease when it can. Otherwise it sends one check to
// Redis, giving back what the lease has left and, for a budget in use here,
// asking for a new lease. Checks of one budget go to Redis one at a time from an
// instance (the others wait for the answer and try the lease again), so the
// budget's state each answer brings is the latest and is kept as it is: it goes
// down as well as up, since a give-back moves it back.
func (s *leaseStore) allowN(ctx context.Context, key string, l Limit, n int) (Result, error) {
	for {
		if res, ok := s.local(key, l, n); ok {
			return res, nil
		}
		now := s.now()
		s.mu.Lock()
		ls := s.leases[key]
		if ls == nil {
			ls = &lease{expires: now.Add(s.period), limit: l}
			s.leases[key] = ls
		}
		if wait := ls.syncing; wait != nil {
			// Its check ends within its own timeout; then try the lease again.
			s.mu.Unlock()
			<-wait
			continue
		}
		refund, want := 0, 0
		if ls.limit == l {
			refund = ls.unused
		}
		if ls.checked && n > 0 {
			// A second operation within a period: the budget is busy here.
			want = min(int(float64(l.Points)*s.share), max(8*n, 2*(ls.spent+n)))
		}
		ls.unused, ls.limit = 0, l
		done := make(chan struct{})
		ls.syncing = done
		s.mu.Unlock()
		s.sweeping()

		allowed, granted, retry, reset, err := s.run(ctx, key, l, n, refund, want)
		now = s.now()
		s.mu.Lock()
		ls.syncing = nil
		close(done)
		if err != nil {
			s.mu.Unlock()
			return Result{}, err
		}
		ls.checked = true
		ls.tat = now.Add(reset)
		// What this instance knows of the budget is fresh again: a new period.
		ls.expires = now.Add(s.period)
		if !allowed {
			s.mu.Unlock()
			return answer(l, false, retry, reset), nil
		}
		if granted > 0 {
			ls.unused += granted
			ls.spent = 0
		}
		res := ls.result(l, now)
		s.mu.Unlock()
		return res, nil
	}
}

// run sends one check to Redis.
func (s *leaseStore) run(ctx context.Context, key string, l Limit, n, refund, want int) (allowed bool, granted int, retry, reset time.Duration, err error) {
	v, err := leaseScript.Run(ctx, s.rdb, []string{"rate:" + s.prefix + key},
		l.emission().Seconds(), l.Window.Seconds(), n, refund, want).Slice()
	if err != nil {
		return false, 0, 0, 0, err
	}
	if len(v) != 4 {
		return false, 0, 0, 0, fmt.Errorf("rate limit script: %d values", len(v))
	}
	a, _ := v[0].(int64)
	g, _ := v[1].(int64)
	rs, _ := v[2].(string)
	ts, _ := v[3].(string)
	retryS, err1 := strconv.ParseFloat(rs, 64)
	resetS, err2 := strconv.ParseFloat(ts, 64)
	if err1 != nil || err2 != nil {
		return false, 0, 0, 0, fmt.Errorf("rate limit script: bad durations %q %q", rs, ts)
	}
	return a == 1, int(g), seconds(retryS), max(seconds(resetS), 0), nil
}

// seconds converts a script's duration to the resolution.
func seconds(f float64) time.Duration { return exact(time.Duration(f * float64(time.Second))) }

// sweeping starts the sweep that gives back the leases of budgets gone quiet.
func (s *leaseStore) sweeping() {
	s.sweep.Do(func() {
		go func() {
			t := time.NewTicker(s.every)
			defer t.Stop()
			for {
				select {
				case <-s.done:
					return
				case <-t.C:
					s.giveBack(false)
				}
			}
		}()
	})
}

// giveBack returns the unspent points of leases whose period ended (all of
// them when all is set) to Redis and forgets those budgets. A failed give-back
// loses the points until the budget refills, which is the safe side.
func (s *leaseStore) giveBack(all bool) {
	now := s.now()
	type back struct {
		key string
		l   Limit
		n   int
	}
	var backs []back
	s.mu.Lock()
	for k, ls := range s.leases {
		if ls.syncing != nil {
			continue // its check is in Redis: it ends with a new period
		}
		if all || !now.Before(ls.expires) {
			if ls.unused > 0 {
				backs = append(backs, back{k, ls.limit, ls.unused})
			}
			delete(s.leases, k)
		}
	}
	s.mu.Unlock()
	if len(backs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, b := range backs { // concurrently: the autopipeliner sends them together
		wg.Go(func() { _, _, _, _, _ = s.run(ctx, b.key, b.l, 0, b.n, 0) })
	}
	wg.Wait()
}

// drop forgets every lease without giving points back (Redis failed: what it
// holds is unknown, and the points come back as the budgets refill).
func (s *leaseStore) drop() {
	s.mu.Lock()
	clear(s.leases)
	s.mu.Unlock()
}

// close stops the sweep and, when giveBack is set, gives every lease back.
func (s *leaseStore) close(giveBack bool) {
	close(s.done)
	if giveBack {
		s.giveBack(true)
	}
}

var _ backend = (*leaseStore)(nil)
