package atomicfile

import (
	"io"
	"os"
	"path/filepath"
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
	path string
	perm os.FileMode
	done bool
}

// Create opens a temporary file next to path (named .BASE.*.tmp, so
// directory listings and globs of real names pass it over) that Commit
// will rename to path with mode perm.
func Create(path string, perm os.FileMode) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	return &File{File: f, path: path, perm: perm}, nil
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
