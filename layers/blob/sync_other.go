//go:build !linux

package blob

import "os"

// SyncMode is how a blob file is made durable before its rename.
type SyncMode int

// The sync modes.
const (
	SyncEarly SyncMode = iota
	SyncData
	SyncFull
	SyncNone
)

func (m SyncMode) writeback(f *os.File, off, n int64) {}

func (m SyncMode) sync(f *os.File) error {
	if m == SyncNone {
		return nil
	}
	return f.Sync()
}

func preallocate(f *os.File, size int64) error { return f.Truncate(size) }
