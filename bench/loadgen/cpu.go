package loadgen

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/procfs"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (getconf
// CLK_TCK, USER_HZ: 100 on every Linux this runs on).
var clockTick = func() time.Duration {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 10 * time.Millisecond
	}
	hz, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || hz <= 0 {
		return 10 * time.Millisecond
	}
	return time.Second / time.Duration(hz)
}()

// procCPU returns the CPU time (user + system, all threads, those that ended
// too) process pid has used, from /proc/<pid>/stat, in clock ticks; false if
// it can't be read (no such process, not Linux). A server uses seconds of
// CPU in a run: a tick (10 ms) more or less is nothing.
func procCPU(pid int) (time.Duration, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return time.Duration(st.UTime+st.STime) * clockTick, true
}

// backendCPU returns the CPU time a single-threaded process (a Postgres
// backend) has used, in ns from /proc/<pid>/schedstat (the scheduler's run
// time), or from /proc/<pid>/stat when there is no schedstat. stat truncates
// each reading to a clock tick (10 ms): a backend that served a thousand
// 50 µs queries in a run may show no tick at all, so sixteen backends' sum
// would be off by up to 160 ms a run.
func backendCPU(pid int) (time.Duration, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, false
	}
	if st, err := p.Schedstat(); err == nil {
		return time.Duration(st.RunningNanoseconds), true
	}
	return procCPU(pid)
}

// cpuMeter measures the CPU a contender costs over a measured interval: its
// server process's (when it has one on this machine) and its Postgres
// backends', the backends of this database whose application_name is the
// contender's. Only those: the machine's Postgres also serves other clients,
// and its background processes (WAL writer, checkpointer, autovacuum) can't be
// told apart by whose work they do.
type cpuMeter struct {
	pool      *pgxpool.Pool // a connection of the harness's own to ask pg_stat_activity; nil: no backends read
	serverPID int           // 0: no server process (raw SQL) or it is this process
	appName   string        // application_name of the contender's connections
	self      bool          // also this process's CPU: the load generator's
}

// cpuSnapshot is what a cpuMeter read at one moment.
type cpuSnapshot struct {
	server   time.Duration
	serverOK bool
	self     time.Duration // -1: not read
	backends map[int]time.Duration
	pgOK     bool
}

func (m cpuMeter) snapshot(ctx context.Context) cpuSnapshot {
	s := cpuSnapshot{self: -1}
	if m.self {
		s.self = selfCPU()
	}
	if m.serverPID > 0 {
		s.server, s.serverOK = procCPU(m.serverPID)
	}
	if m.pool == nil {
		return s
	}
	rows, err := m.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, m.appName)
	if err != nil {
		return s
	}
	defer rows.Close()
	s.backends, s.pgOK = map[int]time.Duration{}, true
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			s.pgOK = false
			continue
		}
		cpu, ok := backendCPU(pid)
		if !ok {
			// Postgres on another machine or in a container: no /proc of it.
			s.pgOK = false
			continue
		}
		s.backends[pid] = cpu
	}
	if rows.Err() != nil {
		s.pgOK = false
	}
	return s
}

// cpuUsed returns the server's, the backends' and this process's CPU time
// between two snapshots; -1 for what could not be read, and for the backends when none
// was found (a contender that did work had some). A backend that appeared in
// between counts from its start (it was born in the interval); one that
// ended in between is lost (pools keep their connections while busy).
func cpuUsed(before, after cpuSnapshot) (server, pg, self time.Duration) {
	server, pg, self = -1, -1, -1
	if before.self >= 0 && after.self >= 0 {
		self = after.self - before.self
	}
	if before.serverOK && after.serverOK {
		server = after.server - before.server
	}
	if before.pgOK && after.pgOK && len(after.backends) > 0 {
		pg = 0
		for pid, t := range after.backends {
			pg += t - before.backends[pid]
		}
	}
	return server, pg, self
}

// sumCPU adds two runs' CPU time; -1 when either was not measured.
func sumCPU(a, b time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}
