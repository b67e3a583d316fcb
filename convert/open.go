package convert

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/kiln-build/kiln/layers"
)

// Open returns the image ref names (a registry reference, oci:DIR[:TAG] or
// docker-archive:FILE[:TAG]) as a go-containerregistry image whose blobs
// stream on demand.
func Open(ctx context.Context, ref string, platform v1.Platform, opts ...layers.Option) (v1.Image, error) {
	r, err := layers.ParseRef(ref, opts...)
	if err != nil {
		return nil, err
	}
	switch r.Kind {
	case layers.KindRegistry:
		img, err := remote.Image(r.Name, append(layers.RemoteOptions(ctx, opts...), remote.WithPlatform(platform))...)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", ref, err)
		}
		return img, nil
	case layers.KindOCILayout:
		p, err := layout.FromPath(r.Path)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", ref, err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", ref, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("image %q: index.json: %v", ref, err)
		}
		var pick []v1.Descriptor
		for _, d := range im.Manifests {
			if !d.MediaType.IsImage() {
				continue
			}
			if r.Tag == "" || d.Annotations["org.opencontainers.image.ref.name"] == r.Tag {
				pick = append(pick, d)
			}
		}
		if len(pick) != 1 {
			return nil, fmt.Errorf("image %q: %d images match in index.json; name one with oci:DIR:TAG", ref, len(pick))
		}
		return p.Image(pick[0].Digest)
	case layers.KindDockerArchive:
		var tag *name.Tag
		if r.Tag != "" {
			t, err := name.NewTag(r.Tag)
			if err != nil {
				return nil, fmt.Errorf("image %q: %v", ref, err)
			}
			tag = &t
		}
		img, err := tarball.ImageFromPath(r.Path, tag)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", ref, err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("image %q: unsupported source", ref)
}
