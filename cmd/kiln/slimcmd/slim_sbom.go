package slimcmd

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/slim"
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
func withSBOM(img v1.Image, dest string, comps []sbom.Component, props []sbom.Property, version string) (v1.ImageIndex, v1.Hash, error) {
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
