package parallel

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestForEachBoundAndAll(t *testing.T) {
	var running, peak, done atomic.Int32
	err := ForEach(context.Background(), 20, 3, func(ctx context.Context, i int) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		running.Add(-1)
		done.Add(1)
		return nil
	})
	if err != nil || done.Load() != 20 || peak.Load() > 3 {
		t.Errorf("err %v, done %d, peak %d", err, done.Load(), peak.Load())
	}
}

func TestForEachFirstErrorCancels(t *testing.T) {
	boom := errors.New("boom")
	err := ForEach(context.Background(), 10, 1, func(ctx context.Context, i int) error {
		if i == 2 {
			return boom
		}
		if i > 2 {
			t.Errorf("item %d started after the error", i)
		}
		return nil
	})
	if err != boom {
		t.Errorf("err %v, want boom", err)
	}
}

func TestForEachCancelledContext(t *testing.T) {
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	var ran atomic.Int32
	err := ForEach(ctx, 5, 2, func(context.Context, int) error { ran.Add(1); return nil })
	if !errors.Is(err, cause) || ran.Load() != 0 {
		t.Errorf("err %v, ran %d", err, ran.Load())
	}
}
