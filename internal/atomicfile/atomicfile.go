package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteFile writes b to path atomically with mode perm.
func WriteFile(path string, b []byte, perm os.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Commit()
}

// File is a temporary file that replaces its destination on Commit.
// Write to it as to any *os.File; call Abort (deferred) on every path:
// after Commit it does nothing.
type File struct {
	*os.File
	path   string
	perm   os.FileMode
	done   bool
	before func() error
}

// Option tunes Create.
type Option func(*createOptions)

type createOptions struct {
	prefix string
	before func() error
}

// WithPrefix names the temporary file PREFIX+BASE.*.tmp instead of
// .BASE.*.tmp: a writer whose scratch others must recognise (and whose
// stale scratch a later run removes) picks a prefix of its own. It
// should start with a dot.
func WithPrefix(prefix string) Option { return func(o *createOptions) { o.prefix = prefix } }

// BeforeRename runs check after the temporary file is complete and
// synced, just before it replaces the destination: an error leaves the
// destination as it is (the temporary file is removed) and is Commit's.
func BeforeRename(check func() error) Option { return func(o *createOptions) { o.before = check } }

// Create opens a temporary file next to path (named .BASE.*.tmp, so
// directory listings and globs of real names pass it over) that Commit
// will rename to path with mode perm (permission bits and setuid, setgid,
// sticky).
func Create(path string, perm os.FileMode, opts ...Option) (*File, error) {
	o := createOptions{prefix: "."}
	for _, opt := range opts {
		opt(&o)
	}
	f, err := os.CreateTemp(filepath.Dir(path), o.prefix+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	return &File{File: f, path: path, perm: perm, before: o.before}, nil
}

// IsTemp says whether a file name is a temporary file's as Create names
// them (.BASE.*.tmp, or a prefix of its own starting with a dot): what a
// killed writer leaves behind, not a real file.
func IsTemp(name string) bool {
	b := filepath.Base(name)
	return strings.HasPrefix(b, ".") && strings.HasSuffix(b, ".tmp")
}

// Commit flushes the file to disk, sets its mode, renames it to the
// destination and syncs the directory. On error the temporary file is
// removed and the destination is untouched (or, if only the directory sync
// failed, already replaced).
func (f *File) Commit() error {
	if f.done {
		return os.ErrClosed
	}
	f.done = true
	tmp := f.Name()
	err := f.Sync()
	if err == nil {
		err = f.Chmod(f.perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && f.before != nil {
		err = f.before()
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(f.path))
}

// Abort closes and removes the temporary file, leaving the destination as
// it was. After Commit it does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
}

// SyncDir fsyncs a directory, making renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Copy copies the file src to dst atomically with mode perm: the bytes go
// to a temporary file next to dst, are synced, and replace dst by rename,
// so dst is never seen half-written (and an existing dst is replaced).
func Copy(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := Create(dst, perm)
	if err != nil {
		return err
	}
	defer out.Abort()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	return out.Commit()
}
