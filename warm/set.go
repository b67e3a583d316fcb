package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/weights"
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
	// Src is where the blob's bytes are read from (a registry
	// repository, an OCI layout, a docker archive).
	Src blob.Source
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
	// Source is the reference actually read: Name, or its zstd or EROFS
	// form beside it (Form).
	Source string
	// Form is the variant Source is, when it is one: FormZstd
	// (REPO:TAG-zstd) or FormErofs (REPO:TAG-erofs, erofsform.go).
	Form string
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
	// Mirror is the registry mirror the image was read through
	// (registry.WithMirrors: --mirror, $KILN_MIRROR, the host's files),
	// empty when it was read from its own registry.
	Mirror string
	// Note says why a variant beside the named tag was not used.
	Note string
	// Named is the root the reference as given resolved to, when Source
	// is a variant beside it (REPO:TAG-zstd): the signature gate checks
	// Named, and the variant stands in for it only as far as it is proven
	// to be the same image (the same config, checked while resolving, and
	// layers whose content hashes to its diff IDs, checked as they are
	// warmed: a VariantError otherwise).
	Named *ocispec.Descriptor
}

// Variant says whether the image is read from a variant beside the
// reference given (REPO:TAG-zstd), not from the reference itself.
func (img Image) Variant() bool { return img.Named != nil }

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

	closers []io.Closer
	// volumes are WeightsArgs already resolved while the set was computed.
	volumes map[string]*Volume
}

// Close releases what the set's sources hold open (a docker archive's
// file); the set's blobs cannot be read after it.
func (s *Set) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// Hash is the blob's digest in the form layers and blob sources use.
func (b *Blob) Hash() v1.Hash {
	return v1.Hash{Algorithm: b.Digest.Algorithm().String(), Hex: b.Digest.Encoded()}
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

// ResolveOptions configure Resolve.
type ResolveOptions struct {
	Platform v1.Platform
	// Layers are the registry options (auth, insecure hosts).
	Layers []registry.Option
	// Blobs reads registry blobs; nil makes one from Layers.
	Blobs       *registry.Pool
	Compression Compression
	// NoZstd says the target cannot use zstd layers, and why (e.g. an old
	// Docker engine); empty means it can.
	NoZstd string
	// Erofs says the target unpacks into containerd's EROFS snapshotter
	// (ErofsChecker): with Compression auto, an image's native EROFS
	// form beside its tag is taken when the tag names it (erofsform.go).
	Erofs bool
	// NoVariant names images (canonical references) whose variant beside
	// the tag must not be used, and why: a warm that found the variant's
	// layers are not the named image's resolves again without it.
	NoVariant map[string]string
}

// Resolve computes the warm set of refs, parsed once where the command
// read them: for each, the index (if any), the manifest for the platform,
// its config and layers.
func Resolve(ctx context.Context, refs []layers.Ref, o ResolveOptions) (*Set, error) {
	if o.Blobs == nil {
		o.Blobs = registry.NewPool(o.Layers)
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
	for _, r := range refs {
		res, err := resolveOne(ctx, r, o)
		if err != nil {
			s.Close()
			return nil, err
		}
		if res.closer != nil {
			s.closers = append(s.closers, res.closer)
		}
		s.WeightsArgs = append(s.WeightsArgs, res.weights...)
		for a, v := range res.volumes {
			if s.volumes == nil {
				s.volumes = map[string]*Volume{}
			}
			s.volumes[a] = v
		}
		s.Images = append(s.Images, res.images...)
		for _, b := range res.blobs {
			if err := add(b); err != nil {
				s.Close()
				return nil, fmt.Errorf("image %q: %w", r.Raw, err)
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
	// via is the mirror that served it ("" for the registry itself).
	via string
}

// getManifest reads ref's manifest through the one client of its
// repository (the set's pool): one login per repository, whatever the
// set reads there.
func getManifest(ctx context.Context, ref name.Reference, o ResolveOptions) (*fetched, error) {
	c, err := o.Blobs.Repo(ctx, ref.Context())
	if err != nil {
		return nil, err
	}
	raw, d, err := c.Manifest(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &fetched{ref: ref, raw: raw, desc: ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}, via: c.Via(ref)}, nil
}

// resolved is what one argument adds to the warm set.
type resolved struct {
	images []Image
	blobs  []*Blob
	// weights are weights artifacts found (warmed as volumes), and
	// volumes those of them already resolved from the manifest read here.
	weights []string
	volumes map[string]*Volume
	// closer releases what the blobs' source holds open (an archive).
	closer io.Closer
}

func resolveOne(ctx context.Context, r layers.Ref, o ResolveOptions) (*resolved, error) {
	ref := r.Raw
	switch r.Kind {
	case layers.KindOCILayout:
		return resolveLayout(ctx, ref, r, o)
	case layers.KindDockerArchive, layers.KindDaemon:
		return resolveArchive(ctx, ref, r, o)
	}
	img, blobs, vol, err := resolveRegistry(ctx, ref, r, o)
	if vol != nil {
		return &resolved{weights: []string{ref}, volumes: map[string]*Volume{ref: vol}}, nil
	}
	if err != nil {
		return nil, err
	}
	return &resolved{images: []Image{img}, blobs: blobs}, nil
}

// resolveRegistry reads a registry reference: an image (its blobs), or a
// weights artifact (its volume, resolved from the manifest read here).
func resolveRegistry(ctx context.Context, ref string, r layers.Ref, o ResolveOptions) (Image, []*Blob, *Volume, error) {
	// Named as containerd's CRI and docker name it (docker.io/library/
	// ubuntu:24.04, never go-containerregistry's index.docker.io/…), so a
	// pod naming ubuntu:24.04 finds the warmed image.
	img := Image{Name: r.Canonical(), Source: r.Canonical()}
	root, err := getManifest(ctx, r.Name, o)
	if err != nil {
		// In words (a missing tag lists the repository's tags: only
		// here, not for a variant probed below).
		err = registry.RedactError(err)
		if registry.StandsAlone(err) {
			return Image{}, nil, nil, err
		}
		return Image{}, nil, nil, fmt.Errorf("image %q: %v", ref, err)
	}
	// The zstd variant, when asked for or allowed: REPO:TAG-zstd. Read
	// here, used below only when it proves to be the same image.
	var variant *fetched
	var variantRef name.Tag
	refused, noVariant := o.NoVariant[r.Canonical()]
	if tag, ok := r.Name.(name.Tag); ok && o.Compression != CompressionGzip && o.NoZstd == "" && !noVariant {
		variantRef = tag.Context().Tag(tag.TagStr() + layers.ZstdTagSuffix)
		z, err := getManifest(ctx, variantRef, o)
		if err != nil && o.Compression == CompressionZstd {
			return Image{}, nil, nil, fmt.Errorf("image %q: --compression zstd: no zstd variant %s (make one with kiln convert %s --to %s --compression zstd): %v", ref, variantRef.Name(), ref, variantRef.Name(), registry.RedactError(err))
		}
		variant = z
	}
	// Blobs are read where the manifest was (the mirror, when one
	// served it); the distribution source names the real repository, as
	// a pull would.
	real := r.Name.Context()
	img.Mirror = root.via
	src, err := o.Blobs.Repo(ctx, real)
	if err != nil {
		return Image{}, nil, nil, fmt.Errorf("image %q: %v", ref, err)
	}
	label := "containerd.io/distribution.source." + real.RegistryStr()
	if isWeightsArtifact(root.raw) {
		// Read and verified once: the volume is resolved from these bytes.
		dg := real.Digest(root.desc.Digest.String())
		res, err := weights.FromArtifact(ctx, dg.String(), root.raw, src)
		if err != nil {
			return Image{}, nil, nil, err
		}
		return Image{}, nil, &Volume{Ref: ref, Resolved: res}, nil
	}
	w := walker{ref: ref, src: src, labels: func(l map[string]string) map[string]string {
		l[label] = real.RepositoryStr()
		return l
	}}
	named, nblobs, nerr := w.image(ctx, img, root, o)
	if noVariant && nerr == nil {
		named.Note = refused
	}
	// TAG's native EROFS form, when the target mounts it and TAG names
	// it (erofsform.go); else why it was ignored, noted below.
	enote := ""
	if nerr == nil && !noVariant {
		eimg, eblobs, ok, why := w.erofsForm(ctx, r, named, nblobs, o)
		if ok {
			return eimg, eblobs, nil, nil
		}
		enote = why
		named.Note = joinNotes(enote, named.Note)
	}
	if variant == nil {
		return named, nblobs, nil, nerr
	}
	// A tag beside the one named is a claim, not a proof: anyone who can
	// push a tag to the repository can put another image (an old release
	// signed by the same key, or TAG's own config over other layers) at
	// REPO:TAG-zstd. It stands in for REPO:TAG only when it is the same
	// image in zstd: here, the same platform and config (so the same diff
	// IDs, entrypoint and environment); as it is warmed, layers whose
	// content hashes to those diff IDs (the engine's VariantError).
	zimg := img
	// Named canonically, as the image is (docker.io/…, not index.docker.io).
	zimg.Source = r.Canonical() + layers.ZstdTagSuffix
	zo := o
	zo.Compression = CompressionZstd
	vimg, vblobs, verr := w.image(ctx, zimg, variant, zo)
	why := ""
	switch {
	case verr != nil:
		why = verr.Error()
	case !vimg.Zstd:
		why = "its layers are not all zstd"
	case nerr != nil:
		// The named tag cannot be read as an image for this host (e.g. a
		// zstd-only tag and no gzip): nothing to compare the variant with.
		return Image{}, nil, nil, nerr
	default:
		why = sameImage(named, nblobs, vimg, vblobs)
	}
	if why == "" {
		vimg.Named, vimg.Form = &named.Target, FormZstd
		vimg.Note = joinNotes(enote, vimg.Note)
		return vimg, vblobs, nil, nil
	}
	if o.Compression == CompressionZstd {
		return Image{}, nil, nil, fmt.Errorf("image %q: --compression zstd: %s is not the zstd form of %s: %s; warm %s itself with --compression gzip, or push its zstd form with kiln convert %s --to %s --compression zstd", ref, zimg.Source, r.Canonical(), why, ref, ref, zimg.Source)
	}
	if nerr != nil {
		return Image{}, nil, nil, nerr
	}
	named.Note = joinNotes(enote, fmt.Sprintf("%s ignored: not the zstd form of %s (%s); warmed %s as named", zimg.Source, r.Canonical(), why, r.Canonical()))
	return named, nblobs, nil, nil
}

// sameImage says why b (blobs bb) cannot be image a (blobs ab) in another
// compression; empty when it may be: the same platform, as many layers,
// and the same config (byte for byte, or the same JSON written again by
// another converter). Diff IDs alone are not enough: a config of the
// same diff IDs can name another entrypoint or environment. Whether the
// layers hold those diff IDs is checked as they are warmed.
func sameImage(a Image, ab []*Blob, b Image, bb []*Blob) string {
	if a.Platform != b.Platform {
		return fmt.Sprintf("platform %s, not %s", b.Platform, a.Platform)
	}
	if len(a.Layers) != len(b.Layers) {
		return fmt.Sprintf("%d layers, not %d", len(b.Layers), len(a.Layers))
	}
	if a.Config.Digest == b.Config.Digest {
		return ""
	}
	return configsDiffer(configBytes(ab), configBytes(bb))
}

// configsDiffer says how config b differs from config a (empty when they
// are the same JSON value): diff IDs first, since they say the layers
// differ, then any other field.
func configsDiffer(a, b []byte) string {
	var ca, cb v1.ConfigFile
	var ja, jb any
	if json.Unmarshal(a, &ca) != nil || json.Unmarshal(b, &cb) != nil || json.Unmarshal(a, &ja) != nil || json.Unmarshal(b, &jb) != nil {
		return "its config cannot be read"
	}
	if why := diffIDsDiffer(ca.RootFS.DiffIDs, cb.RootFS.DiffIDs); why != "" {
		return why
	}
	if !reflect.DeepEqual(ja, jb) {
		return "its config differs (entrypoint, environment or other settings), not only its layers' compression"
	}
	return ""
}

// diffIDsDiffer says how layer contents b differ from a (empty when they
// are the same): the one comparison of two images' diff IDs.
func diffIDsDiffer(a, b []v1.Hash) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d diff IDs, not %d", len(b), len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("layer %d's content differs (diff ID %s, not %s)", i, b[i], a[i])
		}
	}
	return ""
}

// configBytes is the config among an image's blobs (read and verified
// while the set was walked).
func configBytes(blobs []*Blob) []byte {
	for _, b := range blobs {
		if b.Kind == KindConfig {
			return b.Data
		}
	}
	return nil
}

// walker turns a root manifest (an index or an image manifest) into the
// warm set's blobs, whatever the source: a registry, a layout, an archive.
// The walk is layers.Walk's (one platform rule, every manifest and config
// verified against its descriptor); warm adds its choice between a
// platform's gzip and zstd manifests (choose) and the blobs' labels.
type walker struct {
	ref string // as typed, for errors
	src blob.Source
	// labels adds the source's containerd labels (a registry's
	// distribution source) to a blob's.
	labels func(map[string]string) map[string]string
}

func (w walker) image(ctx context.Context, img Image, root *fetched, o ResolveOptions) (Image, []*Blob, error) {
	ref, src, srcLabel := w.ref, w.src, w.labels
	if srcLabel == nil {
		srcLabel = func(l map[string]string) map[string]string { return l }
	}
	if isWeightsArtifact(root.raw) {
		return Image{}, nil, fmt.Errorf("%s: %w", ref, errWeightsArtifact)
	}
	rootDesc, err := v1Descriptor(root.desc)
	if err != nil {
		return Image{}, nil, fmt.Errorf("image %q: %v", ref, err)
	}
	rt, err := layers.Walk(ctx, layers.Ref{Raw: ref}, src, layers.Raw{Desc: rootDesc, Bytes: root.raw}, o.Platform, choose(o))
	if err != nil {
		return Image{}, nil, err
	}
	img.Target = root.desc
	img.Note = rt.Note
	var blobs []*Blob
	if rt.Index != nil {
		var idx v1.IndexManifest
		if err := json.Unmarshal(root.raw, &idx); err != nil {
			return Image{}, nil, fmt.Errorf("image %q: index %s: %v", ref, root.desc.Digest, err)
		}
		// A store records what the index lists; an index inside the index
		// would be a blob the set does not carry.
		if !slices.ContainsFunc(idx.Manifests, func(d v1.Descriptor) bool { return d.Digest == rt.Manifest.Desc.Digest }) {
			return Image{}, nil, fmt.Errorf("image %q: index %s nests another index; kiln warm takes the platform's manifest from the index named (warm the inner index by digest)", ref, root.desc.Digest)
		}
		labels := map[string]string{}
		for i, m := range idx.Manifests {
			labels["containerd.io/gc.ref.content.m."+strconv.Itoa(i)] = m.Digest.String()
		}
		blobs = append(blobs, &Blob{Descriptor: root.desc, Kind: KindIndex, Src: src, Data: root.raw, Labels: srcLabel(labels)})
	}
	man := ociDescriptor(rt.Manifest.Desc)
	var m ocispec.Manifest
	if err := json.Unmarshal(rt.Manifest.Bytes, &m); err != nil {
		return Image{}, nil, fmt.Errorf("image %q: manifest %s: %v", ref, man.Digest, err)
	}
	p := rt.Platform
	if !platformMatches(o.Platform, p) {
		return Image{}, nil, &platformError{ref: ref, got: layers.PlatformString(p), want: layers.PlatformString(o.Platform)}
	}
	if man.Platform == nil {
		man.Platform = &ocispec.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}
	}
	img.Manifest = man
	img.Platform = layers.PlatformString(p)
	img.Config = m.Config
	img.Layers = m.Layers
	img.Zstd = manifestIsZstd(rt.Manifest.Bytes)
	if img.Zstd && o.NoZstd != "" {
		return Image{}, nil, fmt.Errorf("image %q has zstd layers: %s; convert or push a gzip variant", ref, o.NoZstd)
	}
	ml := map[string]string{"containerd.io/gc.ref.content.config": m.Config.Digest.String()}
	for i, l := range m.Layers {
		ml["containerd.io/gc.ref.content.l."+strconv.Itoa(i)] = l.Digest.String()
	}
	blobs = append(blobs, &Blob{Descriptor: man, Kind: KindManifest, Src: src, Data: rt.Manifest.Bytes, Labels: srcLabel(ml)})
	blobs = append(blobs, &Blob{Descriptor: m.Config, Kind: KindConfig, Src: src, Data: rt.Config.Bytes, Labels: srcLabel(map[string]string{})})
	for _, l := range m.Layers {
		if l.Size <= 0 {
			return Image{}, nil, fmt.Errorf("image %q: manifest %s: layer %s has size %d (field layers[].size)", ref, man.Digest, l.Digest, l.Size)
		}
		blobs = append(blobs, &Blob{Descriptor: l, Kind: KindLayer, Src: src, Labels: srcLabel(map[string]string{})})
	}
	return img, blobs, nil
}

// choose is warm's layers.Chooser: several manifests for one platform are
// the same image with gzip and zstd layers; take zstd when the target can
// run it and the options allow it, gzip when they ask for it. The first
// manifest is what a pull of the index installs: another stands in for it
// only when it is the same image (same config, or same diff IDs) in
// another compression.
func choose(o ResolveOptions) layers.Chooser {
	zstdOK := o.NoZstd == "" && o.Compression != CompressionGzip
	return func(ctx context.Context, src blob.Source, cands []layers.Raw) (int, string) {
		pick := 0
		for i := 1; i < len(cands); i++ {
			z := manifestIsZstd(cands[i].Bytes)
			if z && zstdOK || !z && !zstdOK && manifestIsZstd(cands[pick].Bytes) {
				pick = i
			}
		}
		if pick == 0 {
			return 0, ""
		}
		if why := sameContent(ctx, src, cands[0].Bytes, cands[pick].Bytes); why != "" {
			return 0, fmt.Sprintf("manifest %s for %s ignored: not the same image as %s (%s)", cands[pick].Desc.Digest, layers.PlatformString(o.Platform), cands[0].Desc.Digest, why)
		}
		return pick, ""
	}
}

// sameContent says why manifest b is not manifest a's image in another
// compression (empty when it may be): the same config (sameImage's rule).
// The layers' content is checked against the config's diff IDs as they
// are warmed, whichever manifest is chosen.
func sameContent(ctx context.Context, src blob.Source, a, b []byte) string {
	var ma, mb ocispec.Manifest
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return "a manifest does not parse"
	}
	if len(ma.Layers) != len(mb.Layers) {
		return fmt.Sprintf("%d layers, not %d", len(mb.Layers), len(ma.Layers))
	}
	if ma.Config.Digest == mb.Config.Digest {
		return ""
	}
	var raw [2][]byte
	for i, m := range []ocispec.Manifest{ma, mb} {
		var err error
		if raw[i], err = readSmall(ctx, src, m.Config); err != nil {
			return "config " + m.Config.Digest.String() + ": " + err.Error()
		}
	}
	return configsDiffer(raw[0], raw[1])
}

// readSmall reads and verifies a small blob (a config).
func readSmall(ctx context.Context, src blob.Source, d ocispec.Descriptor) ([]byte, error) {
	h, err := v1.NewHash(d.Digest.String())
	if err != nil {
		return nil, err
	}
	return blob.ReadVerified(ctx, src, h, d.Size, 64<<20)
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

func platformMatches(want, got v1.Platform) bool { return layers.PlatformMatches(want, got) }

// v1Descriptor is d in go-containerregistry's types, as layers reads it.
func v1Descriptor(d ocispec.Descriptor) (v1.Descriptor, error) {
	h, err := v1.NewHash(d.Digest.String())
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("digest %q: %v", d.Digest, err)
	}
	return v1.Descriptor{MediaType: types.MediaType(d.MediaType), Digest: h, Size: d.Size}, nil
}

// ociDescriptor is d (go-containerregistry's, as layers reads it) in the
// image-spec's types warm's set is written in.
func ociDescriptor(d v1.Descriptor) ocispec.Descriptor {
	o := ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size,
		URLs: d.URLs, Annotations: d.Annotations, ArtifactType: string(d.ArtifactType)}
	if p := d.Platform; p != nil {
		o.Platform = &ocispec.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant, OSVersion: p.OSVersion, OSFeatures: p.OSFeatures}
	}
	return o
}
