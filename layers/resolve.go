package layers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// The one walk from a reference to an image's verified bytes, shared by
// Open, kiln warm's set and the weights sources:
//
//   - an OCI layout's index.json is read by LayoutEntries, under one tag
//     rule (MatchesTag), and its blobs through blob.Layout (one digest
//     guard, blob.CheckDigest) and blob.ReadVerified (digest and size
//     against the descriptor);
//   - an index is walked for a platform by PlatformCandidates (one
//     platform rule, PlatformMatches);
//   - an image without a manifest (a docker archive, a docker-daemon
//     image) gets the one manifest ArchiveManifest writes.

// Raw is a blob read whole and verified against Desc (digest and size).
type Raw struct {
	Desc  v1.Descriptor
	Bytes []byte
}

// Root is what a reference resolves to for the platform asked for: the
// index it names (nil when it names a manifest), the platform's image
// manifest and its config, read whole and verified against their
// descriptors, the config parsed and its platform, the layers' descriptors,
// and the source of the image's blobs (the repository's registry.Client,
// a blob.Layout).
type Root struct {
	Ref        Ref
	Index      *Raw
	Manifest   Raw
	Config     Raw
	ConfigFile *v1.ConfigFile
	Platform   v1.Platform
	Layers     []v1.Descriptor
	Src        blob.Source
	// Mirror is the registry mirror the root was read through
	// (registry.WithMirrors); "" for the registry itself and local
	// sources.
	Mirror string
	// Note says why Walk's Chooser passed over the platform's first
	// manifest (empty when it did not).
	Note string
}

// Resolve is the one walk from a registry reference or an OCI layout to
// an image's verified bytes: the root the reference names, then Walk
// (index → the platform's manifest, the first PlatformCandidates gives:
// what a pull installs → config). Open is Resolve and the layers'
// readers. Docker archives and daemon images, which have no manifest, are
// opened by Open (ArchiveManifest writes theirs).
func Resolve(ctx context.Context, r Ref, opts ...registry.Option) (*Root, error) {
	o := registry.MakeOptions(opts)
	switch r.Kind {
	case KindRegistry:
		return resolveRemote(ctx, r, o)
	case KindOCILayout:
		return resolveLayout(ctx, r, o)
	}
	return nil, fmt.Errorf("image %q: a %s has no manifest to resolve; open it with Open", r.Raw, r.Kind)
}

// A Chooser picks the manifest to use among those an index lists for the
// platform, each read and verified against the index's descriptor, in
// index order (the first is what a pull installs), and says why it passed
// over the first (empty when it did not). nil is "the first".
type Chooser func(ctx context.Context, src blob.Source, cands []Raw) (pick int, note string)

// Walk is the walk below a root already read and verified (root): an
// index's manifests for p (PlatformCandidates, the one platform rule;
// nested indexes without a platform are descended), the one choose picks,
// and its config, each read from src (a registry's manifests through its
// manifests endpoint) and verified against its descriptor. r names the
// image in errors. Every reader of an image's metadata comes through
// here: Resolve, kiln warm's set (which chooses between a platform's
// gzip and zstd manifests) and the weights sources.
func Walk(ctx context.Context, r Ref, src blob.Source, root Raw, p v1.Platform, choose Chooser) (*Root, error) {
	rt := &Root{Ref: r, Src: src}
	cur := root
	for depth := 0; cur.Desc.MediaType.IsIndex(); depth++ {
		if depth > 4 {
			return nil, fmt.Errorf("image %q: indexes nested too deep", r.Raw)
		}
		if rt.Index == nil {
			idx := cur
			rt.Index = &idx
		}
		var im v1.IndexManifest
		if err := json.Unmarshal(cur.Bytes, &im); err != nil {
			return nil, fmt.Errorf("image %q: index %s: %v", r.Raw, cur.Desc.Digest, err)
		}
		cands, offered := PlatformCandidates(&im, p)
		if len(cands) == 0 {
			nested := nestedIndex(&im)
			if nested == nil {
				return nil, NoPlatformError(r.Raw, p, offered)
			}
			raw, err := ReadManifest(ctx, src, *nested)
			if err != nil {
				return nil, fmt.Errorf("image %q: %w", r.Raw, err)
			}
			cur = Raw{Desc: *nested, Bytes: raw}
			continue
		}
		n := 1
		if choose != nil {
			n = len(cands)
		}
		read := make([]Raw, 0, n)
		for _, c := range cands[:n] {
			raw, err := ReadManifest(ctx, src, c)
			if err != nil {
				return nil, fmt.Errorf("image %q: index %s: %w", r.Raw, cur.Desc.Digest, err)
			}
			// What the index says of it, less what names an entry.
			read = append(read, Raw{Desc: v1.Descriptor{MediaType: c.MediaType, Digest: c.Digest, Size: c.Size, Platform: c.Platform}, Bytes: raw})
		}
		pick := 0
		if choose != nil {
			pick, rt.Note = choose(ctx, src, read)
		}
		cur = read[pick]
	}
	if !cur.Desc.MediaType.IsImage() {
		return nil, fmt.Errorf("image %q: %s is a %s, not an image manifest", r.Raw, cur.Desc.Digest, cur.Desc.MediaType)
	}
	if err := rt.readImage(ctx, cur.Desc, cur.Bytes); err != nil {
		return nil, err
	}
	return rt, nil
}

// ReadManifest reads the manifest or index d names from src, verified
// against d (digest and size): from a registry through its manifests
// endpoint, from any other source as a blob.
func ReadManifest(ctx context.Context, src blob.Source, d v1.Descriptor) ([]byte, error) {
	what := "manifest"
	if d.MediaType.IsIndex() {
		what = "index"
	}
	c, ok := src.(*registry.Client)
	if !ok {
		return readSmall(ctx, src, d, what)
	}
	raw, got, err := c.Manifest(ctx, c.Repository().Digest(d.Digest.String()))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, d.Digest, registry.RedactError(err))
	}
	// The read checked the digest; a descriptor's size must be the
	// bytes' as well.
	if got.Size != d.Size {
		return nil, fmt.Errorf("%s %s is listed as %d bytes; it is %d: %w", what, d.Digest, d.Size, got.Size, registry.ErrSizeMismatch)
	}
	return raw, nil
}

// readImage reads the image manifest raw (whose descriptor is desc) and
// its config from the root's source.
func (rt *Root) readImage(ctx context.Context, desc v1.Descriptor, raw []byte) error {
	r := rt.Ref
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("image %q: manifest %s: %v", r.Raw, desc.Digest, err)
	}
	rawCfg, err := readSmall(ctx, rt.Src, m.Config, "config")
	if err != nil {
		return fmt.Errorf("image %q: %w", r.Raw, registry.RedactError(err))
	}
	cfg, err := parseConfig(rawCfg)
	if err != nil {
		return fmt.Errorf("image %q: config %s: %v", r.Raw, m.Config.Digest, err)
	}
	rt.Manifest = Raw{Desc: desc, Bytes: raw}
	rt.Config = Raw{Desc: m.Config, Bytes: rawCfg}
	rt.ConfigFile = cfg
	rt.Platform = v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	rt.Layers = m.Layers
	return nil
}

// image is the Image of the root, its layers not yet added.
func (rt *Root) image() *Image {
	return &Image{Ref: rt.Ref, Digest: rt.Manifest.Desc.Digest, MediaType: rt.Manifest.Desc.MediaType, Platform: rt.Platform,
		Config: rt.ConfigFile, RawConfig: rt.Config.Bytes, RawManifest: rt.Manifest.Bytes, Mirror: rt.Mirror}
}

// LayoutEntries reads the index.json of the layout r names and returns
// the entries r selects: by digest (oci:DIR@sha256:…), by tag (MatchesTag:
// the ref.name or containerd name is the tag or ends in :tag), or, with
// neither, every entry; and the names the layout's entries record
// (EntryName), sorted, for the errors of its callers. An empty selection
// is an error in words.
func LayoutEntries(r Ref) (sel []v1.Descriptor, names []string, err error) {
	b, err := localfile.ReadFile(filepath.Join(r.Path, "index.json"), "index.json", localfile.MaxIndex)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil, fmt.Errorf("image %q: %s is not an OCI image layout (no index.json)", r.Raw, r.Path)
		}
		return nil, nil, fmt.Errorf("image %q: %v", r.Raw, err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, nil, fmt.Errorf("image %q: %s: %v", r.Raw, filepath.Join(r.Path, "index.json"), err)
	}
	for _, d := range idx.Manifests {
		if n := EntryName(d); n != "" {
			names = append(names, n)
		}
		if r.Digest.Hex != "" && d.Digest == r.Digest || r.Digest.Hex == "" && MatchesTag(d.Annotations, r.Tag) {
			sel = append(sel, d)
		}
	}
	sort.Strings(names)
	switch {
	case len(sel) > 0:
		return sel, names, nil
	case r.Digest.Hex != "":
		return nil, names, fmt.Errorf("image %q: index.json of %s has no manifest %s", r.Raw, r.Path, r.Digest)
	case r.Tag != "":
		return nil, names, fmt.Errorf("image %q: no image tagged %q in %s (it names: %s)", r.Raw, r.Tag, r.Path, strings.Join(names, ", "))
	}
	return nil, names, fmt.Errorf("image %q: the layout %s holds no images (index.json field manifests)", r.Raw, r.Path)
}

// EntryName is the image name a layout's index.json entry records:
// containerd's (io.containerd.image.name), else the OCI ref.name.
func EntryName(d v1.Descriptor) string {
	if n := d.Annotations[AnnotationContainerdName]; n != "" {
		return n
	}
	return d.Annotations[refNameAnnotation]
}

// PlatformCandidates is kiln's one walk of an index for a platform: the
// image manifests it lists for p (PlatformMatches), in index order (the
// first is what a pull installs), and the platforms it offers (for the
// error that lists them; nil for an entry without one). Nested indexes
// and attestation manifests are never candidates.
func PlatformCandidates(im *v1.IndexManifest, p v1.Platform) (cands []v1.Descriptor, offered []*v1.Platform) {
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		offered = append(offered, d.Platform)
		if platformMatches(p, d.Platform) {
			cands = append(cands, d)
		}
	}
	return cands, offered
}

// NoPlatformError is the error for an index without p: what it has, and
// how to choose.
func NoPlatformError(raw string, p v1.Platform, offered []*v1.Platform) error {
	return fmt.Errorf("image %q: no image for platform %s in the index (it has: %s); choose one with --platform", raw, PlatformString(p), platformList(offered))
}

// ArchiveManifest is the one manifest kiln writes for an image that has
// none (a docker archive, a docker-daemon image), as containerd's import
// does: an OCI manifest over the config and the layers as stored (a plain
// tar layer is the blob its diff ID names; a compressed one, whose digest
// the archive does not record, is hashed here once), and the sections of
// the source file that serve those blobs, config included.
func (img *Image) ArchiveManifest() ([]byte, blob.Sections, error) {
	secs := blob.Sections{}
	cdg := sha256Hash(img.RawConfig)
	secs[cdg] = blob.Section{R: strings.NewReader(string(img.RawConfig)), Size: int64(len(img.RawConfig))}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: cdg, Size: int64(len(img.RawConfig))},
	}
	for _, l := range img.Layers {
		if l.file == nil {
			return nil, nil, fmt.Errorf("image %q: layer %d is not stored in the archive", img.Ref.Raw, l.Index)
		}
		dg, err := l.blobDigest()
		if err != nil {
			return nil, nil, fmt.Errorf("image %q: layer %d: %v", img.Ref.Raw, l.Index, err)
		}
		mt := types.OCIUncompressedLayer
		switch l.MediaType {
		case types.DockerLayer, types.OCILayer:
			mt = types.OCILayer
		case types.OCILayerZStd:
			mt = types.OCILayerZStd
		}
		secs[dg] = blob.Section{R: l.file, Off: l.off, Size: l.Size}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: mt, Digest: dg, Size: l.Size})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	return raw, secs, nil
}

// blobDigest is the layer's blob digest; a docker archive's compressed
// layer has none recorded, so its section is hashed (as docker load does).
func (l *Layer) blobDigest() (v1.Hash, error) {
	if l.Digest.Hex != "" {
		return l.Digest, nil
	}
	if l.file == nil {
		return v1.Hash{}, fmt.Errorf("no blob digest")
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(l.file, l.off, l.Size)); err != nil {
		return v1.Hash{}, err
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}

func sha256Hash(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}
