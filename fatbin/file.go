package fatbin

import (
	"bufio"
	"fmt"
	"os"
	"syscall"

	"github.com/kiln-build/kiln/internal/atomicfile"
)

// PruneFile prunes the shared library at path in place for the fleet: it is
// scanned, planned, written to a temporary file beside it (mode, owner and
// modification time kept) and renamed over it, so an interrupted run leaves
// the old file or the new one, never half of each. A file with nothing to
// prune is not touched; with dryRun nothing is. The plan is returned
// either way. Other hardlinks to the file keep the old content.
func PruneFile(path string, fleet []GPU, keepPTX, dryRun bool) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
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
	out, err := atomicfile.Create(path, fi.Mode().Perm())
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
	if err := out.Commit(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Times last: the rename does not change them, the writes did.
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		return nil, err
	}
	return p, nil
}
