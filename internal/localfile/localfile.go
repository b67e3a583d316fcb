// Package localfile is kiln's one rule for reading a file a user or an
// image layout names: keys, policies, recipes, locks, host lists, layout
// indexes and blobs.
//
// Invariants:
//   - Only regular files are read where a file is expected. A named pipe,
//     a device (/dev/zero), a socket or a directory is refused by name,
//     before any read: a FIFO is opened non-blocking, so opening it never
//     waits for a writer, and a signal always ends kiln.
//   - Every whole-file read has a size bound per kind (Max*): a file larger
//     than the bound is refused from its size, without reading it, and a
//     file that grows while it is read is cut at the bound and refused.
package localfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/kiln-build/kiln/internal/bytesize"
)

// Size bounds per kind of file.
const (
	MaxKey      = 1 << 20  // a PEM or cosign key
	MaxPolicy   = 4 << 20  // a signature or slim policy, analyze rules
	MaxConfig   = 16 << 20 // a recipe, lock, hosts file, list
	MaxIndex    = 64 << 20 // an OCI layout's index.json, a manifest
	MaxManifest = 64 << 20
)

// ErrNotRegular is returned (wrapped) for a path that is not a regular
// file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned (wrapped) for a file over its kind's bound.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading when it is a regular file. what names the
// file's role in errors ("key", "policy", "index.json").
func Open(path, what string) (*os.File, error) {
	f, _, err := OpenInfo(path, what)
	return f, err
}

// OpenInfo is Open that also returns the file's FileInfo, from the one
// fstat that checked it.
func OpenInfo(path, what string) (*os.File, fs.FileInfo, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s %s: %w (%s); give the path of a file", what, path, ErrNotRegular, kind(fi.Mode()))
	}
	// Regular files ignore O_NONBLOCK; cleared for what reads f later.
	if err := syscall.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// ReadFile reads the regular file path whole, refusing it when it is
// larger than max bytes.
func ReadFile(path, what string, max int64) ([]byte, error) {
	f, fi, err := OpenInfo(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, tooLarge(path, what, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, tooLarge(path, what, int64(len(b)), max)
	}
	return b, nil
}

func tooLarge(path, what string, n, max int64) error {
	return fmt.Errorf("%s %s: %w: %s, a %s is at most %s", what, path, ErrTooLarge, bytesize.Format(n), what, bytesize.Format(max))
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}
