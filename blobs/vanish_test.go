//go:build linux || darwin

package blobs_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"taskflow/store"
)

// vanishWhileListed makes the next listing of the store meet f's object
// deleted under it, as an upload's temporary file is when its upload ends
// while the sweeper lists: fileblob reads a directory's names, then opens
// each object's attributes file and stats the object. A FIFO in place of
// f's attributes file holds the listing at f's object until this function's
// goroutine, unblocked by that open, has deleted the object; the stat then
// fails with NotFound. Deterministic: no sleep, no timing. The returned
// function waits for the deletion.
func vanishWhileListed(t *testing.T, s *setup, f *store.UploadedFile) (deleted func()) {
	t.Helper()
	objects, err := filepath.Glob(filepath.Join(s.dir, "*", f.Key))
	if err != nil || len(objects) != 1 {
		t.Fatalf("the object of %s: %v %v", f.Key, objects, err)
	}
	object, fifo := objects[0], objects[0]+".attrs"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once the listing opens it
		if err != nil {
			done <- err
			return
		}
		err = os.Remove(object)
		w.Close() // the listing reads the end, then stats the object
		done <- err
	}()
	t.Cleanup(func() {
		// Releases the goroutine if no listing opened the FIFO.
		if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			r.Close()
		}
	})
	return func() {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute): // a bound for a failure, not a timing
			t.Fatal("no listing met the object")
		}
	}
}

// An object deleted while the sweeper lists the store (an upload's
// temporary file, with fileblob) does not fail the sweep: the listing
// starts again, as Keys' does, and the objects nobody knows are deleted. It
// failed with NotFound, and the whole sweep waited for the next interval.
func TestSweepListsAgainWhenAnObjectVanishes(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	orphan := s.stage(t, "orphan")
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM blob_uploads WHERE key = $1`, orphan.Key); err != nil {
		t.Fatal(err)
	}
	deleted := vanishWhileListed(t, s, s.stage(t, "an upload that ends while the sweeper lists"))
	swept, err := s.bs.Sweep(ctx, time.Now().Add(2*time.Hour))
	deleted()
	if err != nil || swept.Unknown != 1 {
		t.Fatalf("swept %+v, %v; want the unknown object deleted", swept, err)
	}
	if keys := s.objects(t); len(keys) != 0 {
		t.Fatalf("objects %v left", keys)
	}

	// Keys lists through eachObject too.
	kept := s.stage(t, "kept")
	deleted = vanishWhileListed(t, s, s.stage(t, "vanishes"))
	keys, err := s.bs.Keys(ctx)
	deleted()
	if err != nil || len(keys) != 1 || keys[0] != kept.Key {
		t.Fatalf("Keys: %v, %v; want [%s]", keys, err, kept.Key)
	}
}
