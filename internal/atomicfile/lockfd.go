package atomicfile

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// LockFile takes an exclusive flock on the open file f, waiting (until
// ctx ends) while another open file holds it: for files that are written
// through the locked descriptor and may be renamed or removed by the
// holder, so the caller checks after locking that f is still the file its
// path names. Closing f releases the lock.
func LockFile(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}
