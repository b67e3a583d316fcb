package slim

import (
	"fmt"

	"github.com/kiln-build/kiln/sbom"
)

// SBOMProperties are the slimmed image's BOM metadata: where it came
// from and what slim removed, per reason (files, bytes), so that a slimmed
// image's SBOM says what slim removed.
func (rep *Report) SBOMProperties() []sbom.Property {
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
