package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/slim"
	"github.com/kiln-build/kiln/weights"
)

// slimSBOMProps are the slimmed image's BOM metadata: where it came from
// and what slim removed, per reason (files, bytes).
func slimSBOMProps(rep *slim.Report) []sbom.Property {
	props := []sbom.Property{
		{Name: "kiln:slim:source", Value: rep.Source},
		{Name: "kiln:slim:source-digest", Value: rep.SourceDigest},
		{Name: "kiln:slim:policy", Value: rep.Policy},
	}
	for _, r := range rep.Removed {
		props = append(props, sbom.Property{Name: "kiln:slim:removed", Value: fmt.Sprintf("%s: %d files, %d bytes", r.Why, r.Files, r.Bytes)})
	}
	if rep.DivertedFiles > 0 {
		props = append(props, sbom.Property{Name: "kiln:slim:diverted-weights", Value: fmt.Sprintf("%d files, %d bytes", rep.DivertedFiles, rep.DivertedBytes)})
	}
	return props
}

// imagePURL is how BuildKit names a statement's subject.
func imagePURL(dest, platform string) string {
	r := strings.TrimPrefix(dest, "oci:")
	return "pkg:docker/" + r + "?platform=" + url.QueryEscape(platform)
}

// withSBOM builds img's BOM from comps and returns the index (image +
// attestation manifest) to write at dest instead of img.
func withSBOM(img v1.Image, dest string, comps []sbom.Component, props []sbom.Property) (v1.ImageIndex, v1.Hash, error) {
	dg, err := img.Digest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	bom := sbom.New(sbom.Subject{Name: dest, Digest: dg.String()}, append([]sbom.Component(nil), comps...), props, version, time.Now())
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
	idx, _, att, err := sbom.WithAttestation(img, imagePURL(dest, cf.OS+"/"+cf.Architecture),
		sbom.Predicate{Type: sbom.PredicateType, Body: cdx}, sbom.Predicate{Type: sbom.SPDXPredicateType, Body: spdx})
	return idx, att, err
}

// weightsSBOM attaches the weights artifact's BOM (every file with its
// SHA-256) as a referrer of the artifact, when it is in a registry.
func weightsSBOM(ctx context.Context, aref string, m *weights.Manifest, lopts []layers.Option) (string, error) {
	r, err := layers.ParseRef(aref, lopts...)
	if err != nil || r.Kind != layers.KindRegistry {
		return "", err
	}
	var comps []sbom.Component
	for _, f := range m.Files {
		comps = append(comps, sbom.Component{Type: sbom.TypeFile, Name: f.Path, Hashes: []sbom.Hash{{Alg: "SHA-256", Content: f.SHA256}},
			Properties: []sbom.Property{{Name: "kiln:size", Value: fmt.Sprint(f.Size)}, {Name: "kiln:mount", Value: m.Mount}}})
	}
	props := []sbom.Property{{Name: "kiln:weights:set-digest", Value: m.SetDigest}, {Name: "kiln:weights:mount", Value: m.Mount}}
	if m.SourceImage != "" {
		props = append(props, sbom.Property{Name: "kiln:weights:source-image", Value: m.SourceImage})
	}
	repo := r.Name.Context()
	desc, err := headDigest(ctx, aref, lopts)
	if err != nil {
		return "", err
	}
	b, err := sbom.New(sbom.Subject{Name: repo.String(), Digest: desc.Digest.String(), Type: sbom.TypeData}, comps, props, version, time.Now()).Marshal()
	if err != nil {
		return "", err
	}
	dg, _, err := sign.PushReferrer(ctx, repo, *desc, sbom.MediaType, b, map[string]string{"org.opencontainers.image.created": time.Now().UTC().Format(time.RFC3339)}, lopts...)
	if err != nil {
		return "", fmt.Errorf("--sbom: attaching to %s: %w", aref, layers.RedactError(err))
	}
	return dg, nil
}

// buildBOMParts are a build's BOM components and properties: the lock's
// base images by digest and wheels with their SHA-256 (with --locked),
// else the plan's stack versions and GPU architectures with the recipe's
// digest.
func buildBOMParts(plan *recipes.Plan, lock *recipes.Lock, in builder.Inputs) ([]sbom.Component, []sbom.Property) {
	if lock != nil {
		return sbom.FromLock(lock, in.LockDigest, "")
	}
	return nil, append([]sbom.Property{{Name: "kiln:recipe-sha256", Value: in.RecipeHash}}, sbom.FromPlan(plan)...)
}

// buildSBOMAttest makes the build's BOM for each platform's image before
// it is exported: what the image's own files state (dpkg status, Python
// dist-info — torch, the nvidia-*-cu12 wheels — and versioned CUDA
// libraries, read through BuildKit's file API) and the pinned inputs
// (buildBOMParts), as CycloneDX and SPDX statements (as slim --sbom
// writes them) in the attestation manifest that carries the provenance:
// there the index digest already changes per build, so a timestamped BOM
// costs nothing, and buildx imagetools and crane read it where they read
// BuildKit's own.
func buildSBOMAttest(repo string, plan *recipes.Plan, lock *recipes.Lock, in builder.Inputs) func(context.Context, string, sbom.Files) ([]builder.Attestation, error) {
	return func(ctx context.Context, platform string, files sbom.Files) ([]builder.Attestation, error) {
		arch := platform
		if _, a, ok := strings.Cut(platform, "/"); ok {
			arch, _, _ = strings.Cut(a, "/")
		}
		comps, err := sbom.ScanFiles(ctx, files, arch)
		if err != nil {
			return nil, err
		}
		pinned, props := buildBOMParts(plan, lock, in)
		props = append(props, sbom.Property{Name: "kiln:build:platform", Value: platform})
		bom := sbom.New(sbom.Subject{Name: repo}, append(comps, pinned...), props, version, time.Now())
		cdx, err := bom.Marshal()
		if err != nil {
			return nil, err
		}
		spdx, err := bom.SPDX()
		if err != nil {
			return nil, err
		}
		return []builder.Attestation{
			{PredicateType: sbom.PredicateType, Path: "sbom.cdx.json", Body: cdx, SBOM: true},
			{PredicateType: sbom.SPDXPredicateType, Path: "sbom.spdx.json", Body: spdx, SBOM: true},
		}, nil
	}
}

// buildSBOM attaches, to each image a build pushed, a CycloneDX BOM of
// its pinned inputs (buildBOMParts). Without provenance it is an OCI
// referrer of the pushed manifest rather than an attestation manifest in
// an index: the image's digest stays the reproducible one (same inputs,
// same digest), which an index carrying a timestamped BOM would break.
func buildSBOM(ctx context.Context, pushed []builder.Pushed, plan *recipes.Plan, lock *recipes.Lock, in builder.Inputs, lopts []layers.Option) ([]string, error) {
	var out []string
	for _, p := range pushed {
		r, err := layers.ParseRef(p.Ref, lopts...)
		if err != nil {
			return out, err
		}
		repo := r.Name.Context()
		desc, err := headDigest(ctx, repo.Digest(p.Digest).String(), lopts)
		if err != nil {
			return out, fmt.Errorf("--sbom: %w", err)
		}
		comps, props := buildBOMParts(plan, lock, in)
		props = append(props, sbom.Property{Name: "kiln:build:compression", Value: p.Compression})
		b, err := sbom.New(sbom.Subject{Name: repo.String(), Digest: p.Digest}, comps, props, version, time.Now()).Marshal()
		if err != nil {
			return out, err
		}
		dg, _, err := sign.PushReferrer(ctx, repo, *desc, sbom.MediaType, b, map[string]string{"org.opencontainers.image.created": time.Now().UTC().Format(time.RFC3339)}, lopts...)
		if err != nil {
			return out, fmt.Errorf("--sbom: attaching to %s@%s: %w", repo, p.Digest, layers.RedactError(err))
		}
		out = append(out, dg)
	}
	return out, nil
}
