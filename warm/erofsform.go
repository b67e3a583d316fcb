package warm

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
)

// The forms a variant beside a tag can be (Image.Form).
const (
	FormZstd  = "zstd"
	FormErofs = "erofs"
)

// ErofsChecker is a target that may unpack into containerd's EROFS
// snapshotter, which mounts native EROFS layers with no untar: ErofsUnpack
// says whether --unpack goes there (--snapshotter erofs, or auto with the
// snapshotter loaded and working), so an image's EROFS form is worth
// taking.
type ErofsChecker interface {
	ErofsUnpack(ctx context.Context) bool
}

// erofsForm is REPO:TAG's native EROFS form, REPO:TAG-erofs, read for the
// image named (named, its blobs nblobs) when the target mounts EROFS
// layers (o.Erofs) and the compression is left to warm (auto). ok says it
// is taken; else why says why a TAG-erofs there was ignored ("" when
// there is none, or it was not looked for).
//
// A tag beside the one named is a claim anyone who can push can make.
// An EROFS layer holds no tar, so its content cannot be compared with
// TAG's diff IDs the way TAG-zstd's is; the proof is that TAG names it:
// TAG's manifest for the platform (the one the signature gate checks,
// through TAG's digest) carries layers.AnnotationErofsManifest, the
// digest of the manifest at TAG-erofs for the same platform, whose layers
// are all EROFS. As it is warmed, each layer's content must hash to the
// EROFS config's own diff ID (a VariantError otherwise: TAG is warmed as
// named).
func (w walker) erofsForm(ctx context.Context, r layers.Ref, named Image, nblobs []*Blob, o ResolveOptions) (img Image, blobs []*Blob, ok bool, why string) {
	tag, isTag := r.Name.(name.Tag)
	if !o.Erofs || o.Compression != CompressionAuto || !isTag {
		return Image{}, nil, false, ""
	}
	eref := layers.ErofsTag(tag)
	root, err := getManifest(ctx, eref, o)
	if err != nil {
		// No EROFS form (or none readable): nothing to say.
		return Image{}, nil, false, ""
	}
	src := r.Canonical() + layers.ErofsTagSuffix
	ignored := func(format string, a ...any) (Image, []*Blob, bool, string) {
		return Image{}, nil, false, src + " ignored: " + fmt.Sprintf(format, a...)
	}
	var want string
	for _, b := range nblobs {
		if b.Kind == KindManifest && b.Digest == named.Manifest.Digest {
			if want, err = layers.ErofsFormNamed(b.Data); err != nil {
				return ignored("%s %v", r.Canonical(), err)
			}
		}
	}
	if want == "" {
		return ignored("%s names no EROFS form (no %s annotation; publish both with kiln slim --format erofs)", r.Canonical(), layers.AnnotationErofsManifest)
	}
	eimg := named
	eimg.Source, eimg.Note = src, ""
	ew := w
	ew.ref = src
	eimg, eblobs, err := ew.image(ctx, eimg, root, o)
	var pe *platformError
	switch {
	case errors.As(err, &pe):
		return ignored("platform %s, not %s", pe.got, pe.want)
	case err != nil:
		return ignored("%v", err)
	case eimg.Platform != named.Platform:
		return ignored("platform %s, not %s", eimg.Platform, named.Platform)
	case eimg.Manifest.Digest.String() != want:
		return ignored("%s names %s as its EROFS form, not %s", r.Canonical(), want, eimg.Manifest.Digest)
	}
	for i, l := range eimg.Layers {
		if !layers.IsErofs(types.MediaType(l.MediaType)) {
			return ignored("layer %d is %s, not EROFS", i, l.MediaType)
		}
	}
	eimg.Named, eimg.Form = &named.Target, FormErofs
	return eimg, eblobs, true, ""
}

// joinNotes is the notes that are not empty, in order.
func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// platformError is an image of another platform than the host wants.
type platformError struct{ ref, got, want string }

func (e *platformError) Error() string {
	return fmt.Sprintf("image %q is %s, the host wants %s; choose with --platform", e.ref, e.got, e.want)
}
