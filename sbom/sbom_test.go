package sbom

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/kiln-build/kiln/internal/cdxschema"
	"github.com/kiln-build/kiln/internal/spdxcheck"
	"github.com/kiln-build/kiln/layers"
)

func layer(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(c))
	}
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const status = `Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u7
Description: GNU C Library
 multi-line description

Package: removed-pkg
Status: deinstall ok config-files
Version: 1.0

Package: libcudnn9-cuda-12
Status: install ok installed
Architecture: amd64
Source: cudnn
Version: 9.1.0.70-1
`

// testImage: dpkg status, os-release, two Python distributions (one
// whited out by the upper layer) and CUDA libraries.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image,
		layer(t, map[string]string{
			"var/lib/dpkg/status": status,
			"etc/os-release":      "PRETTY_NAME=\"Debian GNU/Linux 12\"\nID=debian\n",
			"usr/local/lib/python3.11/site-packages/torch-2.4.1.dist-info/METADATA":      "Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n\nName: not-this\n",
			"usr/local/lib/python3.11/site-packages/Flash_Attn-2.6.3.dist-info/METADATA": "Name: Flash_Attn\nVersion: 2.6.3\n",
			"usr/local/cuda/lib64/libcudart.so.12.4.127":                                 "\x7fELF",
			"usr/local/cuda/lib64/libcudart.so.12":                                       "\x7fELF",
		}),
		layer(t, map[string]string{
			"usr/local/lib/python3.11/site-packages/.wh.Flash_Attn-2.6.3.dist-info": "",
			"usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0":                            "\x7fELF",
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestScanImage(t *testing.T) {
	comps, err := ScanImage(testImage(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range comps {
		got[c.Name+"@"+c.Version] = c.PURL
	}
	for k, purl := range map[string]string{
		"libc6@2.36-9+deb12u7":         "pkg:deb/debian/libc6@2.36-9+deb12u7?arch=amd64",
		"libcudnn9-cuda-12@9.1.0.70-1": "pkg:deb/debian/libcudnn9-cuda-12@9.1.0.70-1?arch=amd64",
		"torch@2.4.1":                  "pkg:pypi/torch@2.4.1",
		"libcudart@12.4.127":           "",
		"libcudnn@9.1.0":               "",
	} {
		p, ok := got[k]
		if !ok {
			t.Errorf("missing %s in %v", k, got)
		} else if p != purl {
			t.Errorf("%s: purl %q, want %q", k, p, purl)
		}
	}
	for _, k := range []string{"removed-pkg@1.0", "Flash_Attn@2.6.3", "not-this@"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s listed: deinstalled or whited out", k)
		}
	}
	if len(got) != 5 {
		t.Errorf("%d components: %v", len(got), got)
	}
}

func validate(t *testing.T, b []byte) {
	t.Helper()
	if err := cdxschema.Validate(b); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
}

func validateSPDX(t *testing.T, bom *BOM) {
	t.Helper()
	b, err := bom.SPDX()
	if err != nil {
		t.Fatal(err)
	}
	if err := spdxcheck.Validate(b); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
}

func TestBOMValidatesAgainstSchema(t *testing.T) {
	img := testImage(t)
	comps, err := ScanImage(img)
	if err != nil {
		t.Fatal(err)
	}
	dg, _ := img.Digest()
	props := []Property{{"kiln:slim:removed", "static-libs: 3 files, 1024 bytes"}}
	b, err := New(Subject{Name: "reg.local/acme/serve", Digest: dg.String()}, comps, props, "test", time.Unix(0, 0)).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	validate(t, b)
	// Files with hashes (a weights artifact) and an empty BOM validate too.
	wb, _ := New(Subject{Name: "reg.local/acme/w", Digest: dg.String(), Type: TypeData},
		[]Component{{Type: TypeFile, Name: "model.safetensors", Hashes: []Hash{{"SHA-256", strings.Repeat("ab", 32)}}}}, nil, "test", time.Now()).Marshal()
	validate(t, wb)
	eb, _ := New(Subject{Name: "x", Digest: dg.String()}, nil, nil, "test", time.Now()).Marshal()
	validate(t, eb)
	// The same components as SPDX 2.3, parsed by the SPDX project's tools.
	validateSPDX(t, New(Subject{Name: "reg.local/acme/serve", Digest: dg.String()}, comps, props, "test", time.Unix(0, 0)))
	validateSPDX(t, New(Subject{Name: "reg.local/acme/w", Digest: dg.String(), Type: TypeData},
		[]Component{{Type: TypeFile, Name: "model.safetensors", Hashes: []Hash{{"SHA-256", strings.Repeat("ab", 32)}}}}, nil, "test", time.Now()))
	if err := spdxcheck.Validate([]byte(`{"spdxVersion":"SPDX-2.3","SPDXID":"SPDXRef-DOCUMENT","relationships":[{"spdxElementId":"SPDXRef-DOCUMENT","relationshipType":"DESCRIBES","relatedSpdxElement":"SPDXRef-Nothing"}]}`)); err == nil {
		t.Fatal("spdxcheck accepted a relationship to a missing element")
	}
	// The validator does refuse: a component type CycloneDX does not know.
	if err := cdxschema.Validate([]byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1,"components":[{"type":"nonsense","name":"x"}]}`)); err == nil {
		t.Fatal("schema accepted an unknown component type")
	}
	// Same image, same serial number.
	b2, _ := New(Subject{Name: "reg.local/acme/serve", Digest: dg.String()}, comps, props, "test", time.Unix(0, 0)).Marshal()
	if !bytes.Equal(b, b2) {
		t.Error("two BOMs of one image differ")
	}
}

// The index kiln writes is BuildKit's layout: the image with its
// platform, then an unknown/unknown attestation manifest naming it.
func TestWithAttestation(t *testing.T) {
	img := testImage(t)
	dg, _ := img.Digest()
	idx, idg, att, err := WithAttestation(img, "pkg:docker/reg.local/acme/serve?platform=linux%2Famd64",
		Predicate{PredicateType, []byte(`{"bomFormat":"CycloneDX"}`)}, Predicate{SPDXPredicateType, []byte(`{"spdxVersion":"SPDX-2.3"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != idg {
		t.Fatal("index digest")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 || im.Manifests[0].Digest != dg || im.Manifests[0].Platform.Architecture != "amd64" {
		t.Fatalf("manifests: %+v", im.Manifests)
	}
	a := im.Manifests[1]
	if a.Digest != att || a.Platform.OS != "unknown" || a.Annotations[layers.AnnotationRefType] != layers.RefTypeAttestation || a.Annotations[layers.AnnotationRefDigest] != dg.String() {
		t.Fatalf("attestation descriptor: %+v", a)
	}
	ai, err := idx.Image(att)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ai.Manifest()
	if len(m.Layers) != 2 || m.Layers[0].MediaType != inTotoMediaType || m.Layers[0].Annotations[layers.AnnotationPredicateType] != PredicateType || m.Layers[1].Annotations[layers.AnnotationPredicateType] != SPDXPredicateType {
		t.Fatalf("attestation manifest: %+v", m)
	}
	ls, _ := ai.Layers()
	rc, _ := ls[0].Compressed()
	var st statement
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.PredicateType != PredicateType || st.Subject[0].Digest["sha256"] != dg.Hex {
		t.Fatalf("statement: %+v", st)
	}
	// The manifest's raw bytes hash to its descriptor (what a registry checks).
	raw, _ := ai.RawManifest()
	if h, _, _ := v1.SHA256(bytes.NewReader(raw)); h != att {
		t.Fatalf("attestation manifest bytes hash to %s, descriptor says %s", h, att)
	}
}
