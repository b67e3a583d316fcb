package builder

import (
	"context"
	"strings"
	"time"

	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
)

// buildBOMParts are a build's BOM components and properties: the lock's
// base images by digest and wheels with their SHA-256 (with --locked),
// else the plan's stack versions and GPU architectures with the recipe's
// digest.
func bomParts(plan *recipes.Plan, lock *recipes.Lock, in Inputs) ([]sbom.Component, []sbom.Property) {
	if lock != nil {
		return sbom.FromLock(lock, in.LockDigest, "")
	}
	return nil, append([]sbom.Property{{Name: "kiln:recipe-sha256", Value: in.RecipeHash}}, sbom.FromPlan(plan)...)
}

// SBOMAttestations makes the build's BOM for each platform's image before
// it is exported: what the image's own files state (dpkg status, Python
// dist-info — torch, the nvidia-*-cu12 wheels — and versioned CUDA
// libraries, read through BuildKit's file API) and the pinned inputs
// (bomParts), as CycloneDX and SPDX statements (as slim --sbom
// writes them) in the attestation manifest that carries the provenance:
// there the index digest already changes per build, so a timestamped BOM
// costs nothing, and buildx imagetools and crane read it where they read
// BuildKit's own.
func SBOMAttestations(repo string, plan *recipes.Plan, lock *recipes.Lock, in Inputs, tool string) func(context.Context, string, sbom.Files) ([]Attestation, error) {
	return func(ctx context.Context, platform string, files sbom.Files) ([]Attestation, error) {
		arch := platform
		if _, a, ok := strings.Cut(platform, "/"); ok {
			arch, _, _ = strings.Cut(a, "/")
		}
		comps, err := sbom.ScanFiles(ctx, files, arch)
		if err != nil {
			return nil, err
		}
		pinned, props := bomParts(plan, lock, in)
		props = append(props, sbom.Property{Name: "kiln:build:platform", Value: platform})
		bom := sbom.New(sbom.Subject{Name: repo}, append(comps, pinned...), props, tool, time.Now())
		cdx, err := bom.Marshal()
		if err != nil {
			return nil, err
		}
		spdx, err := bom.SPDX()
		if err != nil {
			return nil, err
		}
		return []Attestation{
			{PredicateType: sbom.PredicateType, Path: "sbom.cdx.json", Body: cdx, SBOM: true},
			{PredicateType: sbom.SPDXPredicateType, Path: "sbom.spdx.json", Body: spdx, SBOM: true},
		}, nil
	}
}

// bomReferrer is the BOM a build attaches as a referrer of each image it
// pushed without provenance (publish.WithSBOMReferrer): its pinned inputs
// (bomParts) and the image's compression. As a referrer, not an
// attestation manifest in an index, the image's digest stays the
// reproducible one (same inputs, same digest), which an index carrying a
// timestamped BOM would break.
func bomReferrer(plan *recipes.Plan, lock *recipes.Lock, in Inputs, compression string) publish.BOM {
	return func(context.Context, *publish.Published) (string, []sbom.Component, []sbom.Property, error) {
		comps, props := bomParts(plan, lock, in)
		return "", comps, append(props, sbom.Property{Name: "kiln:build:compression", Value: compression}), nil
	}
}
