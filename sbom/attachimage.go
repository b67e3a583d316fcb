package sbom

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
)

// imagePURL is how BuildKit names a statement's subject.
func imagePURL(dest, platform string) string {
	r := strings.TrimPrefix(dest, "oci:")
	return "pkg:docker/" + r + "?platform=" + url.QueryEscape(platform)
}

// AttachToImage builds img's BOM from comps and props (tool: kiln's
// version) and returns the index (image + attestation manifest holding
// CycloneDX and SPDX statements) to write at dest instead of img, and the
// attestation manifest's digest. kiln slim --sbom writes it.
func AttachToImage(img v1.Image, dest string, comps []Component, props []Property, tool string) (v1.ImageIndex, v1.Hash, error) {
	dg, err := img.Digest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	bom := New(Subject{Name: dest, Digest: dg.String()}, append([]Component(nil), comps...), props, tool, time.Now())
	cdx, err := bom.Marshal()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	spdx, err := bom.SPDX()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	// Both documents, as two statements of one attestation manifest:
	// CycloneDX (schema-validated) and SPDX (what buildx imagetools reads).
	idx, _, att, err := WithAttestation(img, imagePURL(dest, cf.OS+"/"+cf.Architecture),
		Predicate{Type: PredicateType, Body: cdx}, Predicate{Type: SPDXPredicateType, Body: spdx})
	return idx, att, err
}

// PushReferrer stores bom as an OCI referrer of subj in repo (the
// referrers API, else the referrers tag schema: sign.PushReferrer),
// stamped with when it was attached, and returns the referrer's digest:
// a BOM attached while the subject's own digest stays as it is
// (AttachReferrer).
func PushReferrer(ctx context.Context, repo name.Repository, subj v1.Descriptor, bom *BOM, lopts ...registry.Option) (string, error) {
	b, err := bom.Marshal()
	if err != nil {
		return "", err
	}
	dg, _, err := sign.PushReferrer(ctx, repo, subj, MediaType, b, map[string]string{"org.opencontainers.image.created": time.Now().UTC().Format(time.RFC3339)}, lopts...)
	if err != nil {
		return "", fmt.Errorf("attaching to %s@%s: %w", repo, subj.Digest, registry.RedactError(err))
	}
	return dg, nil
}

// AttachReferrer makes the BOM of the manifest at ref (REPO@DIGEST, read
// back by HEAD: the subject is what the registry holds)
// from comps and props, typ the subject's type ("" an image, TypeData a
// weights artifact), and stores it as the manifest's referrer
// (PushReferrer), returning the referrer's digest. kiln attaches a
// referrer BOM only through publish.WithSBOMReferrer (kiln build --sbom
// without provenance, kiln weights strip --sbom), which attaches nothing
// to an OCI layout (it has nowhere to keep a referrer).
func AttachReferrer(ctx context.Context, ref name.Digest, typ string, comps []Component, props []Property, tool string, lopts ...registry.Option) (string, error) {
	repo := ref.Context()
	desc, err := layers.HeadDigest(ctx, ref, lopts...)
	if err != nil {
		return "", fmt.Errorf("--sbom: %w", err)
	}
	bom := New(Subject{Name: repo.String(), Digest: desc.Digest.String(), Type: typ}, comps, props, tool, time.Now())
	dg, err := PushReferrer(ctx, repo, *desc, bom, lopts...)
	if err != nil {
		return "", fmt.Errorf("--sbom: %w", err)
	}
	return dg, nil
}
