package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// OCILayout is a host-side OCI image layout cache: blobs land in
// DIR/blobs/sha256 by atomic rename after their digest was verified,
// unfinished blobs wait in DIR/.kiln-partial for the next run, and each
// warmed image is an index.json entry named by its reference
// (org.opencontainers.image.ref.name and io.containerd.image.name), so
// `ctr images import` or a mirror can serve it.
type OCILayout struct {
	Dir string
}

// Annotations that name an image in a layout.
const (
	annRefName        = "org.opencontainers.image.ref.name"
	annContainerdName = "io.containerd.image.name"
)

// NewOCILayout opens (creating if needed) the layout at dir.
func NewOCILayout(dir string) (*OCILayout, error) {
	for _, d := range []string{filepath.Join(dir, "blobs", "sha256"), filepath.Join(dir, ".kiln-partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("target oci:%s: %v", dir, err)
		}
	}
	l := &OCILayout{Dir: dir}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); errors.Is(err, os.ErrNotExist) {
		if err := atomicfile.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
			return nil, fmt.Errorf("target oci:%s: %v", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); errors.Is(err, os.ErrNotExist) {
		// Under the index lock: a concurrent run may be recording.
		err := l.updateIndex(context.Background(), func(*ocispec.Index) {})
		if err != nil {
			return nil, err
		}
	}
	return l, nil
}

// updateIndex changes index.json under an exclusive lock (concurrent runs
// on one layout each merge their entries into what is there now) and
// replaces it atomically. A missing index.json reads as an empty one.
func (l *OCILayout) updateIndex(ctx context.Context, change func(*ocispec.Index)) error {
	unlock, err := atomicfile.Lock(ctx, filepath.Join(l.Dir, ".kiln-partial", "index.lock"), nil)
	if err != nil {
		return fmt.Errorf("target %s: index.json lock: %v", l, err)
	}
	defer unlock()
	p := filepath.Join(l.Dir, "index.json")
	var idx ocispec.Index
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("target %s: %v", l, err)
	default:
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("target %s: index.json: %v", l, err)
		}
	}
	change(&idx)
	if idx.SchemaVersion == 0 {
		idx.Versioned = specsVersioned()
	}
	if idx.MediaType == "" {
		idx.MediaType = ocispec.MediaTypeImageIndex
	}
	if idx.Manifests == nil {
		idx.Manifests = []ocispec.Descriptor{}
	}
	out, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p, out, 0o644); err != nil {
		return fmt.Errorf("target %s: index.json: %v", l, err)
	}
	return nil
}

func (l *OCILayout) String() string { return "oci:" + l.Dir }

// Close implements Target.
func (l *OCILayout) Close() error { return nil }

func (l *OCILayout) blobPath(d digest.Digest) string {
	return filepath.Join(l.Dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// Has implements Target: a blob is present when its file has the
// descriptor's size and its bytes hash to its digest. Hashing the whole
// cache on every run would cost as much as reading it, so each blob kiln
// verified (everything it commits, and every blob Has hashed) is recorded
// in .kiln-partial/verified/HEX with its file's identity: device, inode,
// size, mtime and ctime. A file that changed since (rewritten, corrupted
// in place) or that kiln never verified (placed by another tool) is hashed
// again, and a corrupted one is missing: it is fetched again, never READY.
func (l *OCILayout) Has(ctx context.Context, d ocispec.Descriptor) (bool, error) {
	if err := d.Digest.Validate(); err != nil {
		return false, fmt.Errorf("blob %q: %v", d.Digest, err)
	}
	p := l.blobPath(d.Digest)
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Size() != d.Size {
		return false, nil
	}
	if b, err := os.ReadFile(l.stampPath(d.Digest)); err == nil && string(b) == fileStamp(fi) {
		return true, nil
	}
	h, err := v1.NewHash(d.Digest.String())
	if err != nil {
		return false, fmt.Errorf("blob %q: %v", d.Digest, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	vr, err := layers.NewVerifyReader(f, h, d.Size)
	if err != nil {
		return false, err
	}
	if err := vr.Drain(); err != nil {
		if layers.IsIntegrityError(err) {
			return false, nil
		}
		return false, fmt.Errorf("target %s: verifying blob %s: %v", l, d.Digest, err)
	}
	// Stamp what was hashed (the open file), not whatever the path names now.
	if fi, err := f.Stat(); err == nil {
		l.stamp(d.Digest, fi)
	}
	return true, nil
}

func (l *OCILayout) stampPath(d digest.Digest) string {
	return filepath.Join(l.Dir, ".kiln-partial", "verified", d.Encoded())
}

// stamp records that the file fi describes was verified as d. A failure
// only costs a hash on the next run.
func (l *OCILayout) stamp(d digest.Digest, fi os.FileInfo) {
	p := l.stampPath(d)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
		_ = atomicfile.WriteFile(p, []byte(fileStamp(fi)), 0o644)
	}
}

// fileStamp is a file's identity and its last change: rewriting the file
// or its bytes changes ctime, which no user-level tool can set back.
func fileStamp(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("v1 %d %d %d %d.%09d %d.%09d\n", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// Free implements Target.
func (l *OCILayout) Free(ctx context.Context) (string, int64, error) {
	n, err := statfsFree(l.Dir)
	return l.Dir, n, err
}

// Writer implements Target.
func (l *OCILayout) Writer(ctx context.Context, d ocispec.Descriptor) (Writer, error) {
	if d.Digest.Algorithm() != digest.SHA256 {
		return nil, fmt.Errorf("blob %s: unsupported digest algorithm", d.Digest)
	}
	f, p, err := l.lockPartial(ctx, d)
	if err != nil {
		return nil, err
	}
	// The blob may be committed (also by the writer we waited for; then
	// the partial file is the empty one this open created).
	if ok, err := l.Has(ctx, d); err != nil || ok {
		if err == nil {
			os.Remove(p)
			err = ErrAlreadyExists
		}
		f.Close()
		return nil, err
	}
	w := &ociWriter{l: l, d: d, f: f, path: p, h: digest.SHA256.Hash()}
	// Resume: re-hash what an earlier run wrote (as containerd does).
	n, err := io.Copy(w.h, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("target %s: blob %s: reading partial: %v", l, d.Digest, err)
	}
	if n > d.Size {
		if err := w.reset(); err != nil {
			f.Close()
			return nil, err
		}
		n = 0
	}
	w.n = n
	return w, nil
}

// lockPartial opens d's partial file and locks it: one writer per blob
// across processes, a second kiln warm on the same layout waits its turn
// rather than interleaving bytes or failing. The file it waited on may
// have been committed (renamed into blobs/) or aborted (removed) meanwhile:
// then the lock is on a file no longer at the partial path, and it opens
// that path again.
func (l *OCILayout) lockPartial(ctx context.Context, d ocispec.Descriptor) (*os.File, string, error) {
	p := filepath.Join(l.Dir, ".kiln-partial", d.Digest.Encoded())
	for {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, "", fmt.Errorf("target %s: blob %s: %v", l, d.Digest, err)
		}
		if err := atomicfile.LockFile(ctx, f); err != nil {
			f.Close()
			return nil, "", fmt.Errorf("target %s: blob %s: waiting for another writer: %v", l, d.Digest, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(p)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, p, nil
		}
		f.Close()
		if err1 != nil {
			return nil, "", fmt.Errorf("target %s: blob %s: %v", l, d.Digest, err1)
		}
	}
}

type ociWriter struct {
	l    *OCILayout
	d    ocispec.Descriptor
	f    *os.File
	path string
	h    hash.Hash
	n    int64
}

func (w *ociWriter) reset() error {
	if err := w.f.Truncate(0); err != nil {
		return err
	}
	_, err := w.f.Seek(0, io.SeekStart)
	w.h.Reset()
	w.n = 0
	return err
}

func (w *ociWriter) Offset() int64 { return w.n }

func (w *ociWriter) Write(p []byte) (int, error) {
	if w.n+int64(len(p)) > w.d.Size {
		return 0, fmt.Errorf("blob %s: %w: more than the %d bytes its descriptor names", w.d.Digest, layers.ErrSizeMismatch, w.d.Size)
	}
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("target %s: writing blob %s: %w", w.l, w.d.Digest, err)
	}
	return n, nil
}

func (w *ociWriter) Commit(ctx context.Context) error {
	defer w.f.Close()
	if w.n != w.d.Size {
		return fmt.Errorf("blob %s: %w: got %d bytes, descriptor says %d", w.d.Digest, layers.ErrSizeMismatch, w.n, w.d.Size)
	}
	if got := digest.NewDigest(digest.SHA256, w.h); got != w.d.Digest {
		return fmt.Errorf("blob %s: %w: content hashes to %s", w.d.Digest, layers.ErrDigestMismatch, got)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("target %s: blob %s: %w", w.l, w.d.Digest, err)
	}
	dst := w.l.blobPath(w.d.Digest)
	if err := os.Rename(w.path, dst); err != nil {
		return fmt.Errorf("target %s: blob %s: %w", w.l, w.d.Digest, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	// Verified as written: Has need not hash it again.
	if fi, err := w.f.Stat(); err == nil {
		w.l.stamp(w.d.Digest, fi)
	}
	return nil
}

func (w *ociWriter) Close() error { return w.f.Close() }

func (w *ociWriter) Abort(ctx context.Context) error {
	// Remove while still holding the lock, so a waiting writer never
	// takes over a file that is about to vanish.
	err := os.Remove(w.path)
	w.f.Close()
	return err
}

// Record implements Target: one index.json entry per image, pointing at its
// platform manifest (a complete graph: importers and mirrors need every
// child of what index.json names), replacing an earlier entry of the same
// name.
func (l *OCILayout) Record(ctx context.Context, s *Set) error {
	return l.updateIndex(ctx, func(idx *ocispec.Index) {
		for _, img := range s.Images {
			idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
				return d.Annotations[annRefName] == img.Name || d.Annotations[annContainerdName] == img.Name
			})
			d := img.Manifest
			d.Annotations = map[string]string{annRefName: img.Name, annContainerdName: img.Name}
			idx.Manifests = append(idx.Manifests, d)
		}
	})
}

// Verify implements Verifier: every image has its index.json entry.
func (l *OCILayout) Verify(ctx context.Context, s *Set) error {
	b, err := os.ReadFile(filepath.Join(l.Dir, "index.json"))
	if err != nil {
		return err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("target %s: index.json: %v", l, err)
	}
	for _, img := range s.Images {
		if !slices.ContainsFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
			return d.Annotations[annRefName] == img.Name && d.Digest == img.Manifest.Digest
		}) {
			return fmt.Errorf("target %s: index.json has no entry %s → %s", l, img.Name, img.Manifest.Digest)
		}
	}
	return nil
}

// ExistingImages lists the names index.json holds (status, tests).
func (l *OCILayout) ExistingImages() (map[string]digest.Digest, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, "index.json"))
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, err
	}
	out := map[string]digest.Digest{}
	for _, d := range idx.Manifests {
		if n := d.Annotations[annRefName]; n != "" {
			out[n] = d.Digest
		}
	}
	return out, nil
}

func specsVersioned() specs.Versioned { return specs.Versioned{SchemaVersion: 2} }
