package sbom

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Media and predicate types.
const (
	MediaType       = "application/vnd.cyclonedx+json"
	PredicateType   = "https://cyclonedx.org/bom"
	SpecVersion     = "1.6"
	inTotoMediaType = "application/vnd.in-toto+json"
)

// Component types (CycloneDX classification).
const (
	TypeLibrary = "library"
	TypeOS      = "operating-system"
	TypeFile    = "file"
	TypeData    = "data"
	// TypeApplication is a program the image holds (the relocatable
	// CPython kiln installs).
	TypeApplication = "application"
)

// Component is one thing the image or artifact holds.
type Component struct {
	Type       string     `json:"type"`
	BOMRef     string     `json:"bom-ref,omitempty"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Properties []Property `json:"properties,omitempty"`
}

// Hash is a CycloneDX hash (alg "SHA-256", content lowercase hex).
type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

// Property is a CycloneDX name/value property.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// BOM is a CycloneDX 1.6 document (the fields kiln writes).
type BOM struct {
	BOMFormat    string      `json:"bomFormat"`
	SpecVersion  string      `json:"specVersion"`
	SerialNumber string      `json:"serialNumber"`
	Version      int         `json:"version"`
	Metadata     Metadata    `json:"metadata"`
	Components   []Component `json:"components"`
}

// Metadata says what the BOM describes and who wrote it.
type Metadata struct {
	Timestamp  string     `json:"timestamp"`
	Tools      Tools      `json:"tools"`
	Component  Component  `json:"component"`
	Properties []Property `json:"properties,omitempty"`
}

// Tools names kiln.
type Tools struct {
	Components []Component `json:"components"`
}

// Subject is what the BOM describes.
type Subject struct {
	// Name is the image or artifact reference (no tag needed).
	Name string
	// Digest is its manifest digest (sha256:...).
	Digest string
	// Type is "container" for images, "data" for weights artifacts.
	Type string
}

// New assembles a BOM. Components are sorted and given bom-refs.
func New(s Subject, comps []Component, props []Property, toolVersion string, now time.Time) *BOM {
	sort.SliceStable(comps, func(i, j int) bool {
		a, b := comps[i], comps[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Version < b.Version
	})
	seen := map[string]int{}
	for i := range comps {
		ref := comps[i].PURL
		if ref == "" {
			ref = comps[i].Type + ":" + comps[i].Name + "@" + comps[i].Version
		}
		if n := seen[ref]; n > 0 {
			ref = fmt.Sprintf("%s#%d", ref, n)
		}
		seen[ref]++
		comps[i].BOMRef = ref
	}
	if comps == nil {
		comps = []Component{}
	}
	seed := s.Digest
	if seed == "" {
		// An attestation's BOM is written before the image has a digest
		// (the statement's subject carries it): the name and content seed.
		seed = s.Name
		for _, c := range comps {
			seed += "\n" + c.BOMRef
		}
		for _, p := range props {
			seed += "\n" + p.Name + "=" + p.Value
		}
	}
	h := sha256.Sum256([]byte(seed))
	// A UUID-shaped serial derived from the subject (RFC 4122 version 5
	// layout bits), so one image gives one serial number.
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	serial := fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	typ := s.Type
	if typ == "" {
		typ = "container"
	}
	return &BOM{
		BOMFormat: "CycloneDX", SpecVersion: SpecVersion, SerialNumber: serial, Version: 1,
		Metadata: Metadata{
			Timestamp:  now.UTC().Format(time.RFC3339),
			Tools:      Tools{Components: []Component{{Type: "application", Name: "kiln", Version: toolVersion}}},
			Component:  Component{Type: typ, BOMRef: "subject", Name: s.Name, Version: s.Digest},
			Properties: props,
		},
		Components: comps,
	}
}

// Marshal encodes the BOM.
func (b *BOM) Marshal() ([]byte, error) { return json.MarshalIndent(b, "", "  ") }
