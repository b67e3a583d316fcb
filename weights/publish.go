package weights

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Publish packs the collected files and writes the artifact to `to` (a
// registry reference or oci:DIR[:TAG]). Large files each become one
// uncompressed layer whose digest is the file's sha256; small files are
// packed, in path order with constant metadata, into tar layers. mount ""
// means the deepest directory containing every file. It returns the volume
// manifest (also stored in the artifact) and the artifact's digest.
func (c *Collector) Publish(ctx context.Context, to layers.Ref, mount, sourceImageDigest string, opts ...registry.Option) (*Manifest, v1.Hash, error) {
	files := c.Files()
	if len(files) == 0 {
		return nil, v1.Hash{}, fmt.Errorf("weights: nothing to publish: no weight files were diverted")
	}
	repo, err := repositoryOf(to)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	m, art, err := c.Pack(mount, sourceImageDigest)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	m.Repository = repo
	if art.manifestBlob, err = m.Encode(); err != nil {
		return nil, v1.Hash{}, err
	}
	img, err := art.image()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	dg, err := layers.Write(ctx, img, to, opts...)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("weights: %v", err)
	}
	return m, dg, nil
}

// repositoryOf is where pullers find the blobs of an artifact written to `to`.
func repositoryOf(to layers.Ref) (string, error) {
	switch to.Kind {
	case layers.KindRegistry:
		return to.Name.Context().String(), nil
	case layers.KindOCILayout:
		abs, err := filepath.Abs(to.Path)
		if err != nil {
			return "", err
		}
		return "oci:" + abs, nil
	}
	return "", fmt.Errorf("weights: %q: weights go to a registry or an OCI layout (oci:DIR), not a %s", to, to.Kind)
}

// ArtifactRef names the artifact written to `to` by its digest, for the
// image's layers.LabelWeightsManifest: REGISTRY/REPO@sha256:... or
// oci:DIR@sha256:... (the directory made absolute).
func ArtifactRef(to layers.Ref, d v1.Hash) (layers.Ref, error) {
	repo, err := repositoryOf(to)
	if err != nil {
		return layers.Ref{}, err
	}
	switch to.Kind {
	case layers.KindRegistry:
		return layers.Ref{Kind: layers.KindRegistry, Raw: repo + "@" + d.String(), Name: to.Name.Context().Digest(d.String())}, nil
	}
	return layers.Ref{Kind: layers.KindOCILayout, Raw: repo + "@" + d.String(), Path: strings.TrimPrefix(repo, "oci:"), Digest: d}, nil
}

// artifact is a packed, not yet written, weights artifact.
type artifact struct {
	c            *Collector
	m            *Manifest
	layers       []Layer
	annotations  []map[string]string
	manifestBlob []byte
	config       []byte
}

// Pack decides the layers and builds the volume manifest without writing
// the artifact anywhere (tar layers of small files are written to the work
// dir). Publish calls it; tests call it to check packing.
func (c *Collector) Pack(mount, sourceImageDigest string) (*Manifest, *artifact, error) {
	files := c.Files()
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	c.mu.Lock()
	decided := c.mount
	c.mu.Unlock()
	switch {
	case decided != "" && mount != "" && path.Clean(mount) != decided:
		return nil, nil, fmt.Errorf("weights: mount %s, but the rewrite diverted the files below %s", mount, decided)
	case decided != "":
		mount = decided
	case mount == "":
		mount = MountFor(paths)
	}
	mount = path.Clean(mount)
	if !path.IsAbs(mount) || mount == "/" {
		return nil, nil, fmt.Errorf("weights: mount %q: want an absolute directory below /", mount)
	}
	rel := make([]File, len(files))
	for i, f := range files {
		if !within(f.Path, mount) {
			return nil, nil, fmt.Errorf("weights: %s is not below the mount %s", f.Path, mount)
		}
		f.Path = strings.TrimPrefix(f.Path, mount+"/")
		if err := CheckPath(f.Path); err != nil {
			return nil, nil, fmt.Errorf("weights: %s: %v", path.Join(mount, f.Path), err)
		}
		rel[i] = f
	}
	a := &artifact{c: c}
	var small []int
	rawByDigest := map[string]bool{}
	for i := range rel {
		f := &rel[i]
		if f.Size < c.opts.largeFile {
			small = append(small, i)
			continue
		}
		d := "sha256:" + f.SHA256
		f.Layer = d
		if rawByDigest[d] {
			continue // identical content: one blob serves both paths
		}
		rawByDigest[d] = true
		a.layers = append(a.layers, Layer{Digest: d, MediaType: MediaTypeWeightRaw, Size: f.Size})
		meta, _ := json.Marshal(fileMetadata{Name: path.Base(f.Path), Mode: f.Mode, Size: f.Size, Mtime: time.Unix(0, 0).UTC(), Typeflag: tar.TypeReg})
		a.annotations = append(a.annotations, map[string]string{AnnotationFilepath: f.Path, AnnotationFileMetadata: string(meta)})
	}
	// Pack small files in path order, spilling to a new tar at packLimit.
	for len(small) > 0 {
		var batch []int
		var n int64
		for len(small) > 0 && (len(batch) == 0 || n+rel[small[0]].Size <= c.opts.packLimit) {
			n += rel[small[0]].Size
			batch = append(batch, small[0])
			small = small[1:]
		}
		l, err := c.packTar(rel, batch)
		if err != nil {
			return nil, nil, err
		}
		for _, i := range batch {
			rel[i].Layer = l.Digest
		}
		a.layers = append(a.layers, l)
		a.annotations = append(a.annotations, map[string]string{AnnotationFilepath: commonDir(rel, batch)})
	}
	var total int64
	for _, f := range rel {
		total += f.Size
	}
	m := &Manifest{
		SchemaVersion: SchemaVersion,
		MediaType:     MediaTypeManifest,
		Mount:         mount,
		SourceImage:   sourceImageDigest,
		SetDigest:     SetDigest(rel),
		Size:          total,
		Files:         rel,
		Layers:        a.layers,
	}
	if err := m.Validate(); err != nil {
		return nil, nil, fmt.Errorf("weights: built an invalid manifest: %v", err)
	}
	a.m = m
	return m, a, nil
}

// fileMetadata is ModelPack's org.cncf.model.file.metadata+json.
type fileMetadata struct {
	Name     string    `json:"name"`
	Mode     uint32    `json:"mode"`
	Uid      int       `json:"uid"`
	Gid      int       `json:"gid"`
	Size     int64     `json:"size"`
	Mtime    time.Time `json:"mtime"`
	Typeflag byte      `json:"typeflag"`
}

func commonDir(fs []File, idx []int) string {
	ps := make([]string, len(idx))
	for j, i := range idx {
		ps[j] = "/" + fs[i].Path
	}
	d := strings.TrimPrefix(MountFor(ps), "/")
	if d == "" {
		return "."
	}
	return d
}

// packTar writes a deterministic tar of the files (already in path order):
// no directories, uid/gid 0, mtime 0, the file's own mode, so the same files
// always give the same layer digest.
func (c *Collector) packTar(fs []File, idx []int) (Layer, error) {
	sc, err := layers.NewScratch(filepath.Join(c.workDir, "blobs", "sha256"))
	if err != nil {
		return Layer{}, err
	}
	defer sc.Abort()
	tw := tar.NewWriter(sc)
	for _, i := range idx {
		f := fs[i]
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Size: f.Size, Mode: int64(f.Mode), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return Layer{}, fmt.Errorf("weights: packing %s: %v", f.Path, err)
		}
		if err := copyBlob(tw, c.blobPath(f.SHA256), f.Size); err != nil {
			return Layer{}, fmt.Errorf("weights: packing %s: %v", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Layer{}, err
	}
	dg, n, _, err := sc.Commit()
	if err != nil {
		return Layer{}, err
	}
	return Layer{Digest: dg.String(), MediaType: MediaTypeWeightTar, Size: n}, nil
}

func copyBlob(w io.Writer, file string, size int64) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("blob %s: %d bytes, expected %d", file, n, size)
	}
	return nil
}

// modelConfig is the ModelPack config: descriptor, config and modelfs.
type modelConfig struct {
	Descriptor map[string]string `json:"descriptor"`
	Config     map[string]string `json:"config"`
	ModelFS    struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diffIds"`
	} `json:"modelfs"`
}

// image assembles the OCI manifest: the model layers, then the volume
// manifest as a blob of kiln's own media type, under a ModelPack config.
func (a *artifact) image() (v1.Image, error) {
	var mc modelConfig
	mc.Descriptor = map[string]string{"name": path.Base(a.m.Mount)}
	if a.m.SourceImage != "" {
		mc.Descriptor["revision"] = a.m.SourceImage
	}
	mc.Config = map[string]string{}
	if f := weightFormat(a.m.Files); f != "" {
		mc.Config["format"] = f
	}
	mc.ModelFS.Type = "layers"
	for _, l := range a.layers {
		// Raw and tar layers are uncompressed: diff ID = digest.
		mc.ModelFS.DiffIDs = append(mc.ModelFS.DiffIDs, l.Digest)
	}
	cfg, err := json.Marshal(mc)
	if err != nil {
		return nil, err
	}
	a.config = cfg
	mdg := sha256.Sum256(a.manifestBlob)
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config: v1.Descriptor{
			MediaType: MediaTypeModelConfig,
			Size:      int64(len(cfg)),
			Digest:    v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sha256Sum(cfg))},
		},
		Annotations: map[string]string{
			AnnotationSetDigest: a.m.SetDigest,
			AnnotationMount:     a.m.Mount,
		},
	}
	if a.m.SourceImage != "" {
		m.Annotations[AnnotationSource] = a.m.SourceImage
	}
	for i, l := range a.layers {
		h, _ := v1.NewHash(l.Digest)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.MediaType(l.MediaType), Size: l.Size, Digest: h, Annotations: a.annotations[i]})
	}
	m.Layers = append(m.Layers, v1.Descriptor{
		MediaType: MediaTypeManifest,
		Size:      int64(len(a.manifestBlob)),
		Digest:    v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(mdg[:])},
	})
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifactCore{a: a, manifest: raw, desc: m})
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// weightFormat names the format when every file of a known kind agrees.
func weightFormat(fs []File) string {
	kinds := map[string]string{".safetensors": "safetensors", ".gguf": "gguf", ".onnx": "onnx", ".pt": "pt", ".pth": "pt", ".bin": "pt"}
	got := ""
	for _, f := range fs {
		k, ok := kinds[path.Ext(f.Path)]
		if !ok {
			continue
		}
		if got != "" && got != k {
			return ""
		}
		got = k
	}
	return got
}

// artifactCore serves the manifest, config and blobs to go-containerregistry's
// writers (remote.Write, layout), streaming blobs from the work dir.
type artifactCore struct {
	a        *artifact
	manifest []byte
	desc     v1.Manifest
}

func (c *artifactCore) RawConfigFile() ([]byte, error)      { return c.a.config, nil }
func (c *artifactCore) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (c *artifactCore) RawManifest() ([]byte, error)        { return c.manifest, nil }

func (c *artifactCore) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range c.desc.Layers {
		if d.Digest != h {
			continue
		}
		if d.MediaType == MediaTypeManifest {
			return &blobLayer{desc: d, open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.a.manifestBlob)), nil }}, nil
		}
		file := c.a.c.blobPath(h.Hex)
		return &blobLayer{desc: d, open: func() (io.ReadCloser, error) { return os.Open(file) }}, nil
	}
	if h == c.desc.Config.Digest {
		return &blobLayer{desc: c.desc.Config, open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.a.config)), nil }}, nil
	}
	return nil, fmt.Errorf("weights artifact: no blob %s", h)
}

// blobLayer is an uncompressed blob: its diff ID is its digest, which stops
// go-containerregistry from sniffing a weight file for gzip magic.
type blobLayer struct {
	desc v1.Descriptor
	open func() (io.ReadCloser, error)
}

func (l *blobLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error)  { return l.open() }
func (l *blobLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }
