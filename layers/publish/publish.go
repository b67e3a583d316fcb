// Package publish is how kiln puts what it made where the user named:
// "write the image, attach the SBOM, sign it", once, for build, slim,
// convert and weights strip. It has ko's shape: one small Interface,
// Publish(ctx, artifact, ref), a Writer at the bottom, and decorators
// (WithSBOM, WithSBOMReferrer, WithSign) that wrap an Interface and add their part to what
// it Published.
//
// Invariants:
//   - What is signed is what was written: WithSign signs the digest the
//     inner Publish returned, read back from the registry by digest
//     (HEAD), never a tag looked up again.
//   - Writes stream (layers.Write, layers.WriteIndex): nothing is held in
//     memory, and a layout or archive is replaced atomically.
//   - A decorator with nothing to do (no key, no SBOM) is its inner
//     Interface unchanged.
package publish

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
)

// Artifact is what is published: a v1.Image, a v1.ImageIndex, or a
// Pushed manifest someone else wrote (BuildKit).
type Artifact interface {
	Digest() (v1.Hash, error)
}

// Published is what a Publish wrote; each decorator adds its part.
type Published struct {
	// Ref is where, as named: REF, oci:DIR[:TAG], docker-archive:FILE.
	Ref layers.Ref
	// Digest is the manifest (or, with an SBOM, the index) written.
	Digest v1.Hash
	// SBOM is the SBOM attestation's digest (WithSBOM) or the SBOM
	// referrer's (WithSBOMReferrer); "" without.
	SBOM string
	// Signed is the signature (WithSign); nil when nothing was signed.
	Signed *sign.Signed
}

// Interface publishes an artifact at ref, parsed once where it was read
// (a flag, a build's output).
type Interface interface {
	Publish(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error)
}

// Func is an Interface of a function.
type Func func(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error)

// Publish calls f.
func (f Func) Publish(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error) {
	return f(ctx, a, ref)
}

// Pushed is a manifest already in its registry (BuildKit pushed it): the
// Writer writes nothing for it and answers its digest.
type Pushed v1.Hash

// Digest is the pushed manifest's digest.
func (p Pushed) Digest() (v1.Hash, error) { return v1.Hash(p), nil }

// Writer writes an image (layers.Write) or an index (layers.WriteIndex)
// to ref with lopts; a Pushed artifact is already there.
func Writer(lopts ...registry.Option) Interface {
	return Func(func(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error) {
		var dg v1.Hash
		var err error
		switch a := a.(type) {
		case v1.Image:
			dg, err = layers.Write(ctx, a, ref, lopts...)
		case v1.ImageIndex:
			dg, err = layers.WriteIndex(ctx, a, ref, lopts...)
		case Pushed:
			dg = v1.Hash(a)
		default:
			return nil, fmt.Errorf("publish %s: a %T is neither an image nor an index", ref, a)
		}
		if err != nil {
			return nil, err
		}
		return &Published{Ref: ref, Digest: dg}, nil
	})
}

// Attach makes img's SBOM attestation for ref: the index to write in the
// image's place (the image and the attestation manifest, BuildKit's
// layout) and the attestation manifest's digest.
type Attach func(ctx context.Context, img v1.Image, ref layers.Ref) (v1.ImageIndex, v1.Hash, error)

// WithSBOM publishes an image as the index attach makes of it, with its
// SBOM attestation; attach nil: inner unchanged.
func WithSBOM(inner Interface, attach Attach) Interface {
	if attach == nil {
		return inner
	}
	return Func(func(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error) {
		img, ok := a.(v1.Image)
		if !ok {
			return inner.Publish(ctx, a, ref)
		}
		idx, att, err := attach(ctx, img, ref)
		if err != nil {
			return nil, fmt.Errorf("--sbom: %w", err)
		}
		p, err := inner.Publish(ctx, idx, ref)
		if err != nil {
			return nil, err
		}
		p.SBOM = att.String()
		return p, nil
	})
}

// BOM is what WithSBOMReferrer attaches for what was published at p: the
// subject's type ("" an image, sbom.TypeData a weights artifact), its
// components and properties.
type BOM func(ctx context.Context, p *Published) (typ string, comps []sbom.Component, props []sbom.Property, err error)

// WithSBOMReferrer attaches to what inner published a CycloneDX BOM (bom's
// parts; tool: kiln's version) as an OCI referrer of its manifest, read
// back by digest: the published digest stays the reproducible one, which
// WithSBOM's index (a timestamped BOM inside) would change. kiln build
// --sbom without provenance and kiln weights strip --sbom attach theirs
// this way; an OCI layout has nowhere to keep a referrer (nothing is
// attached). bom nil: inner unchanged.
func WithSBOMReferrer(inner Interface, bom BOM, tool string, lopts ...registry.Option) Interface {
	if bom == nil {
		return inner
	}
	return Func(func(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error) {
		p, err := inner.Publish(ctx, a, ref)
		if err != nil || ref.Kind != layers.KindRegistry {
			return p, err
		}
		typ, comps, props, err := bom(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("--sbom: %w", err)
		}
		if p.SBOM, err = sbom.AttachReferrer(ctx, ref.Name.Context().Digest(p.Digest.String()), typ, comps, props, tool, lopts...); err != nil {
			return nil, err
		}
		return p, nil
	})
}

// Signer signs what was published, by digest, in its repository
// (--sign-key on build, slim, convert and weights strip).
type Signer struct {
	Key *sign.Signer
	// Format is sign.FormatBundle (default) or sign.FormatLegacy.
	Format string
	Layers []registry.Option
}

// WithSign signs what inner published (s nil or keyless: inner
// unchanged).
func WithSign(inner Interface, s *Signer) Interface {
	if s == nil || s.Key == nil {
		return inner
	}
	return Func(func(ctx context.Context, a Artifact, ref layers.Ref) (*Published, error) {
		p, err := inner.Publish(ctx, a, ref)
		if err != nil {
			return nil, err
		}
		if p.Signed, err = s.SignDigest(ctx, ref, p.Digest); err != nil {
			return nil, err
		}
		return p, nil
	})
}

// SignDigest signs dest's manifest dg, just written: the descriptor is
// read back by digest (HEAD), so what is signed is what the registry
// holds, with no tag lookup in between.
// A nil or keyless Signer signs nothing.
func (s *Signer) SignDigest(ctx context.Context, dest layers.Ref, dg v1.Hash) (*sign.Signed, error) {
	if s == nil || s.Key == nil {
		return nil, nil
	}
	if dest.Kind != layers.KindRegistry {
		return nil, fmt.Errorf("--sign-key: %s is not a registry reference; a signature is stored in the registry", dest)
	}
	lopts := registry.Pooled(s.Layers) // the read-back and the signature: one login
	repo := dest.Name.Context()
	desc, err := layers.HeadDigest(ctx, repo.Digest(dg.String()), lopts...)
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %w", err)
	}
	signed, err := sign.SignDigest(ctx, repo, *desc, s.Key, sign.SignOptions{Format: s.Format, Layers: lopts})
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %w", err)
	}
	return signed, nil
}

// SignRef signs ref (REPO@DIGEST, e.g. a weights artifact just
// published) when it is in a registry; an OCI layout has nowhere to store
// a signature, so nothing is signed (nil, nil).
func (s *Signer) SignRef(ctx context.Context, ref layers.Ref) (*sign.Signed, error) {
	if s == nil || s.Key == nil || ref.Kind != layers.KindRegistry {
		return nil, nil
	}
	d, ok := ref.Name.(name.Digest)
	if !ok {
		return nil, fmt.Errorf("--sign-key: %s is not pinned by digest", ref)
	}
	h, err := v1.NewHash(d.DigestStr())
	if err != nil {
		return nil, err
	}
	return s.SignDigest(ctx, ref, h)
}
