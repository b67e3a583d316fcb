package slim

import (
	"fmt"
	"io"
	"maps"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
)

// blobLayer is an output layer: a zstd blob in the work directory.
type blobLayer struct {
	name           string
	path           string
	digest, diffID v1.Hash
	size, usize    int64
	entries, files int
	bytes          int64
	from           []int
}

func layersHash(hex string) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: hex} }

func (l *blobLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *blobLayer) Size() (int64, error)                { return l.size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return types.OCILayerZStd, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &zstdReadCloser{zr: zr, f: f}, nil
}

type zstdReadCloser struct {
	zr *zstd.Decoder
	f  *os.File
}

func (z *zstdReadCloser) Read(p []byte) (int, error) { return z.zr.Read(p) }
func (z *zstdReadCloser) Close() error {
	z.zr.Close()
	return z.f.Close()
}

// Image assembles the slim image: the source config (env, entrypoint, cmd,
// working dir, user, labels) with labels added, the new layers, and a
// history whose entries say what each layer holds and what kiln removed.
func (r *Result) Image(labels map[string]string) (v1.Image, error) {
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
		adds = append(adds, mutate.Addendum{Layer: l, History: h})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
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
