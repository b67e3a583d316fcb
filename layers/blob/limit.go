package blob

import (
	"context"
	"io"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// NewLimiter paces reads to bps bytes per second (nil for bps <= 0: no
// limit). The burst, what an idle limiter grants at once, is 100ms worth
// of bytes (at least 32 KiB, at most 1 MiB, never more than a second's
// worth): a paced run stays near its rate over any window a neighbour
// would notice. One limiter shared by every stream of a run (image blobs
// and weights volumes alike) holds the run, not each stream, to the rate.
func NewLimiter(bps int64) *rate.Limiter {
	if bps <= 0 {
		return nil
	}
	burst := min(max(bps/10, 32<<10), 1<<20, bps)
	return rate.NewLimiter(rate.Limit(bps), int(burst))
}

// Wait takes n bytes from l (nil: no limit), in pieces no larger than its
// burst (WaitN refuses more).
func Wait(ctx context.Context, l *rate.Limiter, n int) error {
	for l != nil && n > 0 {
		k := min(n, l.Burst())
		if err := l.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// Meter counts the bytes read through it, adds them to Progress and
// paces them with Limit (each may be nil).
type Meter struct {
	Ctx      context.Context
	R        io.Reader
	N        int64
	Progress *atomic.Int64
	Limit    *rate.Limiter
}

func (m *Meter) Read(p []byte) (int, error) {
	if m.Limit != nil && len(p) > m.Limit.Burst() {
		p = p[:m.Limit.Burst()]
	}
	n, err := m.R.Read(p)
	if n > 0 {
		m.N += int64(n)
		if m.Progress != nil {
			m.Progress.Add(int64(n))
		}
		if werr := Wait(m.Ctx, m.Limit, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}
