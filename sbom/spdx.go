package sbom

import (
	"encoding/json"
	"fmt"
	"strings"
)

// SPDX predicate type and media type (BuildKit's SBOM attestations are
// SPDX; docker buildx imagetools reads them as .SBOM.SPDX).
const (
	SPDXPredicateType = "https://spdx.dev/Document"
	SPDXMediaType     = "application/spdx+json"
)

type spdxDoc struct {
	SPDXVersion       string           `json:"spdxVersion"`
	DataLicense       string           `json:"dataLicense"`
	SPDXID            string           `json:"SPDXID"`
	Name              string           `json:"name"`
	DocumentNamespace string           `json:"documentNamespace"`
	CreationInfo      spdxCreation     `json:"creationInfo"`
	Packages          []spdxPackage    `json:"packages"`
	Relationships     []spdxRel        `json:"relationships"`
	Annotations       []spdxAnnotation `json:"annotations,omitempty"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	PrimaryPurpose   string         `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRel struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

type spdxAnnotation struct {
	Date      string `json:"annotationDate"`
	Type      string `json:"annotationType"`
	Annotator string `json:"annotator"`
	Comment   string `json:"comment"`
}

// SPDX renders the same BOM as an SPDX 2.3 JSON document: one package per
// component (a weight file is a package of purpose FILE: SPDX files need a
// SHA-1 kiln does not have), the subject package the document DESCRIBES
// and CONTAINS the rest, the metadata properties as annotations.
func (b *BOM) SPDX() ([]byte, error) {
	tool := "Tool: kiln"
	if len(b.Metadata.Tools.Components) > 0 && b.Metadata.Tools.Components[0].Version != "" {
		tool += "-" + b.Metadata.Tools.Components[0].Version
	}
	subj := b.Metadata.Component
	purpose := "CONTAINER"
	if subj.Type == TypeData {
		purpose = "FILE"
	}
	d := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              subj.Name,
		DocumentNamespace: "https://kiln.invalid/spdx/" + strings.TrimPrefix(b.SerialNumber, "urn:uuid:"),
		CreationInfo:      spdxCreation{Created: b.Metadata.Timestamp, Creators: []string{tool}},
		Packages: []spdxPackage{{Name: subj.Name, SPDXID: "SPDXRef-Subject", VersionInfo: subj.Version,
			DownloadLocation: "NOASSERTION", PrimaryPurpose: purpose}},
		Relationships: []spdxRel{{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Subject"}},
	}
	for i, c := range b.Components {
		p := spdxPackage{Name: c.Name, SPDXID: fmt.Sprintf("SPDXRef-Package-%d", i+1), VersionInfo: c.Version, DownloadLocation: "NOASSERTION"}
		switch c.Type {
		case TypeFile:
			p.PrimaryPurpose = "FILE"
		case "container":
			p.PrimaryPurpose = "CONTAINER"
		default:
			p.PrimaryPurpose = "LIBRARY"
		}
		for _, h := range c.Hashes {
			if h.Alg == "SHA-256" {
				p.Checksums = append(p.Checksums, spdxChecksum{"SHA256", h.Content})
			}
		}
		if c.PURL != "" {
			p.ExternalRefs = []spdxRef{{"PACKAGE-MANAGER", "purl", c.PURL}}
		}
		var props []string
		for _, pr := range c.Properties {
			props = append(props, pr.Name+"="+pr.Value)
		}
		p.Comment = strings.Join(props, "; ")
		d.Packages = append(d.Packages, p)
		d.Relationships = append(d.Relationships, spdxRel{"SPDXRef-Subject", "CONTAINS", p.SPDXID})
	}
	for _, pr := range b.Metadata.Properties {
		d.Annotations = append(d.Annotations, spdxAnnotation{Date: b.Metadata.Timestamp, Type: "OTHER", Annotator: tool, Comment: pr.Name + "=" + pr.Value})
	}
	return json.MarshalIndent(d, "", "  ")
}
