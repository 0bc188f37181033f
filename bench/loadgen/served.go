package loadgen

import "context"

// MeasureServer loads a server that Run does not start (bench/floor's) as Run
// loads a contender: cfg.Concurrency requests in flight posting body to url
// with cfg.Client's client, for cfg.Warmup and then for cfg.Duration (or
// cfg.Requests), every answer checked (HTTP 200, no errors, want in the body).
// The Stats carry the CPU time of the server process pid and of this process
// (the load generator) over the measured run; failed requests of the warm-up
// count as failures.
func MeasureServer(ctx context.Context, cfg Config, url string, pid int, body []byte, want string) (Stats, error) {
	cfg.defaults()
	client, err := newPoster(cfg.Client, cfg.Concurrency)
	if err != nil {
		return Stats{}, err
	}
	defer client.closeIdle()
	do := func(ctx context.Context, _, _ int) error { return client.post(ctx, url, "", body, want) }
	w := measure(ctx, warmUp(cfg), do)
	meter := cpuMeter{serverPID: pid, self: true}
	before := meter.snapshot(ctx)
	s := measure(ctx, cfg, do)
	after := meter.snapshot(ctx)
	s.ServerCPU, _, s.LoadCPU = cpuUsed(before, after)
	return withWarmUp(s, w), nil
}

// warmUp returns cfg with the warm-up's length as its duration.
func warmUp(cfg Config) Config {
	cfg.Duration = cfg.Warmup
	return cfg
}

// withWarmUp returns run s with the failed requests of its warm-up w counted
// as its own failures.
func withWarmUp(s, w Stats) Stats {
	if w.Errors > 0 {
		if s.Errors == 0 {
			s.FirstError = "warm-up: " + w.FirstError
		}
		s.Errors += w.Errors
	}
	return s
}
