package weights

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// syncMode is how a staged file is made durable before its rename. The
// default starts writeback of each chunk as it completes
// (sync_file_range(SYNC_FILE_RANGE_WRITE), which promises nothing by
// itself) and makes the file durable with fdatasync: the data and the
// metadata needed to read it (size, block map), but not the timestamps,
// which a volume does not need. The other modes exist so that
// BenchmarkPullSync can measure what each step costs.
type syncMode int

const (
	syncEarly syncMode = iota // sync_file_range per chunk, then fdatasync
	syncData                  // fdatasync only
	syncFull                  // fsync only
	syncNone                  // benchmarks only: what durability costs
)

func (p *puller) writeback(f *os.File, off, n int64) {
	if p.opts.sync == syncEarly {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}

func (p *puller) datasync(f *os.File) error {
	switch p.opts.sync {
	case syncFull:
		return f.Sync()
	case syncNone:
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
