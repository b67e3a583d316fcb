package slim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/layers"
)

// blobLayer is an output layer: its tar, written as one blob per
// compression in the work directory.
type blobLayer struct {
	name           string
	diffID         v1.Hash
	usize          int64
	entries, files int
	bytes          int64
	from           []int
	blobs          []blob // in Options.Compression order
}

// blob is one encoding of a layer's tar.
type blob struct {
	comp   layers.Compression
	path   string
	digest v1.Hash
	size   int64
	// An eStargz blob's tar is not the layer's (see AddEStargz): its own
	// diff ID and size, and the descriptor annotations the snapshotter
	// reads. Zero for the other encodings.
	diffID      v1.Hash
	usize       int64
	annotations map[string]string
}

func (b *blob) tarID(l *blobLayer) (v1.Hash, int64) {
	if b.diffID.Hex != "" {
		return b.diffID, b.usize
	}
	return l.diffID, l.usize
}

func layersHash(hex string) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: hex} }

// fileLayer is an output layer in one of its encodings: its scratch blob
// as a layers.FileLayer (the one file-backed layer kiln has).
func (b *blob) fileLayer(l *blobLayer) *layers.FileLayer {
	id, n := b.tarID(l)
	mt := types.OCILayerZStd
	if b.comp == layers.Gzip || b.comp == layers.EStargz {
		mt = types.OCILayer
	}
	return layers.NewFileLayer(b.path, b.digest, id, b.size, n, mt)
}

// Compressions are the encodings the result has blobs in, the first being
// Image's.
func (r *Result) Compressions() []layers.Compression { return slices.Clone(r.comps) }

// Image is ImageFor the first of Options.Compression.
func (r *Result) Image(labels map[string]string) (v1.Image, error) {
	return r.ImageFor(r.comps[0], labels)
}

// ImageFor assembles the slim image with its layers in compression c (one
// of Options.Compression): the source config (env, entrypoint, cmd,
// working dir, user, labels) with labels added, the new layers, and a
// history whose entries say what each layer holds and what kiln removed.
// The config is the same for gzip and zstd (diff IDs name the tars), so
// those encodings of a result have the same image ID; eStargz layers have
// tars of their own (AddEStargz), hence their own diff IDs and image ID,
// and their descriptors carry the table of contents' digest.
func (r *Result) ImageFor(c layers.Compression, labels map[string]string) (v1.Image, error) {
	if !slices.Contains(r.comps, c) {
		return nil, fmt.Errorf("slim: no %s blobs written (Options.Compression is %v)", c, r.comps)
	}
	var cfg v1.ConfigFile
	if r.src.Config != nil {
		cfg = *r.src.Config.DeepCopy()
	}
	if cfg.OS == "" {
		cfg.OS, cfg.Architecture, cfg.Variant = r.src.Platform.OS, r.src.Platform.Architecture, r.src.Platform.Variant
	}
	if len(labels) > 0 {
		if cfg.Config.Labels == nil {
			cfg.Config.Labels = map[string]string{}
		}
		maps.Copy(cfg.Config.Labels, labels)
	}
	cfg.RootFS = v1.RootFS{Type: "layers"}
	cfg.History = nil
	created := cfg.Created
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var adds []mutate.Addendum
	for _, l := range r.layers {
		h := v1.History{
			Created:   created,
			CreatedBy: fmt.Sprintf("kiln slim: %s layer, %d files (%d bytes) from source layers %v", l.name, l.files, l.bytes, l.from),
			Comment:   "kiln slim",
		}
		b := &l.blobs[slices.IndexFunc(l.blobs, func(b blob) bool { return b.comp == c })]
		adds = append(adds, mutate.Addendum{Layer: b.fileLayer(l), History: h, Annotations: maps.Clone(b.annotations)})
		id, _ := b.tarID(l)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, id)
		cfg.History = append(cfg.History, h)
	}
	cfg.History = append(cfg.History, v1.History{
		Created:    created,
		CreatedBy:  "kiln slim --policy " + r.policy.Name + ": " + r.removedSummary(),
		Comment:    "kiln slim from " + r.src.Ref.Raw + "@" + r.src.Digest.String(),
		EmptyLayer: true,
	})
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	return mutate.ConfigFile(img, &cfg)
}

func (r *Result) removedSummary() string {
	var parts []string
	for _, s := range r.Report.Removed {
		parts = append(parts, fmt.Sprintf("%s %d files %d bytes", s.Why, s.Files, s.Bytes))
	}
	if len(parts) == 0 {
		return "removed nothing"
	}
	return "removed " + strings.Join(parts, "; ")
}
