// Package preflight checks, before a command does its heavy work, what it
// will need at the end of it: a destination it can write (a registry that
// answers and takes a push, a directory it can create files in), a
// BuildKit daemon, free disk for its scratch files. A mistake found here
// costs a second; found after a rewrite of a CUDA image, it costs minutes.
//
// kiln build, slim, warm and weights use these; each error names what was
// checked and what to do.
package preflight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kiln-build/kiln/internal/bytesize"
)

// ErrNoSpace is wrapped by Disk's error when the file system is too full.
var ErrNoSpace = errors.New("not enough disk space")

// Free is the space an unprivileged writer can use on dir's file system.
func Free(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Disk checks that dir's file system (or, when dir does not exist yet, the
// file system of its nearest existing parent) has need bytes free; what
// says what they are for.
func Disk(dir string, need int64, what string) error {
	return Disks(Need{Dir: dir, Bytes: need, What: what})
}

// Need is what one part of a job will write: Bytes into Dir, for What.
type Need struct {
	Dir   string
	Bytes int64
	What  string
}

// Disks checks several needs at once: those whose directories share a
// file system are added up (a work directory and an oci: destination on
// one disk need both their bytes there), and each file system must have
// its total free. The error names every need on the file system short of
// space.
func Disks(needs ...Need) error {
	type fsNeed struct {
		total int64
		free  int64
		parts []Need
	}
	var order []uint64
	byDev := map[uint64]*fsNeed{}
	for _, n := range needs {
		d := existingParent(n.Dir)
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("%s: %v", n.Dir, err)
		}
		f := byDev[st.Dev]
		if f == nil {
			free, err := Free(d)
			if err != nil {
				return fmt.Errorf("%s: %v", n.Dir, err)
			}
			f = &fsNeed{free: free}
			byDev[st.Dev] = f
			order = append(order, st.Dev)
		}
		f.total += n.Bytes
		f.parts = append(f.parts, n)
	}
	for _, dev := range order {
		f := byDev[dev]
		if f.free >= f.total {
			continue
		}
		if len(f.parts) == 1 {
			n := f.parts[0]
			return fmt.Errorf("%w in %s: %s needs about %s, %s free; free some space or point it elsewhere", ErrNoSpace, n.Dir, n.What, bytesize.Format(n.Bytes), bytesize.Format(f.free))
		}
		var parts []string
		for _, n := range f.parts {
			parts = append(parts, fmt.Sprintf("%s %s in %s", n.What, bytesize.Format(n.Bytes), n.Dir))
		}
		return fmt.Errorf("%w: one file system holds %s: about %s in all, %s free; free some space or point one of them elsewhere", ErrNoSpace, strings.Join(parts, " and "), bytesize.Format(f.total), bytesize.Format(f.free))
	}
	return nil
}

// existingParent is dir, or its nearest ancestor that exists.
func existingParent(dir string) string {
	d, err := filepath.Abs(dir)
	if err != nil {
		d = dir
	}
	for {
		if _, err := os.Stat(d); err == nil {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			return d
		}
		d = p
	}
}

// Writable checks that a file can be created in dir, or, when dir does not
// exist yet, in its nearest existing parent (where dir would be made).
// Nothing is left behind.
func Writable(dir string) error {
	d := existingParent(dir)
	if fi, err := os.Stat(d); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is a file, not a directory", d)
	}
	f, err := os.CreateTemp(d, ".kiln-preflight-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %v", d, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}
