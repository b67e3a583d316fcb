package strip

import (
	"context"
	"fmt"

	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/weights"
)

// weightsBOM is the weights artifact's BOM (every file with its SHA-256),
// attached as its referrer (publish.WithSBOMReferrer).
func weightsBOM(m *weights.Manifest) publish.BOM {
	return func(context.Context, *publish.Published) (string, []sbom.Component, []sbom.Property, error) {
		var comps []sbom.Component
		for _, f := range m.Files {
			comps = append(comps, sbom.Component{Type: sbom.TypeFile, Name: f.Path, Hashes: []sbom.Hash{{Alg: "SHA-256", Content: f.SHA256}},
				Properties: []sbom.Property{{Name: "kiln:size", Value: fmt.Sprint(f.Size)}, {Name: "kiln:mount", Value: m.Mount}}})
		}
		props := []sbom.Property{{Name: "kiln:weights:set-digest", Value: m.SetDigest}, {Name: "kiln:weights:mount", Value: m.Mount}}
		if m.SourceImage != "" {
			props = append(props, sbom.Property{Name: "kiln:weights:source-image", Value: m.SourceImage})
		}
		return sbom.TypeData, comps, props, nil
	}
}
