package layers

import (
	"context"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

const refNameAnnotation = "org.opencontainers.image.ref.name"

// Annotations that name an image in a layout: the OCI tag, and the full
// reference containerd's import and kiln warm's oci: target record.
const (
	AnnotationRefName        = refNameAnnotation
	AnnotationContainerdName = "io.containerd.image.name"
)

// MatchesTag says whether a layout index entry with these annotations is
// the one tag selects: its ref.name is the tag or ends in ":tag", or its
// containerd name is the tag or ends in ":tag". An empty tag selects
// every entry.
func MatchesTag(ann map[string]string, tag string) bool {
	if tag == "" {
		return true
	}
	for _, k := range []string{refNameAnnotation, AnnotationContainerdName} {
		if n := ann[k]; n != "" && (n == tag || strings.HasSuffix(n, ":"+tag)) {
			return true
		}
	}
	return false
}

// resolveLayout walks an OCI layout: the entry r selects
// (LayoutEntries), nested indexes down to the platform's manifest, and
// its config, each read through blob.Layout and verified against its
// descriptor.
func resolveLayout(ctx context.Context, r Ref, o *registry.Options) (*Root, error) {
	src := blob.Layout{Dir: r.Path}
	cands, names, err := LayoutEntries(r)
	if err != nil {
		return nil, err
	}
	if len(cands) > 1 {
		return nil, fmt.Errorf("image %q: the layout holds %d images; name one as oci:%s:TAG (tags: %s)", r.Raw, len(cands), r.Path, strings.Join(names, ", "))
	}
	desc := cands[0]
	raw, err := ReadManifest(ctx, src, desc)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.Raw, err)
	}
	desc.Annotations = nil // they name the entry, not the content
	return Walk(ctx, r, src, Raw{Desc: desc, Bytes: raw}, o.Platform, nil)
}

// openLayout is resolveLayout and the layers' files, opened on their
// first read, a bounded number at once (blobFiles); here they are only
// checked.
func openLayout(ctx context.Context, r Ref, o *registry.Options) (*Image, error) {
	root, err := resolveLayout(ctx, r, o)
	if err != nil {
		return nil, err
	}
	src := root.Src.(blob.Layout)
	img := root.image()
	files := newBlobFiles()
	img.closers = append(img.closers, files)
	for _, d := range root.Layers {
		if err := blob.CheckDigest(d.Digest); err != nil {
			img.Close()
			return nil, fmt.Errorf("image %q: layer digest %q is malformed", r.Raw, d.Digest)
		}
		p := src.Path(d.Digest)
		fi, err := os.Stat(p)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("not a regular file")
		}
		if err != nil {
			img.Close()
			return nil, fmt.Errorf("image %q: layer %s: %v", r.Raw, d.Digest, err)
		}
		if fi.Size() != d.Size {
			img.Close()
			return nil, fmt.Errorf("image %q: layer %s: %v: file has %d bytes, manifest says %d", r.Raw, d.Digest, registry.ErrSizeMismatch, fi.Size(), d.Size)
		}
		img.Layers = append(img.Layers, &Layer{Digest: d.Digest, MediaType: d.MediaType, Size: d.Size, file: files.file(p)})
	}
	if err := checkLayersAgainstConfig(r, img.Config, img.Layers); err != nil {
		img.Close()
		return nil, err
	}
	return img, nil
}

// nestedIndex is the first index an index lists without a platform (a
// layout that wraps its image index in another).
func nestedIndex(im *v1.IndexManifest) *v1.Descriptor {
	for i, d := range im.Manifests {
		if d.MediaType.IsIndex() && d.Platform == nil {
			return &im.Manifests[i]
		}
	}
	return nil
}

// readSmall reads a manifest, index or config blob whole from src and
// verifies it against d (digest and size). These are kilobytes; layers
// never go through here.
func readSmall(ctx context.Context, src blob.Source, d v1.Descriptor, what string) ([]byte, error) {
	b, err := blob.ReadVerified(ctx, src, d.Digest, d.Size, localfile.MaxManifest)
	if err != nil {
		return nil, fmt.Errorf("%s %w", what, registry.BlobError(d.Digest, err))
	}
	return b, nil
}
