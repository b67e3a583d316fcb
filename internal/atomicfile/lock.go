package atomicfile

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// lockPoll is how often Lock retries a lock another process holds.
const lockPoll = 20 * time.Millisecond

// Lock takes an exclusive flock on fd, waiting while another open file
// (this process's or another's) holds it, until ctx ends. The lock goes
// with the open file: closing it releases the lock.
func Lock(ctx context.Context, fd uintptr) error {
	for {
		err := syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
