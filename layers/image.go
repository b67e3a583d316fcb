package layers

import (
	"context"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/registry"
)

// Image is one platform's image, opened from any source: its manifest,
// config and layers, with each layer's bytes still unread.
type Image struct {
	Ref Ref
	// Digest is the manifest digest (for docker archives, which have no
	// manifest, the config digest).
	Digest v1.Hash
	// Platform is the platform that was selected (from the config).
	Platform  v1.Platform
	MediaType types.MediaType
	Config    *v1.ConfigFile
	// RawConfig is the config blob as stored; its digest was verified.
	RawConfig []byte
	// RawManifest is the manifest as stored (its digest is Digest); nil for
	// docker archives, which have none.
	RawManifest []byte
	Layers      []*Layer
	// Mirror is the registry mirror the image was read through ("" for
	// its own registry and local sources).
	Mirror string
	// Names are the image's names in its source when it has several
	// (a docker archive's RepoTags), as stored.
	Names []string

	closers []io.Closer
}

// Close releases files held open by a local image.
func (img *Image) Close() error {
	var errs []error
	for _, c := range img.closers {
		errs = append(errs, c.Close())
	}
	img.closers = nil
	return errors.Join(errs...)
}

// CompressedSize is the sum of the layer blobs' sizes (what a pull moves).
func (img *Image) CompressedSize() int64 {
	var n int64
	for _, l := range img.Layers {
		n += l.Size
	}
	return n
}

// Layer is one layer of an Image. Its bytes are read by Walk.
type Layer struct {
	Index int
	// Digest names the blob as stored (compressed). For docker archives it
	// is the diff ID when the layer is stored uncompressed.
	Digest    v1.Hash
	DiffID    v1.Hash
	MediaType types.MediaType
	// Size is the blob's size as stored.
	Size int64
	// CreatedBy is the history entry that made the layer, when recorded.
	CreatedBy string

	// open returns the raw blob. remote: it comes from a registry, and is
	// verified even when the walk is told to trust local blobs.
	open   func(ctx context.Context) (io.ReadCloser, error)
	remote bool
	// file, off: a local file holding the blob at off (layouts, archives);
	// such blobs can be read with ReadAt and seeked.
	file io.ReaderAt
	off  int64
	// verifyDiffID: the stored digest is unknown, so verify the
	// uncompressed stream against the diff ID instead (docker archives).
	verifyDiffID bool
}

// attachHistory sets CreatedBy from the config's history, skipping entries
// that made no layer.
func attachHistory(cfg *v1.ConfigFile, ls []*Layer) {
	if cfg == nil {
		return
	}
	i := 0
	for _, h := range cfg.History {
		if h.EmptyLayer {
			continue
		}
		if i >= len(ls) {
			return
		}
		ls[i].CreatedBy = h.CreatedBy
		i++
	}
}

// checkLayersAgainstConfig makes sure the config's diff IDs and the manifest's
// layers line up: a mismatch means a broken or tampered image.
func checkLayersAgainstConfig(ref Ref, cfg *v1.ConfigFile, ls []*Layer) error {
	if cfg == nil {
		return fmt.Errorf("image %q: config missing", ref.Raw)
	}
	if len(cfg.RootFS.DiffIDs) != len(ls) {
		return fmt.Errorf("image %q: config lists %d diff_ids but the manifest has %d layers", ref.Raw, len(cfg.RootFS.DiffIDs), len(ls))
	}
	sizes := BlobSizes{}
	for i, l := range ls {
		l.Index = i
		l.DiffID = cfg.RootFS.DiffIDs[i]
		if l.Digest.Hex == "" {
			continue // a docker archive's gzipped layer: named by its diff ID
		}
		if err := sizes.Check(l.Digest.String(), l.Size); err != nil {
			return fmt.Errorf("image %q: layer %d (%s): %w", ref.Raw, i, l.Digest, err)
		}
	}
	return nil
}

// BlobSizes holds the one size each blob digest has (F13): a descriptor
// that reuses another descriptor's digest with another size lies, and a
// registry transport that looks blobs up by digest would verify the first
// one's size, so such a set of descriptors is refused wherever it is read.
type BlobSizes map[string]int64

// Check records size for the blob digest dg and fails (ErrSizeMismatch) if
// an earlier descriptor gave dg another size.
func (s BlobSizes) Check(dg string, size int64) error {
	if n, ok := s[dg]; ok && n != size {
		return fmt.Errorf("%w: this descriptor gives the blob %d bytes and an earlier one %d bytes", registry.ErrSizeMismatch, size, n)
	}
	s[dg] = size
	return nil
}

// Open opens the image r names for the selected platform (the reference
// is parsed once, at the edge: ParseRef).
func Open(ctx context.Context, r Ref, opts ...registry.Option) (*Image, error) {
	o := registry.MakeOptions(opts)
	var img *Image
	var err error
	switch r.Kind {
	case KindRegistry:
		img, err = openRemote(ctx, r, o)
	case KindOCILayout:
		img, err = openLayout(ctx, r, o)
	case KindDockerArchive:
		img, err = openArchive(r, o)
	case KindDaemon:
		img, err = openDaemon(ctx, r, o)
	default:
		err = fmt.Errorf("image %q: unknown source kind %q", r.Raw, r.Kind)
	}
	if err != nil {
		return nil, err
	}
	if o.ExactPlatform && img.Platform.Architecture != "" && !PlatformMatches(o.Platform, img.Platform) {
		img.Close()
		return nil, fmt.Errorf("image %q: no image for platform %s: it is a single-platform image for %s (leave out --platform, or pass --platform %s)", r.Raw, PlatformString(o.Platform), PlatformString(img.Platform), PlatformString(img.Platform))
	}
	attachHistory(img.Config, img.Layers)
	return img, nil
}

func platformMatches(want v1.Platform, got *v1.Platform) bool {
	return got != nil && PlatformMatches(want, *got)
}

// PlatformMatches is kiln's one platform rule, for every index walk: OS
// and architecture equal, and the variants equal unless either is unset
// (an index entry or config that omits arm64's v8 is still arm64/v8; a
// host that names none takes any).
func PlatformMatches(want, got v1.Platform) bool {
	if want.OS != got.OS || want.Architecture != got.Architecture {
		return false
	}
	return want.Variant == "" || got.Variant == "" || want.Variant == got.Variant
}

func platformList(ps []*v1.Platform) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		if p == nil {
			s += "unknown"
			continue
		}
		s += PlatformString(*p)
	}
	if s == "" {
		s = "none"
	}
	return s
}

// Section says where a local layer's blob lies: in r at off, Size bytes
// (OCI layouts and docker archives); ok is false for registry layers,
// whose bytes are read through the registry.
func (l *Layer) Section() (r io.ReaderAt, off int64, ok bool) {
	if l.file == nil {
		return nil, 0, false
	}
	return l.file, l.off, true
}
