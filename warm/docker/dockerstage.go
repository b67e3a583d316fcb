package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/ocilayout"
	"github.com/opencontainers/go-digest"
)

// DefaultStage is where the docker target stages layers by default:
// /var/cache/kiln/docker-stage for root (a system cache, like the engine's
// own data), else $XDG_CACHE_HOME/kiln/docker-stage (~/.cache when unset).
func DefaultStage() string {
	if os.Geteuid() == 0 {
		return "/var/cache/kiln/docker-stage"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "kiln", "docker-stage")
	}
	return filepath.Join(os.TempDir(), "kiln-docker-stage")
}

// dockerStage is the staging area of one warm: an OCILayout, so layers get
// the oci: target's machinery (resumable .kiln-partial files, parallel
// Range chunks, digest verified at commit, atomic rename) before docker
// load reads them from disk. A killed warm leaves the bytes for the next.
type dockerStage struct {
	dir    string
	layout *ocilayout.OCILayout
}

func openDockerStage(dir string) (*dockerStage, error) {
	l, err := ocilayout.New(dir)
	if err != nil {
		return nil, fmt.Errorf("--docker-stage %s: %v", dir, err)
	}
	return &dockerStage{dir: dir, layout: l}, nil
}

// held is how many bytes of b the stage already holds (committed, or an
// earlier run's partial file), for the disk preflight.
func (st *dockerStage) held(b *warm.Blob) int64 {
	if fi, err := os.Stat(st.layout.BlobPath(b.Digest)); err == nil && fi.Size() == b.Size {
		return b.Size
	}
	if fi, err := os.Stat(filepath.Join(st.dir, ".kiln-partial", b.Digest.Encoded())); err == nil {
		return min(fi.Size(), b.Size)
	}
	return 0
}

// fetch stages blobs with Warm on the layout (the same fetch engine as the
// oci: target) and folds each blob's outcome into rep: bytes fetched,
// resumed offset and seconds; a staged blob stays "missing" until the
// engine has loaded it.
func (st *dockerStage) fetch(ctx context.Context, blobs []*warm.Blob, s *warm.Set, o warm.Options, rep *warm.Report) error {
	if len(blobs) == 0 {
		return nil
	}
	o.DryRun, o.Unpack, o.SkipSpaceCheck = false, false, true
	sub, err := warm.Warm(ctx, &warm.Set{Blobs: blobs}, st.layout, o)
	for _, br := range sub.Blobs {
		_, bi := s.Blob(digest.Digest(br.Digest))
		r := &rep.Blobs[bi]
		r.BytesFetched += br.BytesFetched
		if r.Resumed == 0 {
			r.Resumed = br.Resumed
		}
		r.Seconds += br.Seconds
		rep.FetchedBytes += br.BytesFetched
		switch br.State {
		case warm.StateFailed:
			r.State, r.Error = warm.StateFailed, br.Error
		case warm.StateFetched, warm.StateWritten, warm.StatePresent:
			r.State, r.Error = warm.StateMissing, ""
		}
	}
	if err != nil {
		return fmt.Errorf("staging %d layer(s) in %s: %v (nothing was loaded; staged bytes are kept for the next run)", len(blobs), st.dir, err)
	}
	return nil
}

// remove deletes the set's layers from the stage after the engine loaded
// them, then the stage itself when nothing else is staged there (another
// warm may share it).
func (st *dockerStage) remove(s *warm.Set) error {
	for _, b := range s.Blobs {
		if b.Kind != warm.KindLayer {
			continue
		}
		for _, p := range []string{st.layout.BlobPath(b.Digest), filepath.Join(st.dir, ".kiln-partial", b.Digest.Encoded()), filepath.Join(st.dir, ".kiln-partial", b.Digest.Encoded()+blob.RangesSuffix), st.layout.StampPath(b.Digest)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	for _, d := range []string{filepath.Join(st.dir, "blobs", "sha256"), filepath.Join(st.dir, ".kiln-partial"), filepath.Join(st.dir, ".kiln-partial", "verified")} {
		es, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil
		}
		for _, e := range es {
			// The layout's own bookkeeping is not someone else's bytes.
			if n := e.Name(); d != filepath.Join(st.dir, ".kiln-partial") || (n != "index.lock" && n != "verified") {
				return nil // someone else's bytes: keep the stage
			}
		}
	}
	return os.RemoveAll(st.dir)
}

// sameDevice says whether two existing paths are on one file system (the
// preflight adds their needs).
func sameDevice(a, b string) bool {
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev
}
