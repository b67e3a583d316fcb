package atomicfile

import (
	"context"
	"errors"
	"os"
	"syscall"
)

// Lock takes an exclusive flock on path, creating the file if needed, and
// waits while another process holds it: onWait (if set) is called once
// when it has to wait, and ctx ends the wait. The lock file is never
// removed (a waiter would lock an unlinked inode); unlock releases it.
func Lock(ctx context.Context, path string, onWait func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil && (errors.Is(err, syscall.EROFS) || errors.Is(err, os.ErrPermission)) {
		// A read-only mount: an existing lock file can still be flocked
		// through a read-only descriptor.
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, err
	}
	// One try without waiting tells whether onWait is due; the wait itself
	// is LockFile's.
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR) {
		if onWait != nil {
			onWait()
		}
		err = LockFile(ctx, f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing releases the flock
}
