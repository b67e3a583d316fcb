//go:build !linux

package weights

import "os"

type syncMode int

const (
	syncEarly syncMode = iota
	syncData
	syncFull
	syncNone
)

func (p *puller) writeback(f *os.File, off, n int64) {}

func (p *puller) datasync(f *os.File) error { return f.Sync() }

func preallocate(f *os.File, size int64) error { return f.Truncate(size) }
