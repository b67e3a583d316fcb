package atomicfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLockWaits: a second Lock on a held path calls onWait once, waits,
// and gets the lock when the first is released; one that is never
// released ends with ctx.
func TestLockWaits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(context.Background(), p, func() { t.Error("onWait on a free lock") })
	if err != nil {
		t.Fatal(err)
	}
	waits := 0
	done := make(chan error, 1)
	go func() {
		u, err := Lock(context.Background(), p, func() { waits++ })
		if err == nil {
			u()
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("second Lock returned %v while the first was held", err)
	default:
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waits != 1 {
		t.Errorf("onWait called %d times, want 1", waits)
	}

	unlock, err = Lock(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, p, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a held path with a short ctx: %v", err)
	}
}

// TestLockFileWaits: LockFile on a second descriptor of a held file waits
// until ctx ends.
func TestLockFileWaits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	a, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := LockFile(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	b, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := LockFile(ctx, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockFile on a held file: %v", err)
	}
	a.Close()
	if err := LockFile(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}
