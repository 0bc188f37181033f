package blobs

import (
	"context"
	"time"

	"gocloud.dev/blob"
)

// sweepBatch is how many keys one statement of a sweep handles.
const sweepBatch = 1000

// SweepInterval is how often the deployment sweeps for a grace period: half
// of it, between 1 second and 15 minutes.
func SweepInterval(grace time.Duration) time.Duration {
	return min(max(grace/2, time.Second), 15*time.Minute)
}

// Swept counts what one sweep deleted.
type Swept struct {
	// Uploads are objects of uploads older than the grace period that no
	// attachment adopted (a crash between the write and the commit).
	Uploads int
	// Unused are blobs no attachment has had for the grace period.
	Unused int
	// Unknown are objects the database does not know (a crash between a
	// database change and the deletion of its object).
	Unknown int
}

// RunSweeper sweeps every SweepInterval until ctx ends, on every instance: the
// database lets one instance of many sweep per interval (store.ClaimBlobSweep),
// and every deletion is idempotent. A failure is logged at FailureLevel; the
// next sweep starts over.
func (s *Store) RunSweeper(ctx context.Context) {
	interval := SweepInterval(s.grace)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A little less than the interval: ticks of one instance jitter.
		mine, err := s.db.ClaimBlobSweep(ctx, interval*9/10)
		if err != nil {
			s.log.Log(ctx, FailureLevel(err), "blob sweep: could not claim the sweep", "err", err)
			continue
		}
		if !mine {
			continue
		}
		swept, err := s.Sweep(ctx, time.Now())
		if err != nil && ctx.Err() == nil {
			s.log.Log(ctx, FailureLevel(err), "blob sweep failed; the next one goes on", "err", err)
		}
		if swept != (Swept{}) {
			s.log.InfoContext(ctx, "blob sweep", "uploads", swept.Uploads, "unused", swept.Unused, "unknown", swept.Unknown)
		}
	}
}

// Sweep deletes, once, the objects of uploads older than the grace period that
// no attachment adopted, the blobs no attachment has used for the grace period,
// and the objects older than the grace period that the database does not know.
// The database forgets a key before its object is deleted, so that nothing can
// adopt an object being deleted; a crash in between leaves an object nobody
// knows, which the third pass deletes. Objects are compared with now by their
// modification time.
func (s *Store) Sweep(ctx context.Context, now time.Time) (Swept, error) {
	var swept Swept
	var err error
	if swept.Uploads, err = s.drain(ctx, s.db.ExpireBlobUploads); err != nil {
		return swept, err
	}
	if swept.Unused, err = s.drain(ctx, s.db.DropUnusedBlobs); err != nil {
		return swept, err
	}
	n, err := s.sweepUnknown(ctx, now.Add(-s.grace))
	swept.Unknown = n
	return swept, err
}

// sweepUnknown deletes the objects last modified before cutoff that the
// database does not know, listing the store a page at a time (eachObject: a
// listing that meets an object deleted meanwhile starts again).
func (s *Store) sweepUnknown(ctx context.Context, cutoff time.Time) (int, error) {
	deleted := 0
	var old []string
	flush := func() error {
		if len(old) == 0 {
			return nil
		}
		unknown, err := s.db.UnknownBlobs(ctx, old)
		old = old[:0]
		if err != nil {
			return err
		}
		n, err := s.deleteAll(ctx, unknown)
		deleted += n
		return err
	}
	err := s.eachObject(ctx, func() { old = old[:0] }, func(obj *blob.ListObject) error {
		if !obj.IsDir && obj.ModTime.Before(cutoff) {
			old = append(old, obj.Key)
		}
		if len(old) == sweepBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return deleted, err
	}
	return deleted, flush()
}

// drain deletes the objects of the keys forget returns, a batch at a time,
// until it returns fewer than a batch, and returns how many it deleted.
func (s *Store) drain(ctx context.Context, forget func(context.Context, time.Duration, int) ([]string, error)) (int, error) {
	total := 0
	for {
		keys, err := forget(ctx, s.grace, sweepBatch)
		if err != nil {
			return total, err
		}
		n, err := s.deleteAll(ctx, keys)
		total += n
		if err != nil || len(keys) < sweepBatch {
			return total, err
		}
	}
}

// deleteAll deletes the objects of keys and returns how many it deleted.
func (s *Store) deleteAll(ctx context.Context, keys []string) (int, error) {
	for i, k := range keys {
		if err := s.delete(ctx, k); err != nil {
			return i, err
		}
	}
	return len(keys), nil
}
