package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Kind says what role a blob plays in the warm set.
type Kind string

// Blob kinds.
const (
	KindIndex    Kind = "index"
	KindManifest Kind = "manifest"
	KindConfig   Kind = "config"
	KindLayer    Kind = "layer"
)

// Blob is one digest of the warm set.
type Blob struct {
	ocispec.Descriptor
	Kind Kind
	// Repo is where the blob is read from.
	Repo name.Repository
	// Data holds index, manifest and config bytes, already read and
	// verified while the set was computed (they are small); nil for layers.
	Data []byte
	// Labels are the containerd labels a pull would set: GC references
	// from an index to its manifests and from a manifest to its config and
	// layers, and the distribution source.
	Labels map[string]string
}

// Image is one image of the warm set.
type Image struct {
	// Name is the image record's name: the reference as given.
	Name string
	// Source is the reference actually read: Name, or its zstd variant.
	Source string
	// Target is the root the record points at (an index or a manifest).
	Target ocispec.Descriptor
	// Manifest is the platform's manifest (Target itself for a single
	// manifest), with its platform set.
	Manifest ocispec.Descriptor
	Platform string
	Config   ocispec.Descriptor
	Layers   []ocispec.Descriptor
	// Zstd is set when the image's layers are zstd-compressed.
	Zstd bool
	// Mirror is the endpoint the image was read from (--mirror), empty
	// when it was read from its own registry.
	Mirror string
}

// Set is what a host must hold for its images to start with no pull.
type Set struct {
	Images []Image
	// Blobs is every distinct digest, small ones (indexes, manifests,
	// configs) first.
	Blobs []*Blob
	// WeightsArgs are the arguments that named weights artifacts, not
	// images (kiln weights strip publishes them); they are warmed as
	// volumes (--weights-into).
	WeightsArgs []string
}

// Bytes is the total size of the set's blobs.
func (s *Set) Bytes() int64 {
	var n int64
	for _, b := range s.Blobs {
		n += b.Size
	}
	return n
}

// Compression chooses between an image and its zstd variant.
type Compression string

// The --compression choices.
const (
	// CompressionAuto takes the zstd variant when there is one and the
	// target can run zstd layers.
	CompressionAuto Compression = "auto"
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
)

// ZstdTagSuffix names an image's zstd variant: kiln convert --to
// REPO:TAG-zstd is what warm looks for beside REPO:TAG.
const ZstdTagSuffix = "-zstd"

// ResolveOptions configure Resolve.
type ResolveOptions struct {
	Platform v1.Platform
	// Layers are the registry options (auth, insecure hosts).
	Layers []layers.Option
	// Source reads config blobs.
	Source      Source
	Compression Compression
	// NoZstd says the target cannot use zstd layers, and why (e.g. an old
	// Docker engine); empty means it can.
	NoZstd string
	// Mirrors name endpoints that serve a registry's repositories; images
	// are read there and named by their real reference.
	Mirrors Mirrors
}

// Resolve computes the warm set of refs: for each, the index (if any), the
// manifest for the platform, its config and layers.
func Resolve(ctx context.Context, refs []string, o ResolveOptions) (*Set, error) {
	if o.Source == nil {
		return nil, errors.New("warm: no blob source")
	}
	if o.Compression == "" {
		o.Compression = CompressionAuto
	}
	if o.Compression == CompressionZstd && o.NoZstd != "" {
		return nil, fmt.Errorf("--compression zstd: %s", o.NoZstd)
	}
	s := &Set{}
	// One blob, one size (F13), across the whole set: the set holds one
	// copy of each digest, warmed under the first descriptor's size.
	sizes := layers.BlobSizes{}
	seen := map[digest.Digest]bool{}
	add := func(b *Blob) error {
		if err := sizes.Check(b.Digest.String(), b.Size); err != nil {
			return fmt.Errorf("%s %s: %w", b.Kind, b.Digest, err)
		}
		if !seen[b.Digest] {
			seen[b.Digest] = true
			s.Blobs = append(s.Blobs, b)
		}
		return nil
	}
	for _, ref := range refs {
		img, blobs, err := resolveOne(ctx, ref, o)
		if errors.Is(err, errWeightsArtifact) {
			s.WeightsArgs = append(s.WeightsArgs, ref)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.Images = append(s.Images, img)
		for _, b := range blobs {
			if err := add(b); err != nil {
				return nil, fmt.Errorf("image %q: %w", ref, err)
			}
		}
	}
	// Metadata first: it is small, and a target may record images as soon
	// as their manifests are in.
	slices.SortStableFunc(s.Blobs, func(a, b *Blob) int { return kindOrder(a.Kind) - kindOrder(b.Kind) })
	return s, nil
}

func kindOrder(k Kind) int {
	switch k {
	case KindIndex:
		return 0
	case KindManifest:
		return 1
	case KindConfig:
		return 2
	}
	return 3
}

type fetched struct {
	ref  name.Reference
	desc ocispec.Descriptor
	raw  []byte
}

func getManifest(ctx context.Context, ref name.Reference, o ResolveOptions) (*fetched, error) {
	d, err := remote.Get(ref, layers.RemoteOptions(ctx, o.Layers...)...)
	if err != nil {
		return nil, err
	}
	if got := digest.FromBytes(d.Manifest); got.String() != d.Digest.String() {
		return nil, fmt.Errorf("manifest %s: content hashes to %s: %w", d.Digest, got, layers.ErrDigestMismatch)
	}
	return &fetched{ref: ref, raw: d.Manifest, desc: ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}}, nil
}

func resolveOne(ctx context.Context, ref string, o ResolveOptions) (Image, []*Blob, error) {
	r, err := layers.ParseRef(ref, o.Layers...)
	if err != nil {
		return Image{}, nil, err
	}
	if r.Kind != layers.KindRegistry {
		return Image{}, nil, fmt.Errorf("image %q: kiln warm reads images from a registry (REGISTRY/REPO:TAG or @sha256:...)", ref)
	}
	img := Image{Name: r.Name.Name(), Source: r.Name.Name()}
	fref, err := o.Mirrors.fetchRef(r.Name, o.Layers)
	if err != nil {
		return Image{}, nil, fmt.Errorf("image %q: %v", ref, err)
	}
	if fref != r.Name {
		img.Mirror = fref.Context().RegistryStr()
	}
	root, err := getManifest(ctx, fref, o)
	if err != nil {
		if img.Mirror != "" {
			return Image{}, nil, fmt.Errorf("image %q (through mirror %s): %v", ref, img.Mirror, err)
		}
		return Image{}, nil, fmt.Errorf("image %q: %v", ref, err)
	}
	// The zstd variant, when asked for or allowed: REPO:TAG-zstd.
	if tag, ok := r.Name.(name.Tag); ok && o.Compression != CompressionGzip && o.NoZstd == "" {
		zt := tag.Context().Tag(tag.TagStr() + ZstdTagSuffix)
		zf, ferr := o.Mirrors.fetchRef(zt, o.Layers)
		if ferr != nil {
			return Image{}, nil, fmt.Errorf("image %q: %v", ref, ferr)
		}
		if z, err := getManifest(ctx, zf, o); err == nil {
			root = z
			img.Source = zt.Name()
		} else if o.Compression == CompressionZstd {
			return Image{}, nil, fmt.Errorf("image %q: --compression zstd: no zstd variant %s (make one with kiln convert %s --to %s --compression zstd): %v", ref, zt.Name(), ref, zt.Name(), err)
		}
	}
	// repo is where blobs are read (the mirror, when there is one); the
	// distribution source names the real repository, as a pull would.
	repo := root.ref.Context()
	real := r.Name.Context()
	var blobs []*Blob
	src := "containerd.io/distribution.source." + real.RegistryStr()
	srcLabel := func(l map[string]string) map[string]string {
		l[src] = real.RepositoryStr()
		return l
	}
	if isWeightsArtifact(root.raw) {
		return Image{}, nil, fmt.Errorf("%s: %w", ref, errWeightsArtifact)
	}
	img.Target = root.desc
	man := root
	if isIndex(root.desc.MediaType) {
		var idx ocispec.Index
		if err := json.Unmarshal(root.raw, &idx); err != nil {
			return Image{}, nil, fmt.Errorf("image %q: index %s: %v", ref, root.desc.Digest, err)
		}
		labels := map[string]string{}
		var cands []ocispec.Descriptor
		var have []string
		for i, m := range idx.Manifests {
			labels["containerd.io/gc.ref.content.m."+strconv.Itoa(i)] = m.Digest.String()
			if !isManifest(m.MediaType) {
				continue
			}
			if m.Platform != nil {
				have = append(have, platformString(*m.Platform))
			}
			if m.Platform != nil && platformMatches(o.Platform, v1.Platform{OS: m.Platform.OS, Architecture: m.Platform.Architecture, Variant: m.Platform.Variant}) {
				cands = append(cands, m)
			}
		}
		if len(cands) == 0 {
			return Image{}, nil, fmt.Errorf("image %q: no manifest for %s in index %s (it has: %s); choose one with --platform", ref, layers.PlatformString(o.Platform), root.desc.Digest, strings.Join(have, ", "))
		}
		blobs = append(blobs, &Blob{Descriptor: root.desc, Kind: KindIndex, Repo: repo, Data: root.raw, Labels: srcLabel(labels)})
		// Several manifests for one platform: the same image with gzip and
		// zstd layers. Take zstd when the target can run it.
		var pick *fetched
		for _, c := range cands {
			m, err := getManifest(ctx, repo.Digest(c.Digest.String()), o)
			if err != nil {
				return Image{}, nil, fmt.Errorf("image %q: manifest %s: %v", ref, c.Digest, err)
			}
			m.desc.Platform = c.Platform
			z := manifestIsZstd(m.raw)
			if pick == nil || (z && o.NoZstd == "" && o.Compression != CompressionGzip) || (!z && (o.NoZstd != "" || o.Compression == CompressionGzip) && manifestIsZstd(pick.raw)) {
				pick = m
			}
		}
		man = pick
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(man.raw, &m); err != nil {
		return Image{}, nil, fmt.Errorf("image %q: manifest %s: %v", ref, man.desc.Digest, err)
	}
	if m.Config.Digest == "" {
		return Image{}, nil, fmt.Errorf("image %q: manifest %s: no config (field config.digest)", ref, man.desc.Digest)
	}
	cfgRaw, err := readSmall(ctx, o.Source, repo, m.Config)
	if err != nil {
		return Image{}, nil, fmt.Errorf("image %q: config %s: %v", ref, m.Config.Digest, err)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		return Image{}, nil, fmt.Errorf("image %q: config %s: %v", ref, m.Config.Digest, err)
	}
	p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	if !platformMatches(o.Platform, p) {
		return Image{}, nil, fmt.Errorf("image %q is %s, the host wants %s; choose with --platform", ref, layers.PlatformString(p), layers.PlatformString(o.Platform))
	}
	if man.desc.Platform == nil {
		man.desc.Platform = &ocispec.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}
	}
	img.Manifest = man.desc
	img.Platform = layers.PlatformString(p)
	img.Config = m.Config
	img.Layers = m.Layers
	img.Zstd = manifestIsZstd(man.raw)
	if img.Zstd && o.NoZstd != "" {
		return Image{}, nil, fmt.Errorf("image %q has zstd layers: %s; convert or push a gzip variant", ref, o.NoZstd)
	}
	ml := map[string]string{"containerd.io/gc.ref.content.config": m.Config.Digest.String()}
	for i, l := range m.Layers {
		ml["containerd.io/gc.ref.content.l."+strconv.Itoa(i)] = l.Digest.String()
	}
	blobs = append(blobs, &Blob{Descriptor: man.desc, Kind: KindManifest, Repo: repo, Data: man.raw, Labels: srcLabel(ml)})
	blobs = append(blobs, &Blob{Descriptor: m.Config, Kind: KindConfig, Repo: repo, Data: cfgRaw, Labels: srcLabel(map[string]string{})})
	for _, l := range m.Layers {
		if l.Size <= 0 {
			return Image{}, nil, fmt.Errorf("image %q: manifest %s: layer %s has size %d (field layers[].size)", ref, man.desc.Digest, l.Digest, l.Size)
		}
		blobs = append(blobs, &Blob{Descriptor: l, Kind: KindLayer, Repo: repo, Labels: srcLabel(map[string]string{})})
	}
	return img, blobs, nil
}

// readSmall reads and verifies a small blob (a config).
func readSmall(ctx context.Context, s Source, repo name.Repository, d ocispec.Descriptor) ([]byte, error) {
	if d.Size > 64<<20 {
		return nil, fmt.Errorf("%d bytes is too large for a config", d.Size)
	}
	rc, err := s.OpenRange(ctx, repo, d.Digest, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, d.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("got %d bytes, descriptor says %d: %w", len(b), d.Size, layers.ErrSizeMismatch)
	}
	if got := digest.FromBytes(b); got != d.Digest {
		return nil, fmt.Errorf("content hashes to %s: %w", got, layers.ErrDigestMismatch)
	}
	return b, nil
}

func isIndex(mt string) bool {
	return mt == ocispec.MediaTypeImageIndex || mt == "application/vnd.docker.distribution.manifest.list.v2+json"
}

func isManifest(mt string) bool {
	return mt == ocispec.MediaTypeImageManifest || mt == "application/vnd.docker.distribution.manifest.v2+json"
}

// IsZstd says whether a layer media type is zstd-compressed.
func IsZstd(mt string) bool {
	return strings.HasSuffix(mt, "+zstd") || strings.HasSuffix(mt, ".zstd")
}

func manifestIsZstd(raw []byte) bool {
	var m ocispec.Manifest
	if json.Unmarshal(raw, &m) != nil || len(m.Layers) == 0 {
		return false
	}
	for _, l := range m.Layers {
		if !IsZstd(l.MediaType) {
			return false
		}
	}
	return true
}

func platformMatches(want, got v1.Platform) bool {
	if want.OS != got.OS || want.Architecture != got.Architecture {
		return false
	}
	return want.Variant == "" || got.Variant == "" || want.Variant == got.Variant
}

func platformString(p ocispec.Platform) string {
	return layers.PlatformString(v1.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant})
}

// RefsFromLock returns the images a kiln lock file pins for platform: the
// runtime base image by its platform manifest digest. The devel base is
// build-only and is not warmed on GPU hosts.
func RefsFromLock(path string, platform v1.Platform) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var l recipes.Lock
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("lock file %s: %v", path, err)
	}
	if l.LockVersion == 0 {
		return nil, fmt.Errorf("lock file %s: no lock_version: not a kiln lock file", path)
	}
	var refs []string
	keys := make([]string, 0, len(l.BaseImages))
	for k := range l.BaseImages {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "devel" {
			continue
		}
		li := l.BaseImages[k]
		p := layers.PlatformString(platform)
		dg, ok := li.Platforms[p]
		if !ok {
			return nil, fmt.Errorf("lock file %s: base_images.%s (%s) has no %s manifest (field platforms)", path, k, li.Ref, p)
		}
		pinned := li.Pinned()
		refs = append(refs, pinned[:strings.LastIndex(pinned, "@")+1]+dg)
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("lock file %s: no runtime image to warm (field base_images)", path)
	}
	return refs, nil
}

// IsLockFile says whether arg names a kiln lock file rather than an image.
func IsLockFile(arg string) bool {
	fi, err := os.Stat(arg)
	if err != nil || fi.IsDir() {
		return false
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return false
	}
	var probe struct {
		LockVersion int `json:"lock_version"`
	}
	return json.Unmarshal(b, &probe) == nil && probe.LockVersion > 0
}
