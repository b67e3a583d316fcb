package fatbin

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/continuity/sysx"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/localfile"
	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of the file PruneFile writes beside a
// library (.kiln-prune.BASE.*.tmp): what a killed prune leaves behind is
// recognised by it, never taken for a library (IsSharedObject), and
// removed by the next prune (IsStaleTemp).
const TempPrefix = ".kiln-prune."

// ErrChanged is PruneFile's error when the library was replaced or
// written while it was being pruned (a pip install, another prune): the
// new file is left as it is.
var ErrChanged = errors.New("changed while it was being pruned")

// IsPruneTemp says whether a file name is one PruneFile writes.
func IsPruneTemp(p string) bool {
	b := filepath.Base(p)
	return strings.HasPrefix(b, TempPrefix) && strings.HasSuffix(b, ".tmp")
}

// testHookBeforeCheck runs after the pruned copy is written, before the
// library is checked unchanged and replaced (tests replace it there).
var testHookBeforeCheck = func(path string) {}

// PruneFile prunes the shared library at path in place for the fleet: it is
// scanned, planned, written to a temporary file beside it (TempPrefix) and
// renamed over it, so an interrupted run leaves the old file or the new
// one, never half of each. The new file keeps the old one's permission
// bits with setuid, setgid and sticky, owner and group (when kiln may set
// them), extended attributes (file capabilities, SELinux labels; an
// attribute that cannot be set fails the file, which is then left as it
// is) and modification time. If the library was replaced or written
// while it was pruned (another inode, size, mtime or ctime at the path),
// it is left as it is and the error is ErrChanged. A file with nothing to
// prune is not touched; with dryRun nothing is. The plan is returned
// either way. Other hardlinks to the file keep the old content.
func PruneFile(path string, fleet []GPU, keepPTX, dryRun bool) (*Plan, error) {
	// Regular files only, opened non-blocking: a FIFO among the
	// libraries is refused, never waited on (internal/localfile).
	f, fi, err := localfile.OpenInfo(path, "library")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	scan, err := Scan(bufio.NewReaderSize(f, window))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := PlanFile(scan, fleet, keepPTX)
	if len(p.Edits) == 0 || dryRun {
		return p, nil
	}
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	mode := fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
	unchanged := func() error {
		testHookBeforeCheck(path)
		now, err := os.Lstat(path)
		if err != nil {
			return fmt.Errorf("%s: %w: %v", path, ErrChanged, err)
		}
		if !sameFile(fi, now) {
			return fmt.Errorf("%s: %w: left as it is (prune it again)", path, ErrChanged)
		}
		return nil
	}
	out, err := atomicfile.Create(path, mode, atomicfile.WithPrefix(TempPrefix), atomicfile.BeforeRename(unchanged))
	if err != nil {
		return nil, err
	}
	defer out.Abort()
	bw := bufio.NewWriterSize(out, window)
	n, err := Prune(bw, f, p)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("wrote %d of %d bytes", n, fi.Size())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if err := out.Chown(int(st.Uid), int(st.Gid)); err != nil && os.Geteuid() == 0 {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	// After the chown, which clears security.capability; Commit's chmod
	// then sets the setuid and setgid bits the chown cleared.
	if err := copyXattrs(out.Name(), path); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := out.Commit(); err != nil {
		if errors.Is(err, ErrChanged) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Times last: the rename does not change them, the writes did.
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		return nil, err
	}
	return p, nil
}

// sameFile says whether b is a still the file a was: same device and
// inode, size, modification and change time.
func sameFile(a, b os.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Size == sb.Size &&
		sa.Mtim == sb.Mtim && sa.Ctim == sb.Ctim
}

// copyXattrs gives dst src's extended attributes.
func copyXattrs(dst, src string) error {
	keys, err := sysx.LListxattr(src)
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing extended attributes: %w", err)
	}
	for _, k := range keys {
		v, err := sysx.LGetxattr(src, k)
		if err != nil {
			return fmt.Errorf("reading extended attribute %s: %w", k, err)
		}
		if err := sysx.LSetxattr(dst, k, v, 0); err != nil {
			return fmt.Errorf("cannot keep extended attribute %s (%v): left as it is", k, err)
		}
	}
	return nil
}
