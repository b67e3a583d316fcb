package layers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// V1 adapts img to a go-containerregistry image, for the code that
// rebuilds images with ggcr's mutate (kiln convert). It is how such code
// opens a reference: through Open, with the tag, digest and platform rules
// of every other verb, rather than a second opener in ggcr's terms. The
// manifest and config are img's, as stored (a docker archive, which has no
// manifest, gets the one every kiln reader makes for it,
// ArchiveManifest); each layer's blob is read as Walk reads it: a local file's
// section, or the registry through kiln's Fetcher under ctx, which bounds
// those reads. The bytes are handed out unverified, as a blob.Source
// does: the reader verifies them against the descriptor. img must stay
// open while the adapter is used.
func (img *Image) V1(ctx context.Context) (v1.Image, error) {
	c := &v1Core{img: img, byDigest: map[v1.Hash]*v1Layer{}, raw: img.RawManifest, mt: img.MediaType}
	if c.raw == nil {
		b, _, err := img.ArchiveManifest()
		if err != nil {
			return nil, err
		}
		c.raw, c.mt = b, types.OCIManifestSchema1
	}
	var m v1.Manifest
	if err := json.Unmarshal(c.raw, &m); err != nil {
		return nil, fmt.Errorf("image %q: manifest: %v", img.Ref.Raw, err)
	}
	if len(m.Layers) != len(img.Layers) {
		return nil, fmt.Errorf("image %q: manifest has %d layers, the image %d", img.Ref.Raw, len(m.Layers), len(img.Layers))
	}
	for i, d := range m.Layers {
		c.byDigest[d.Digest] = &v1Layer{l: img.Layers[i], dg: d.Digest, mt: d.MediaType, ctx: ctx}
	}
	return partial.CompressedToImage(c)
}

type v1Core struct {
	img      *Image
	raw      []byte
	mt       types.MediaType
	byDigest map[v1.Hash]*v1Layer
}

func (c *v1Core) RawConfigFile() ([]byte, error)      { return c.img.RawConfig, nil }
func (c *v1Core) MediaType() (types.MediaType, error) { return c.mt, nil }
func (c *v1Core) RawManifest() ([]byte, error)        { return c.raw, nil }
func (c *v1Core) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	l, ok := c.byDigest[h]
	if !ok {
		return nil, fmt.Errorf("image %q: no layer %s", c.img.Ref.Raw, h)
	}
	return l, nil
}

type v1Layer struct {
	l   *Layer
	dg  v1.Hash
	mt  types.MediaType // the manifest's
	ctx context.Context
}

func (v *v1Layer) Digest() (v1.Hash, error)            { return v.dg, nil }
func (v *v1Layer) Size() (int64, error)                { return v.l.Size, nil }
func (v *v1Layer) MediaType() (types.MediaType, error) { return v.mt, nil }
func (v *v1Layer) Compressed() (io.ReadCloser, error) {
	if v.l.file != nil {
		return io.NopCloser(io.NewSectionReader(v.l.file, v.l.off, v.l.Size)), nil
	}
	return v.l.open(v.ctx)
}
