package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// readBatcher sends the reads of concurrent requests to Postgres together
// (docs/decisions/2026-12-03-coalesced-reads.md). A request's read is the
// statements it queues and a function that reads their results. At most
// limit batches are in flight; a read that finds them all busy waits, and the
// batch that ends next sends every read that waited, in one round trip, in
// the order they came. A read that finds a batch free goes at once, so one
// request alone waits for no one, and one read alone is sent as it would be
// without the batcher: on its own context, its statements alone.
//
// The reads of a batch cost one backend one wake-up, and the server one
// write: at 16 requests in flight on 2 cores, a `task(id)` cost Postgres
// about half the CPU it cost alone.
//
// Together, the reads share one implicit transaction: a statement that fails
// makes pgx fail every later result of the batch. A read that finds the
// batch already failed is sent again on its own, so every read gets the
// answer and the error it would get alone. Its read function may run twice:
// it must set what it reads, not add to it.
//
// A batch of several reads is sent by a goroutine of its own, on a context
// detached from its first read's request (its values kept, its cancellation
// not), bounded by readBatchTimeout: one client going away, or one request's
// deadline, fails no one else's read. Each read waits for its answer only
// as long as its own context lasts: one that ends first (the request's
// REQUEST_TIMEOUT) returns its context's error at once, queued or in a batch
// in flight, and the batch goes on for the others, without it (its results,
// if read, are dropped). Only reads whose statements are bounded go through
// the batcher (a row by key, a page of at most 100 rows by index): the batch
// is as slow as its slowest read.
type readBatcher struct {
	pool *pgxpool.Pool
	// limit is the most batches in flight; 0 sends every read on its own.
	limit int

	mu    sync.Mutex
	queue []*batchedRead
	busy  int

	// alone, together, again and batches count what ReadStats reports.
	alone, together, again, batches atomic.Uint64
}

// ReadStats counts the reads sent outside units of work since the DB was
// made, by how they went (see readBatcher).
type ReadStats struct {
	// Alone are the reads sent in a round trip of their own.
	Alone uint64
	// Together are the reads sent in a round trip with others, Batches those
	// round trips: Together/Batches reads shared each.
	Together, Batches uint64
	// Again are the reads of a shared round trip sent again on their own,
	// because a statement before theirs failed.
	Again uint64
	// Waiting are the reads waiting now for a round trip.
	Waiting int
}

// ReadStats returns how this DB's reads went so far.
func (db *DB) ReadStats() ReadStats {
	c := &db.reads
	c.mu.Lock()
	waiting := len(c.queue)
	c.mu.Unlock()
	return ReadStats{Alone: c.alone.Load(), Together: c.together.Load(), Batches: c.batches.Load(), Again: c.again.Load(),
		Waiting: waiting}
}

// readBatchTimeout bounds a batch of several requests' reads.
const readBatchTimeout = time.Minute

// maxBatchedReads is the most reads one batch sends; the rest wait for the
// next. It bounds the statements in one pipeline.
const maxBatchedReads = 64

// DefaultReadBatches returns how many batches of reads are in flight at most
// for a pool of poolSize connections: one for every 8 connections, at least
// one (2 for the default pool of 16; measured in the decision).
func DefaultReadBatches(poolSize int32) int { return max(1, int(poolSize)/8) }

// batchedRead is one request's read in the batcher.
type batchedRead struct {
	// ctx is the request's context: a batch it is the first of is sent on
	// it, detached (readBatcher.send), so that it is traced in that request.
	ctx   context.Context
	queue func(b *pgx.Batch)
	read  func(br pgx.BatchResults) error
	// err is what read returned; again, that the batch had failed before
	// this read's statements, so it must be sent on its own; panicked, a
	// panic of read, raised again in the request's goroutine.
	err      error
	again    bool
	panicked any
	// taken is set, under the batcher's mu, once the read has left the
	// queue; lead, with it, when the read is a batch of one that it must
	// send itself. done closes when either happened (lead) or the batch the
	// read went in ended.
	taken bool
	lead  []*batchedRead
	done  chan struct{}
	// gone tells the batch's goroutine that the request stopped waiting (its
	// context ended): the read's functions are not run any more.
	gone atomic.Bool
}

// read sends the statements queue adds to a batch and reads their results
// with read, in one round trip shared with concurrent reads when ctx carries
// no unit of work (see readBatcher), in it when it does. It returns what read
// returns, or the error of sending the batch. read may run twice (see
// readBatcher) and must not keep br.
//
// When ctx ends while the read waits for a shared round trip, read returns
// ctx's error at once, and queue or read may still be running, or about to
// run, on the batch's goroutine: the caller must not look at what they set
// unless read returned nil (as any caller of a function that failed), and
// they must not change what the caller uses afterwards.
func (db *DB) read(ctx context.Context, queue func(b *pgx.Batch), read func(br pgx.BatchResults) error) error {
	if tx := TxFrom(ctx); tx != nil {
		return sendRead(ctx, tx, &batchedRead{queue: queue, read: read})
	}
	return db.reads.do(ctx, &batchedRead{ctx: ctx, queue: queue, read: read})
}

// sendRead sends r's statements alone on q and reads them. The batch is
// closed, and its connection released, even when read panics, or pgx does
// while it sends (a statement's argument whose encoding panics):
// pgxpool.Pool.SendBatch would then keep its connection for ever.
func sendRead(ctx context.Context, q Querier, r *batchedRead) (err error) {
	if pool, ok := q.(*pgxpool.Pool); ok {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		q = conn
	}
	b := &pgx.Batch{}
	r.queue(b)
	br := q.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	return r.read(br)
}

// do sends r alone when fewer than limit batches are in flight, and
// otherwise waits for the next batch, or for the end of ctx, whichever
// comes first.
func (c *readBatcher) do(ctx context.Context, r *batchedRead) error {
	if c.limit <= 0 {
		c.alone.Add(1)
		return sendRead(ctx, c.pool, r)
	}
	c.mu.Lock()
	if c.busy < c.limit {
		// Reads wait only while every slot is busy, so the queue is empty:
		// r is a batch of its own.
		c.busy++
		c.mu.Unlock()
		r.lead = []*batchedRead{r}
	} else {
		r.done = make(chan struct{})
		c.queue = append(c.queue, r)
		c.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			if c.abandon(r) {
				return fmt.Errorf("batched read: %w", ctx.Err())
			}
		}
	}
	if r.lead != nil {
		r.lead = nil
		c.sendAlone(ctx, r)
	}
	if r.panicked != nil {
		panic(r.panicked)
	}
	if r.again {
		c.again.Add(1)
		return sendRead(ctx, c.pool, r)
	}
	return r.err
}

// abandon takes r, whose request stopped waiting (its context ended), out
// of the batcher, and reports whether it did. A read still queued leaves the
// queue; one in a batch in flight is marked gone, and the batch goes on
// without it: its functions are not run any more, but one running now (its
// own statement slow) runs to its end (see DB.read). A read already handed
// a batch of its own (lead) is not abandoned: do sends it, on its ended
// context, which fails at once, and frees the slot.
func (c *readBatcher) abandon(r *batchedRead) bool {
	c.mu.Lock()
	if !r.taken {
		c.queue = slices.DeleteFunc(c.queue, func(q *batchedRead) bool { return q == r })
		c.mu.Unlock()
		return true
	}
	lead := r.lead != nil
	c.mu.Unlock()
	if lead {
		<-r.done
		return false
	}
	r.gone.Store(true)
	return true
}

// take removes the next batch from the queue; c.mu is held.
func (c *readBatcher) take() []*batchedRead {
	n := min(len(c.queue), maxBatchedReads)
	batch := c.queue[:n:n]
	c.queue = c.queue[n:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	for _, r := range batch {
		r.taken = true
	}
	return batch
}

// sendAlone sends r, a batch of its own, on its request's context, then
// hands the next batch on.
func (c *readBatcher) sendAlone(ctx context.Context, r *batchedRead) {
	defer c.handOff()
	c.alone.Add(1)
	r.err = sendRead(ctx, c.pool, r)
}

// send sends batch, several reads, in one round trip and tells each its
// answer (done), then hands the next batch on. It runs on a goroutine of its
// own, so that every read of the batch can stop waiting at its own
// deadline (do), and on a context of its own, bounded by readBatchTimeout.
// A read whose request stopped waiting (gone) is not queued, or its results
// are read without its function. A panic of the batch itself (not of a
// read's functions, recovered for their own read: pgx encoding a read's
// argument, say) is recovered, and the reads not answered yet are sent again
// alone, as after a failure: the read that caused it panics again in its
// own request, as it would alone; on this goroutine the panic would end the
// process.
func (c *readBatcher) send(batch []*batchedRead) {
	c.batches.Add(1)
	c.together.Add(uint64(len(batch)))
	for _, r := range batch {
		r.err = errNotRead
	}
	var sendErr error
	defer func() {
		if p := recover(); p != nil {
			sendErr = fmt.Errorf("batched read: %s", recovered(p))
		}
		for _, r := range batch {
			if r.err == errNotRead {
				// The batch failed before r's statements were read.
				r.err, r.again = sendErr, true
			}
			close(r.done)
		}
		c.handOff()
	}()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), readBatchTimeout)
	defer cancel()
	b := &pgx.Batch{}
	var failed bool
	for _, r := range batch {
		first := len(b.QueuedQueries)
		if !queueInto(r, b) {
			continue
		}
		n := len(b.QueuedQueries) - first
		s := &sharedResults{left: n, failed: &failed}
		if n == 0 {
			if !r.gone.Load() {
				r.err = s.run(r)
			}
			continue
		}
		b.QueuedQueries[first].Fn = func(br pgx.BatchResults) error {
			s.br = br
			switch {
			case failed:
				// An earlier read's statement failed, and with it r's.
				r.err, r.again = nil, true
				_ = s.skip() // r is sent again, alone
			case r.gone.Load():
				_ = s.skip() // nobody waits for them; their failure is noted
			default:
				r.err = s.run(r)
			}
			return nil
		}
	}
	if len(b.QueuedQueries) == 0 {
		return
	}
	// Acquired here, not by Pool.SendBatch, so that a panic of pgx's
	// releases it (recovered above).
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		sendErr = err
		return
	}
	defer conn.Release()
	sendErr = conn.SendBatch(ctx, b).Close()
}

// queueInto adds r's statements to b, unless its request stopped waiting
// (gone). A panic of r's queue function is recovered for r's own goroutine
// (do panics with it there): what it queued is dropped, r is not sent, and
// queueInto reports false, so that the others get their own answers.
func queueInto(r *batchedRead, b *pgx.Batch) (queued bool) {
	if r.gone.Load() {
		return false
	}
	first := len(b.QueuedQueries)
	defer func() {
		if p := recover(); p != nil {
			b.QueuedQueries = b.QueuedQueries[:first]
			r.err, r.panicked = nil, recovered(p)
		}
	}()
	r.queue(b)
	return true
}

// recovered is a panic of a read's function, with the stack where it
// happened, to be raised again in the read's own goroutine.
func recovered(p any) string {
	return fmt.Sprintf("%v (in a batched read)\n%s", p, debug.Stack())
}

// handOff sends the next batch of the reads waiting: a read alone is
// handed its batch, to send on its own context and goroutine (do); several
// go to a goroutine of their own (send). It frees the batch slot when none
// waits.
func (c *readBatcher) handOff() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.busy--
		c.mu.Unlock()
		return
	}
	next := c.take()
	if len(next) == 1 {
		next[0].lead = next
		c.mu.Unlock()
		close(next[0].done)
		return
	}
	c.mu.Unlock()
	go c.send(next)
}

// errNotRead is a read's error until its statements were read.
var errNotRead = errors.New("batched read not read")

// sharedResults is one read's share of a batch's results: its own n
// statements', in order. It notes in failed whether a statement failed,
// which fails every later statement of the batch.
type sharedResults struct {
	br     pgx.BatchResults
	left   int
	failed *bool
	// rows are the last rows read, closed when the read ends.
	rows *sharedRows
}

// run runs r's read on its share, recovering a panic for r's own goroutine,
// then closes the rows r left open and reads the statements it left unread,
// so that the next read starts at its own statements and a failure is noted.
// When r's read returned nil, the first error of those is r's error, as
// closing the batch returns it to a read sent alone (sendRead).
func (s *sharedResults) run(r *batchedRead) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.panicked = recovered(p)
		}
		if serr := s.skip(); err == nil {
			err = serr
		}
	}()
	return r.read(s)
}

// skip reads the share's statements not read yet and returns the first
// error among them: the rows left open, then the statements left unread.
func (s *sharedResults) skip() error {
	var first error
	if s.rows != nil {
		s.rows.Close()
		first = s.rows.Err()
	}
	for s.left > 0 {
		if _, err := s.Exec(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// next takes the share's next statement.
func (s *sharedResults) next() error {
	if s.left == 0 {
		return errors.New("batched read: read past its own statements")
	}
	s.left--
	return nil
}

// note records that err, a statement's error, failed the batch.
func (s *sharedResults) note(err error) {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		*s.failed = true
	}
}

// Exec reads the next statement's command tag.
func (s *sharedResults) Exec() (pgconn.CommandTag, error) {
	if err := s.next(); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := s.br.Exec()
	s.note(err)
	return tag, err
}

// Query reads the next statement's rows.
func (s *sharedResults) Query() (pgx.Rows, error) {
	if err := s.next(); err != nil {
		return nil, err
	}
	if s.rows != nil {
		s.rows.Close()
	}
	rows, err := s.br.Query()
	s.note(err)
	s.rows = &sharedRows{Rows: rows, s: s}
	return s.rows, err
}

// QueryRow reads the next statement's row.
func (s *sharedResults) QueryRow() pgx.Row {
	rows, err := s.Query()
	if rows == nil {
		return errRow{err}
	}
	return sharedRow{rows.(*sharedRows)}
}

// Close does nothing: the batch is closed by its leader.
func (*sharedResults) Close() error { return nil }

// Tx returns nil: the batch is in no transaction.
func (*sharedResults) Tx() pgx.Tx { return nil }

// sharedRows notes the error of the rows it reads.
type sharedRows struct {
	pgx.Rows
	s *sharedResults
}

// Close closes the rows and notes their error.
func (r *sharedRows) Close() {
	r.Rows.Close()
	r.s.note(r.Rows.Err())
}

// Next moves to the next row, noting the rows' error at their end.
func (r *sharedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.s.note(r.Rows.Err())
	return false
}

// sharedRow is a row of a share's statement, read as pgx reads QueryRow's.
type sharedRow struct{ rows *sharedRows }

// Scan scans the row's only row into dest: pgx.ErrNoRows when there is none.
func (r sharedRow) Scan(dest ...any) error {
	rows := r.rows
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			rows.Close()
			return errors.New("cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	rows.Scan(dest...)
	rows.Close()
	return rows.Err()
}
