package layers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/registry"
)

// resolveRemote walks a registry reference through the one client of
// its repository (the caller's pool, registry.WithPool, else its own):
// the manifest (and the index's platform manifest, checked against the
// index's descriptor) and the config, after one token exchange.
func resolveRemote(ctx context.Context, r Ref, o *registry.Options) (*Root, error) {
	c, err := o.Client(ctx, r.Name.Context())
	if err != nil {
		return nil, registry.ImageError(r.Raw, registry.RedactError(err))
	}
	raw, desc, err := c.Manifest(ctx, r.Name)
	if err != nil {
		return nil, registry.ImageError(r.Raw, registry.RedactError(err))
	}
	rt, err := Walk(ctx, r, c, Raw{Desc: desc, Bytes: raw}, o.Platform, nil)
	if err != nil {
		return nil, err
	}
	rt.Mirror = c.Via(r.Name)
	return rt, nil
}

// openRemote is resolveRemote and the layers' readers: each layer is read
// by Range through the client, so a stream that breaks resumes under
// kiln's retry policy, and is verified against its own descriptor's
// digest and size.
func openRemote(ctx context.Context, r Ref, o *registry.Options) (*Image, error) {
	root, err := resolveRemote(ctx, r, o)
	if err != nil {
		return nil, err
	}
	img := root.image()
	for _, d := range root.Layers {
		d := d
		l := &Layer{Digest: d.Digest, MediaType: d.MediaType, Size: d.Size, remote: true}
		l.open = func(ctx context.Context) (io.ReadCloser, error) { return root.Src.Open(ctx, d.Digest, 0, d.Size) }
		img.Layers = append(img.Layers, l)
	}
	if err := checkLayersAgainstConfig(r, img.Config, img.Layers); err != nil {
		return nil, err
	}
	return img, nil
}

// PlatformDigests resolves ref in its registry and returns the digest it
// names (an index or a single manifest) and the manifest digest of each
// platform ("linux/amd64" → "sha256:..."). A single-platform image reports
// its config's platform.
func PlatformDigests(ctx context.Context, ref string, opts ...registry.Option) (string, map[string]string, error) {
	o := registry.MakeOptions(opts)
	r, err := ParseRef(ref, opts...)
	if err != nil {
		return "", nil, err
	}
	if r.Kind != KindRegistry {
		return "", nil, fmt.Errorf("image %q: digests are resolved from a registry reference", ref)
	}
	c, err := o.Client(ctx, r.Name.Context())
	if err != nil {
		return "", nil, registry.ImageError(ref, registry.RedactError(err))
	}
	raw, desc, err := c.Manifest(ctx, r.Name)
	if err != nil {
		return "", nil, registry.ImageError(ref, registry.RedactError(err))
	}
	out := map[string]string{}
	if desc.MediaType.IsIndex() {
		var im v1.IndexManifest
		if err := json.Unmarshal(raw, &im); err != nil {
			return "", nil, fmt.Errorf("image %q: %v", ref, err)
		}
		for _, d := range im.Manifests {
			if d.Platform == nil || !d.MediaType.IsImage() || IsAttestation(d.Annotations) {
				continue
			}
			out[PlatformString(*d.Platform)] = d.Digest.String()
		}
		return desc.Digest.String(), out, nil
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", nil, fmt.Errorf("image %q: %v", ref, err)
	}
	rawCfg, err := readSmall(ctx, c, m.Config, "config")
	if err != nil {
		return "", nil, fmt.Errorf("image %q: %v", ref, registry.RedactError(err))
	}
	cfg, err := parseConfig(rawCfg)
	if err != nil {
		return "", nil, fmt.Errorf("image %q: config: %v", ref, err)
	}
	out[PlatformString(v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant})] = desc.Digest.String()
	return desc.Digest.String(), out, nil
}

// DigestRef pins a registry reference to a digest in the same repository.
func DigestRef(r Ref, digest string) (name.Digest, error) {
	return name.NewDigest(r.Name.Context().String()+"@"+digest, name.WeakValidation)
}

// HeadDigest HEADs ref (REPO@DIGEST or REPO:TAG, as kiln named it: no
// string is parsed) and, for a digest reference, checks that the
// registry answers that digest. It asks through the client of ref's
// repository (the caller's pool, registry.WithPool, else its own).
func HeadDigest(ctx context.Context, ref name.Reference, opts ...registry.Option) (*v1.Descriptor, error) {
	c, err := registry.ClientFor(ctx, ref.Context(), opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, registry.RedactError(err))
	}
	desc, err := c.Head(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, registry.RedactError(err))
	}
	return &desc, nil
}
