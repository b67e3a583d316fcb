package strip

import (
	"context"
	"fmt"

	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/weights"
)

// AttachSBOM attaches the weights artifact's BOM (every file with its
// SHA-256; tool: kiln's version) as an OCI referrer of the artifact at
// aref, when it is in a registry, and returns the referrer's digest (""
// for an artifact in an OCI layout).
func AttachSBOM(ctx context.Context, aref string, m *weights.Manifest, tool string, lopts ...registry.Option) (string, error) {
	var comps []sbom.Component
	for _, f := range m.Files {
		comps = append(comps, sbom.Component{Type: sbom.TypeFile, Name: f.Path, Hashes: []sbom.Hash{{Alg: "SHA-256", Content: f.SHA256}},
			Properties: []sbom.Property{{Name: "kiln:size", Value: fmt.Sprint(f.Size)}, {Name: "kiln:mount", Value: m.Mount}}})
	}
	props := []sbom.Property{{Name: "kiln:weights:set-digest", Value: m.SetDigest}, {Name: "kiln:weights:mount", Value: m.Mount}}
	if m.SourceImage != "" {
		props = append(props, sbom.Property{Name: "kiln:weights:source-image", Value: m.SourceImage})
	}
	return sbom.AttachReferrer(ctx, aref, sbom.TypeData, comps, props, tool, lopts...)
}
