package warm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// What the engine checks of a layer before an image is recorded (D12,
// N1): its blob's digest and size are checked as it is written
// (blob.Copy); its uncompressed content, read back from the target, must
// hash to the diff ID its image's config names for it. A manifest whose
// layers are not the image its config describes is never recorded under
// a name, and a variant beside a tag (REPO:TAG-zstd) that reuses TAG's
// config over other layers is set aside (VariantError) so that TAG is
// warmed as named.

// Opener is a Store that reads back a committed blob (containerd's
// content store, an OCI layout, a Loader's stage).
type Opener interface {
	Open(d ocispec.Descriptor) (io.ReadCloser, error)
}

// claim is what one image's config says a layer blob holds.
type claim struct {
	diffID  digest.Digest
	image   string // the image's name
	source  string // the reference read (the variant's, for a variant)
	variant bool
	form    string // the variant's Image.Form
}

// layerClaims maps every layer blob of s to what its images' configs
// say it holds.
func layerClaims(s *Set) (map[digest.Digest][]claim, error) {
	out := map[digest.Digest][]claim{}
	for _, img := range s.Images {
		cfg, err := s.ConfigFile(img)
		if err != nil {
			return nil, err
		}
		for i, l := range img.Layers {
			out[l.Digest] = append(out[l.Digest], claim{
				diffID: digest.Digest(cfg.RootFS.DiffIDs[i].String()),
				image:  img.Name, source: img.Source, variant: img.Variant(), form: img.Form,
			})
		}
	}
	return out, nil
}

// hasVariant says whether any of cs is a variant's.
func hasVariant(cs []claim) bool {
	for _, c := range cs {
		if c.variant {
			return true
		}
	}
	return false
}

// checkLayer reads the committed layer b back from t, decompresses it
// as its media type says, and compares the hash of its content with
// every claim. It returns the variants whose claim failed (image name →
// why) and an error naming the first failed claim.
func checkLayer(ctx context.Context, t Opener, b *Blob, cs []claim) (map[string]string, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	got, err := contentDigest(ctx, t, b)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", b.Digest, err)
	}
	var bad map[string]string
	var first error
	for _, c := range cs {
		if got == c.diffID {
			continue
		}
		why := fmt.Sprintf("layer %s's content hashes to %s, but the config says %s", b.Digest, got, c.diffID)
		if c.variant {
			if bad == nil {
				bad = map[string]string{}
			}
			form := c.form
			if form == FormErofs {
				form = "EROFS"
			}
			bad[c.image] = fmt.Sprintf("%s is not the %s form of %s: %s", c.source, form, c.image, why)
		}
		if first == nil {
			first = fmt.Errorf("image %s: %s: %w", c.image, why, registry.ErrDigestMismatch)
		}
	}
	return bad, first
}

// contentDigest is the sha256 of b's uncompressed content as committed
// in t. The encoding must be the one the media type names: a zstd layer
// whose bytes are gzip (or a tar) is not what its manifest says; the
// content must be a tar whose every entry passes layers.CheckEntry.
func contentDigest(ctx context.Context, t Opener, b *Blob) (digest.Digest, error) {
	rc, err := t.Open(b.Descriptor)
	if err != nil {
		return "", fmt.Errorf("reading it back: %v", err)
	}
	defer rc.Close()
	dr, comp, closeDec, err := layers.Decompress(layers.ContextReader(ctx, rc, nil))
	if err != nil {
		return "", err
	}
	defer closeDec()
	if err := layers.CheckCompression(types.MediaType(b.MediaType), comp); err != nil {
		return "", err
	}
	h := sha256.New()
	// A tar layer: kiln's one entry rule (layers.CheckEntry) on every
	// header, as the content is hashed, so that what an unpack (kiln's or
	// containerd's) writes is what slim and the EROFS conversion accept.
	// A native EROFS layer is checked by fsck.erofs where it is used.
	if layers.CheckTar(types.MediaType(b.MediaType)) == nil {
		tr := io.TeeReader(dr, h)
		if err := layers.WalkTar(ctx, tr, func(e *layers.Entry, _ io.Reader) error { return layers.CheckEntry(e) }); err != nil {
			return "", err
		}
	}
	// What follows the end marker is part of the content too.
	if _, err := io.CopyBuffer(h, dr, make([]byte, 1<<20)); err != nil {
		return "", fmt.Errorf("decompressing: %v", err)
	}
	return digest.Digest("sha256:" + hex.EncodeToString(h.Sum(nil))), nil
}

// VariantError says the variant warm chose for an image (REPO:TAG-zstd,
// REPO:TAG-erofs) is not that image: a layer's content is not the diff ID
// the config names (the shared config; the EROFS form's own). Run resolves again without the variant and warms the
// image as named.
type VariantError struct {
	// Images maps each such image's name to why.
	Images map[string]string
	Err    error
}

func (e *VariantError) Error() string {
	names := make([]string, 0, len(e.Images))
	for n := range e.Images {
		names = append(names, n)
	}
	sort.Strings(names)
	return e.Images[names[0]]
}

func (e *VariantError) Unwrap() error { return e.Err }
