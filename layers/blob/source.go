package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/registry"
)

// Source reads a blob's bytes [off, off+n); n < 0 means to the end. The
// bytes are not verified here: the caller verifies the whole blob.
type Source interface {
	Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error)
}

// ErrNotFound is returned (wrapped) when a local source has no such blob.
var ErrNotFound = errors.New("blob not found")

var (
	_ Source = (*registry.Client)(nil)
	_ Source = Layout{}
	_ Source = Sections{}
)

// CheckDigest refuses a digest that is not sha256 with 64 lowercase hex
// digits: such a digest never names a file.
func CheckDigest(dg v1.Hash) error {
	if dg.Algorithm != "sha256" || len(dg.Hex) != 64 {
		return fmt.Errorf("blob %s: not a sha256 digest", dg)
	}
	for _, c := range dg.Hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("blob %s: not a sha256 digest", dg)
		}
	}
	return nil
}

// Layout reads blobs from an OCI image layout directory.
type Layout struct{ Dir string }

// Path is where the layout keeps blob dg (dg must pass CheckDigest).
func (l Layout) Path(dg v1.Hash) string {
	return filepath.Join(l.Dir, "blobs", dg.Algorithm, dg.Hex)
}

// Open implements Source.
func (l Layout) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	if err := CheckDigest(dg); err != nil {
		return nil, err
	}
	// Opened non-blocking and checked: a FIFO in a layout is refused,
	// never waited on.
	f, err := localfile.Open(l.Path(dg), "blob")
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("blob %s: %w in %s", dg, ErrNotFound, l.Dir)
		}
		return nil, fmt.Errorf("blob %s: %v", dg, err)
	}
	return section(f, f, off, n)
}

// Section is a blob stored at Off in a file (a docker archive's member).
type Section struct {
	R    io.ReaderAt
	Off  int64
	Size int64
}

// Sections reads blobs stored as sections of local files, by digest.
type Sections map[v1.Hash]Section

// Open implements Source.
func (s Sections) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	sec, ok := s[dg]
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", dg, ErrNotFound)
	}
	if off < 0 || off > sec.Size || (n >= 0 && off+n > sec.Size) {
		return nil, fmt.Errorf("blob %s: range %d+%d is outside its %d bytes", dg, off, n, sec.Size)
	}
	if n < 0 {
		n = sec.Size - off
	}
	return io.NopCloser(io.NewSectionReader(sec.R, sec.Off+off, n)), nil
}

// section returns [off, off+n) of f (n < 0: to the end), closing c.
func section(f io.ReadSeeker, c io.Closer, off, n int64) (io.ReadCloser, error) {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		c.Close()
		return nil, err
	}
	if n < 0 {
		return struct {
			io.Reader
			io.Closer
		}{f, c}, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, n), c}, nil
}

// ReadVerified reads a small blob (a manifest, config or volume manifest)
// whole, and checks it against dg and size; limit bounds what is read.
func ReadVerified(ctx context.Context, src Source, dg v1.Hash, size, limit int64) ([]byte, error) {
	if size > limit {
		return nil, fmt.Errorf("blob %s: %d bytes, more than the %d kiln reads for it", dg, size, limit)
	}
	if size < 0 {
		return nil, fmt.Errorf("blob %s: negative size %d", dg, size)
	}
	rc, err := src.Open(ctx, dg, 0, size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	vr, err := registry.NewVerifyReader(rc, dg, size)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(vr)
}

// FileDigest is the sha256 of a local file, streamed.
func FileDigest(path string) (v1.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	h, _, err := v1.SHA256(f)
	return h, err
}
