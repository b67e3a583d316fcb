package sbom

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/layers"
)

// inTotoStatementV01 is the in-toto statement type BuildKit's SBOM
// attestations carry.
const inTotoStatementV01 = "https://in-toto.io/Statement/v0.1"

type statement struct {
	Type          string          `json:"_type"`
	PredicateType string          `json:"predicateType"`
	Subject       []statementSubj `json:"subject"`
	Predicate     json.RawMessage `json:"predicate"`
}

type statementSubj struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Predicate is one document to attest: its in-toto predicate type and
// JSON body.
type Predicate struct {
	Type string
	Body []byte
}

// Statement wraps p in an in-toto statement about subject.
func Statement(subjectName string, subject v1.Hash, p Predicate) ([]byte, error) {
	return json.Marshal(statement{
		Type: inTotoStatementV01, PredicateType: p.Type,
		Subject:   []statementSubj{{Name: subjectName, Digest: map[string]string{subject.Algorithm: subject.Hex}}},
		Predicate: p.Body,
	})
}

// WithAttestation returns an index holding img (with its platform) and
// an attestation manifest carrying one in-toto statement layer per
// predicate about it, as BuildKit lays them out. subjectName names the image in the statement (a purl, as BuildKit
// writes: pkg:docker/REPO@TAG?platform=...).
// It returns the index, its digest and the attestation manifest's digest.
func WithAttestation(img v1.Image, subjectName string, preds ...Predicate) (v1.ImageIndex, v1.Hash, v1.Hash, error) {
	dg, err := img.Digest()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	var ls []v1.Layer
	for _, p := range preds {
		st, err := Statement(subjectName, dg, p)
		if err != nil {
			return nil, v1.Hash{}, v1.Hash{}, err
		}
		ls = append(ls, static.NewLayer(st, inTotoMediaType))
	}
	att, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), ls...)
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	att = mutate.ConfigMediaType(att, types.OCIConfigJSON)
	acf, err := att.ConfigFile()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	acf = acf.DeepCopy()
	acf.Architecture, acf.OS = "unknown", "unknown"
	if att, err = mutate.ConfigFile(att, acf); err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	// The layer's predicate-type annotation, as BuildKit sets it.
	m, err := att.Manifest()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	m = m.DeepCopy()
	for i := range m.Layers {
		m.Layers[i].Annotations = map[string]string{layers.AnnotationPredicateType: preds[i].Type}
	}
	att = &annotatedImage{Image: att, m: m}
	attDg, err := att.Digest()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{MediaType: mt, Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}}},
		mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"},
			Annotations: map[string]string{layers.AnnotationRefType: layers.RefTypeAttestation, layers.AnnotationRefDigest: dg.String()}}},
	)
	idg, err := idx.Digest()
	if err != nil {
		return nil, v1.Hash{}, v1.Hash{}, fmt.Errorf("sbom: index: %v", err)
	}
	return idx, idg, attDg, nil
}

// annotatedImage serves a modified manifest over an image's blobs.
type annotatedImage struct {
	v1.Image
	m *v1.Manifest
}

func (a *annotatedImage) Manifest() (*v1.Manifest, error) { return a.m, nil }
func (a *annotatedImage) RawManifest() ([]byte, error)    { return json.Marshal(a.m) }
func (a *annotatedImage) Digest() (v1.Hash, error) {
	b, err := a.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	h, _, err := v1.SHA256(bytesReader(b))
	return h, err
}
func (a *annotatedImage) Size() (int64, error) {
	b, err := a.RawManifest()
	return int64(len(b)), err
}

var _ v1.Image = (*annotatedImage)(nil)
