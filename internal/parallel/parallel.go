// Package parallel runs a bounded fan-out that stops at the first error:
// the one way kiln's layer passes (analyze's scan, slim's scan, rewrite
// and eStargz) work on several layers at once.
package parallel

import (
	"context"
	"sync"
)

// ForEach runs fn for 0..n-1 with at most conc running. Work starts in
// index order, so an item may wait on a lower one (slim's hardlink
// stashes) without deadlock: the lower one already holds a slot. The
// first error fn returns cancels the context the others run under and is
// returned; when ctx is cancelled first, what is not started is not, and
// ctx's cause is returned.
func ForEach(ctx context.Context, n, conc int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel(err) })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx)
}
