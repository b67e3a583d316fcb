package blob

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// SyncMode is how a blob file is made durable before its rename. The
// default starts writeback of each chunk as it completes
// (sync_file_range(SYNC_FILE_RANGE_WRITE), which promises nothing by
// itself) and makes the file durable with fdatasync: the data and the
// metadata needed to read it (size, block map), but not the timestamps,
// which a blob does not need. The other modes exist so that benchmarks
// can measure what each step costs.
type SyncMode int

// The sync modes.
const (
	SyncEarly SyncMode = iota // sync_file_range per chunk, then fdatasync
	SyncData                  // fdatasync only
	SyncFull                  // fsync only
	SyncNone                  // benchmarks only: what durability costs
)

func (m SyncMode) writeback(f *os.File, off, n int64) {
	if m == SyncEarly {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}

func (m SyncMode) sync(f *os.File) error {
	switch m {
	case SyncFull:
		return f.Sync()
	case SyncNone:
		return nil
	}
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// preallocate reserves size bytes for f: a full disk fails now rather than
// mid-transfer, and the extents are laid out once. Filesystems without
// fallocate get a sparse file.
func preallocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return f.Truncate(size)
	}
	return err
}
