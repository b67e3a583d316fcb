package ocilayout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/warm"
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

// New opens (creating if needed) the layout at dir.
func New(dir string) (*OCILayout, error) {
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

// maxIndex is the largest index.json updateIndex writes: the bound every
// reader of a layout holds it to (a variable for tests).
var maxIndex = localfile.MaxIndex

// updateIndex changes index.json under an exclusive lock (concurrent runs
// on one layout each merge their entries into what is there now) and
// replaces it atomically. A missing index.json reads as an empty one.
func (l *OCILayout) updateIndex(ctx context.Context, change func(*ocispec.Index)) error {
	unlock, err := atomicfile.Lock(ctx, filepath.Join(l.Dir, ".kiln-partial", indexLock), nil)
	if err != nil {
		return fmt.Errorf("target %s: index.json lock: %v", l, err)
	}
	defer unlock()
	p := filepath.Join(l.Dir, "index.json")
	var idx ocispec.Index
	b, err := localfile.ReadFile(p, "index.json", localfile.MaxIndex)
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
	if len(out) > maxIndex {
		// Written, it could not be read back (kiln's bound on an index,
		// against a hostile one): the old index.json stays.
		return fmt.Errorf("target %s: index.json would hold %d entries in %s, over the %s kiln reads back; it is left as it was: warm into another oci: directory, or remove old images from this one", l, len(idx.Manifests), bytesize.Format(int64(len(out))), bytesize.Format(int64(maxIndex)))
	}
	if err := atomicfile.WriteFile(p, out, 0o644); err != nil {
		return fmt.Errorf("target %s: index.json: %v", l, err)
	}
	return nil
}

func (l *OCILayout) String() string { return "oci:" + l.Dir }

// Close implements Target.
func (l *OCILayout) Close() error { return nil }

// blobs is the layout's blob store: blobs/sha256 and .kiln-partial (the
// one resumable, verifying, locked ingest kiln has; see blob.Dir).
func (l *OCILayout) blobs() blob.Dir {
	return blob.Dir{Root: filepath.Join(l.Dir, "blobs", "sha256"), Partial: filepath.Join(l.Dir, ".kiln-partial"), Stamps: true}
}

func hashOf(d digest.Digest) (v1.Hash, error) {
	if d.Algorithm() != digest.SHA256 {
		return v1.Hash{}, fmt.Errorf("blob %s: unsupported digest algorithm", d)
	}
	return v1.NewHash(d.String())
}

func (l *OCILayout) blobPath(d digest.Digest) string {
	return filepath.Join(l.Dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// Held implements warm.Stage: the bytes of d committed or left in a
// partial file by an unfinished writer.
func (l *OCILayout) Held(d ocispec.Descriptor) int64 {
	h, err := hashOf(d.Digest)
	if err != nil {
		return 0
	}
	return l.blobs().Held(h, d.Size)
}

// Open implements warm.Stage: the committed blob d, as it lies on disk
// (the reader verifies it).
func (l *OCILayout) Open(d ocispec.Descriptor) (io.ReadCloser, error) {
	h, err := hashOf(d.Digest)
	if err != nil {
		return nil, err
	}
	return os.Open(l.blobs().Path(h))
}

// Remove implements warm.Stage: blob d goes, committed or partial.
func (l *OCILayout) Remove(d ocispec.Descriptor) error {
	h, err := hashOf(d.Digest)
	if err != nil {
		return err
	}
	return l.blobs().Remove(h)
}

// indexLock is the lock file of index.json updates, in .kiln-partial.
const indexLock = "index.lock"

// RemoveIfEmpty removes the whole layout when it holds no blob, committed
// or partial (a stage another warm does not share); a layout that does,
// or that cannot be read, is kept.
func (l *OCILayout) RemoveIfEmpty() error {
	if empty, err := l.blobs().Empty(indexLock); err != nil || !empty {
		return nil
	}
	return os.RemoveAll(l.Dir)
}

// Has implements Target: a blob is present when its file has the
// descriptor's size and its bytes hash to its digest. Hashing the whole
// cache on every run would cost as much as reading it, so each blob kiln
// verified is stamped with its file's identity (blob.Dir.Has): a file
// that changed since (rewritten, corrupted in place) or that kiln never
// verified (placed by another tool) is hashed again, and a corrupted one
// is missing: it is fetched again, never READY.
func (l *OCILayout) Has(ctx context.Context, d ocispec.Descriptor) (bool, error) {
	if err := d.Digest.Validate(); err != nil {
		return false, fmt.Errorf("blob %q: %v", d.Digest, err)
	}
	h, err := hashOf(d.Digest)
	if err != nil {
		return false, err
	}
	ok, err := l.blobs().Has(ctx, h, d.Size)
	if err != nil {
		return false, fmt.Errorf("target %s: %v", l, err)
	}
	return ok, nil
}

// Free implements Target.
func (l *OCILayout) Free(ctx context.Context) (string, int64, error) {
	n, err := preflight.Free(l.Dir)
	return l.Dir, n, err
}

// Writer implements Target: blob.Dir's writer, which waits for another
// writer of the blob (one per blob across processes), resumes what an
// earlier run left and verifies before the rename.
func (l *OCILayout) Writer(ctx context.Context, d ocispec.Descriptor) (blob.Writer, error) {
	h, err := hashOf(d.Digest)
	if err != nil {
		return nil, err
	}
	w, err := l.blobs().Writer(ctx, h, d.Size)
	if err != nil {
		if errors.Is(err, blob.ErrAlreadyExists) {
			return nil, err
		}
		return nil, fmt.Errorf("target %s: %w", l, err)
	}
	return w, nil
}

// Record implements Target: one index.json entry per image, pointing at its
// platform manifest (a complete graph: importers and mirrors need every
// child of what index.json names), replacing an earlier entry of the same
// name.
func (l *OCILayout) Record(ctx context.Context, s *warm.Set) error {
	return l.updateIndex(ctx, func(idx *ocispec.Index) {
		idx.Manifests = recordEntries(idx.Manifests, s.Images)
	})
}

// indexVisits counts the index entries Record and Verify examine: each
// looks at every entry once, whatever the number of images (D16: one pass
// per image made a 20,000-entry layout take 17 s).
var indexVisits atomic.Int64

// recordEntries is manifests less the entries named like one of imgs,
// followed by one entry per image name (the last image of a name wins).
func recordEntries(manifests []ocispec.Descriptor, imgs []warm.Image) []ocispec.Descriptor {
	last := make(map[string]int, len(imgs))
	for i, img := range imgs {
		last[img.Name] = i
	}
	manifests = slices.DeleteFunc(manifests, func(d ocispec.Descriptor) bool {
		indexVisits.Add(1)
		_, ref := last[d.Annotations[annRefName]]
		_, ctr := last[d.Annotations[annContainerdName]]
		return ref || ctr
	})
	for i, img := range imgs {
		if last[img.Name] != i {
			continue
		}
		d := img.Manifest
		d.Annotations = map[string]string{annRefName: img.Name, annContainerdName: img.Name}
		manifests = append(manifests, d)
	}
	return manifests
}

// Verify implements Verifier: every image has its index.json entry.
func (l *OCILayout) Verify(ctx context.Context, s *warm.Set) error {
	b, err := localfile.ReadFile(filepath.Join(l.Dir, "index.json"), "index.json", localfile.MaxIndex)
	if err != nil {
		return err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("target %s: index.json: %v", l, err)
	}
	type entry struct {
		name string
		dg   digest.Digest
	}
	has := make(map[entry]bool, len(idx.Manifests))
	for _, d := range idx.Manifests {
		indexVisits.Add(1)
		has[entry{d.Annotations[annRefName], d.Digest}] = true
	}
	for _, img := range s.Images {
		if !has[entry{img.Name, img.Manifest.Digest}] {
			return fmt.Errorf("target %s: index.json has no entry %s → %s", l, img.Name, img.Manifest.Digest)
		}
	}
	return nil
}

// ExistingImages lists the names index.json holds (status, tests).
func (l *OCILayout) ExistingImages() (map[string]digest.Digest, error) {
	b, err := localfile.ReadFile(filepath.Join(l.Dir, "index.json"), "index.json", localfile.MaxIndex)
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

// The roles OCILayout plays, checked at compile time: a target that silently
// lost one would still run, without its guarantee.
var (
	_ warm.Store    = (*OCILayout)(nil)
	_ warm.Verifier = (*OCILayout)(nil)
	_ warm.Opener   = (*OCILayout)(nil)
	_ blob.Writer   = (*blob.FileWriter)(nil)
)
