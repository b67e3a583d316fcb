package layers

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/registry"
)

func openRemote(ctx context.Context, r Ref, o *registry.Options) (*Image, error) {
	desc, err := remote.Get(r.Name, o.Remote(ctx)...)
	if err != nil {
		return nil, registry.ImageError(r.Raw, RedactError(err))
	}
	var vimg v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("image %q: reading index: %v", r.Raw, RedactError(err))
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("image %q: reading index: %v", r.Raw, RedactError(err))
		}
		var seen []*v1.Platform
		var pick *v1.Descriptor
		for i := range im.Manifests {
			d := &im.Manifests[i]
			if !d.MediaType.IsImage() {
				continue
			}
			seen = append(seen, d.Platform)
			if pick == nil && platformMatches(o.Platform, d.Platform) {
				pick = d
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("image %q: no image for platform %s in the index (it has: %s); choose one with --platform", r.Raw, PlatformString(o.Platform), platformList(seen))
		}
		vimg, err = idx.Image(pick.Digest)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", r.Raw, RedactError(err))
		}
		// ggcr checks the child's digest; a descriptor's size must be
		// the bytes' as well.
		raw, err := vimg.RawManifest()
		if err != nil {
			return nil, fmt.Errorf("image %q: manifest %s: %v", r.Raw, pick.Digest, RedactError(err))
		}
		if int64(len(raw)) != pick.Size {
			return nil, fmt.Errorf("image %q: index lists manifest %s as %d bytes; it is %d: %w", r.Raw, pick.Digest, pick.Size, len(raw), ErrSizeMismatch)
		}
	} else {
		vimg, err = desc.Image()
		if err != nil {
			return nil, fmt.Errorf("image %q: %v", r.Raw, RedactError(err))
		}
	}
	return fromV1(ctx, r, vimg, o)
}

// fromV1 adapts a go-containerregistry image from a registry: manifest and
// config come through ggcr, the layer blobs through one Fetcher for the
// repository (made on the first layer read), so a layer stream that breaks
// is resumed by Range under kiln's retry policy, and each blob is verified
// against its own descriptor's digest and size.
func fromV1(ctx context.Context, r Ref, vimg v1.Image, o *registry.Options) (*Image, error) {
	m, err := vimg.Manifest()
	if err != nil {
		return nil, fmt.Errorf("image %q: manifest: %v", r.Raw, RedactError(err))
	}
	dg, err := vimg.Digest()
	if err != nil {
		return nil, fmt.Errorf("image %q: manifest digest: %v", r.Raw, RedactError(err))
	}
	raw, err := vimg.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %q: config %s: %v", r.Raw, m.Config.Digest, RedactError(err))
	}
	if err := checkBlobDigest(raw, m.Config.Digest); err != nil {
		return nil, fmt.Errorf("image %q: config: %v", r.Raw, RedactError(err))
	}
	cfg, err := parseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("image %q: config %s: %v", r.Raw, m.Config.Digest, RedactError(err))
	}
	rawM, err := vimg.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("image %q: manifest: %v", r.Raw, RedactError(err))
	}
	mt, _ := vimg.MediaType()
	img := &Image{Ref: r, Digest: dg, MediaType: mt, Config: cfg, RawConfig: raw, RawManifest: rawM}
	img.Platform = v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	var (
		once sync.Once
		fet  *Fetcher
		ferr error
	)
	fetcher := func(ctx context.Context) (*Fetcher, error) {
		once.Do(func() { fet, ferr = o.NewClient(ctx, r.Name.Context().String()) })
		return fet, ferr
	}
	for _, d := range m.Layers {
		d := d
		l := &Layer{Digest: d.Digest, MediaType: d.MediaType, Size: d.Size, remote: true}
		l.open = func(ctx context.Context) (io.ReadCloser, error) {
			f, err := fetcher(ctx)
			if err != nil {
				return nil, err
			}
			return f.Open(ctx, d.Digest, 0, d.Size)
		}
		img.Layers = append(img.Layers, l)
	}
	if err := checkLayersAgainstConfig(r, cfg, img.Layers); err != nil {
		return nil, err
	}
	return img, nil
}

// PlatformDigests resolves ref in its registry and returns the digest it
// names (an index or a single manifest) and the manifest digest of each
// platform ("linux/amd64" → "sha256:..."). A single-platform image reports
// its config's platform.
func PlatformDigests(ctx context.Context, ref string, opts ...Option) (string, map[string]string, error) {
	o := registry.MakeOptions(opts)
	r, err := ParseRef(ref, opts...)
	if err != nil {
		return "", nil, err
	}
	if r.Kind != KindRegistry {
		return "", nil, fmt.Errorf("image %q: digests are resolved from a registry reference", ref)
	}
	desc, err := remote.Get(r.Name, o.Remote(ctx)...)
	if err != nil {
		return "", nil, registry.ImageError(ref, RedactError(err))
	}
	out := map[string]string{}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return "", nil, fmt.Errorf("image %q: %v", ref, RedactError(err))
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return "", nil, fmt.Errorf("image %q: %v", ref, RedactError(err))
		}
		for _, d := range im.Manifests {
			if d.Platform == nil || !d.MediaType.IsImage() || IsAttestation(d.Annotations) {
				continue
			}
			out[PlatformString(*d.Platform)] = d.Digest.String()
		}
		return desc.Digest.String(), out, nil
	}
	img, err := desc.Image()
	if err != nil {
		return "", nil, fmt.Errorf("image %q: %v", ref, RedactError(err))
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", nil, fmt.Errorf("image %q: config: %v", ref, RedactError(err))
	}
	out[PlatformString(v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant})] = desc.Digest.String()
	return desc.Digest.String(), out, nil
}

// DigestRef pins a registry reference to a digest in the same repository.
func DigestRef(r Ref, digest string) (name.Digest, error) {
	return name.NewDigest(r.Name.Context().String()+"@"+digest, name.WeakValidation)
}

// HeadDigest HEADs ref (REPO@DIGEST or REPO:TAG) and, for a digest
// reference, checks that the registry answers that digest.
func HeadDigest(ctx context.Context, ref string, opts ...Option) (*v1.Descriptor, error) {
	r, err := ParseRef(ref, opts...)
	if err != nil {
		return nil, err
	}
	if r.Kind != KindRegistry {
		return nil, fmt.Errorf("%s: not a registry reference", ref)
	}
	desc, err := remote.Head(r.Name, RemoteOptions(ctx, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, RedactError(err))
	}
	if d, ok := r.Name.(name.Digest); ok && d.DigestStr() != desc.Digest.String() {
		return nil, fmt.Errorf("%s: registry answers digest %s", ref, desc.Digest)
	}
	return desc, nil
}
