//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/layers"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/kiln-build/kiln/internal/cdxschema"
	"github.com/kiln-build/kiln/internal/spdxcheck"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
)

// smallApp is a small linux/amd64 image with what the BOM must find (a
// dpkg status, a Python distribution, a versioned CUDA library), what slim
// removes (a static library, a header) and a safetensors file for
// weights strip.
func smallApp(t *testing.T, ref string) v1.Hash {
	t.Helper()
	st := []byte(`{"w":{"dtype":"F32","shape":[1024],"data_offsets":[0,4096]}}`)
	safet := make([]byte, 8, 8+len(st)+4096)
	binary.LittleEndian.PutUint64(safet, uint64(len(st)))
	safet = append(append(safet, st...), bytes.Repeat([]byte{7}, 4096)...)
	files := []struct {
		name string
		body []byte
	}{
		{"etc/os-release", []byte("ID=debian\n")},
		{"var/lib/dpkg/status", []byte("Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9+deb12u7\n\n")},
		{"usr/local/lib/python3.11/site-packages/torch-2.4.1.dist-info/METADATA", []byte("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n\n")},
		{"usr/local/cuda/lib64/libcudart.so.12.4.127", []byte("\x7fELF")},
		{"usr/lib/x86_64-linux-gnu/libfoo.a", bytes.Repeat([]byte("!<arch>\n"), 4096)},
		{"usr/include/foo.h", []byte("#define FOO 1\n")},
		{"app/models/model.safetensors", safet},
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
		tw.Write(f.body)
	}
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(ref, name.Insecure)
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d
}

func crane(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("crane", args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("crane %v: %v\n%s", args, err, stderr)
	}
	return out
}

type cdxDoc struct {
	SpecVersion string `json:"specVersion"`
	Metadata    struct {
		Component  struct{ Name, Version string } `json:"component"`
		Properties []struct{ Name, Value string } `json:"properties"`
	} `json:"metadata"`
	Components []struct {
		Type, Name, Version, PURL string
		Hashes                    []struct{ Alg, Content string } `json:"hashes"`
	} `json:"components"`
}

// validBOM validates b against the published schema and decodes it.
func validBOM(t *testing.T, b []byte) cdxDoc {
	t.Helper()
	if err := cdxschema.Validate(b); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	var d cdxDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSBOMSlimAndWeightsStrip: kiln slim --sbom and kiln weights strip
// --sbom, read back with crane (an outside client), the BOMs validated
// against the CycloneDX 1.6 schema, signed with --sign-key and verified by
// the real cosign, then warmed with --verify-key.
func TestSBOMSlimAndWeightsStrip(t *testing.T) {
	testdaemon.PruneAfter(t, true)
	if !answers(registry()) {
		needSign(t, "no registry at "+registry())
	}
	if _, err := exec.LookPath("crane"); err != nil {
		needSign(t, "no crane")
	}
	cosign := cosignBin(t)
	dir := t.TempDir()
	kiln := testdaemon.KilnBinary(t)
	k := makeKeys(t, cosign, dir)
	repo := fmt.Sprintf("%s/kiln-sbom-it/app%d", registry(), time.Now().UnixNano())
	src := repo + ":src"
	smallApp(t, src)

	// slim --sbom --sign-key: an index with the image and its attestation.
	slimmed := repo + ":slim"
	r := run(t, nil, kiln, "slim", src, "--to", slimmed, "--compression", "gzip", "--sbom", "--sign-key", k.pkcs8, "--json", "--progress", "none")
	if r.code != 0 {
		t.Fatalf("kiln slim --sbom: exit %d\n%s", r.code, r.err)
	}
	var sr struct {
		Images []struct {
			Digest, Index, SBOM string
			Signed              *sign.Signed
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(r.out), &sr); err != nil || len(sr.Images) != 1 || sr.Images[0].SBOM == "" || sr.Images[0].Signed == nil {
		t.Fatalf("slim report: %v\n%s", err, r.out)
	}
	im := sr.Images[0]
	var idx v1.IndexManifest
	if err := json.Unmarshal(crane(t, "manifest", slimmed), &idx); err != nil {
		t.Fatal(err)
	}
	if d := strings.TrimSpace(string(crane(t, "digest", slimmed))); d != im.Index || im.Signed.Digest != im.Index {
		t.Fatalf("tag resolves to %s; report index %s, signed %s", d, im.Index, im.Signed.Digest)
	}
	var att *v1.Descriptor
	for i, m := range idx.Manifests {
		if m.Annotations[layers.AnnotationRefType] == layers.RefTypeAttestation {
			att = &idx.Manifests[i]
		}
	}
	if att == nil || att.Digest.String() != im.SBOM || att.Annotations[layers.AnnotationRefDigest] != im.Digest {
		t.Fatalf("no attestation manifest for %s in %+v", im.Digest, idx.Manifests)
	}
	var am v1.Manifest
	json.Unmarshal(crane(t, "manifest", repo+"@"+att.Digest.String()), &am)
	if len(am.Layers) != 2 || am.Layers[0].Annotations[layers.AnnotationPredicateType] != sbom.PredicateType || am.Layers[1].Annotations[layers.AnnotationPredicateType] != sbom.SPDXPredicateType {
		t.Fatalf("attestation manifest: %+v", am)
	}
	// The SPDX statement (what buildx imagetools reads) parses with the
	// SPDX project's tools and lists the same packages.
	var sst struct {
		PredicateType string
		Predicate     json.RawMessage
	}
	if err := json.Unmarshal(crane(t, "blob", repo+"@"+am.Layers[1].Digest.String()), &sst); err != nil || sst.PredicateType != sbom.SPDXPredicateType {
		t.Fatalf("SPDX statement: %v %s", err, sst.PredicateType)
	}
	if err := spdxcheck.Validate(sst.Predicate); err != nil {
		t.Fatalf("%v\n%s", err, sst.Predicate)
	}
	if !strings.Contains(string(sst.Predicate), "pkg:pypi/torch@2.4.1") || !strings.Contains(string(sst.Predicate), "kiln:slim:removed") {
		t.Errorf("SPDX document lacks torch or what slim removed:\n%s", sst.Predicate)
	}
	var st struct {
		PredicateType string
		Subject       []struct{ Digest map[string]string }
		Predicate     json.RawMessage
	}
	if err := json.Unmarshal(crane(t, "blob", repo+"@"+am.Layers[0].Digest.String()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Subject[0].Digest["sha256"] != strings.TrimPrefix(im.Digest, "sha256:") {
		t.Fatalf("statement subject %v, want %s", st.Subject, im.Digest)
	}
	bom := validBOM(t, st.Predicate)
	have := map[string]bool{}
	for _, c := range bom.Components {
		have[c.Name+"@"+c.Version] = true
	}
	for _, want := range []string{"libc6@2.36-9+deb12u7", "torch@2.4.1", "libcudart@12.4.127"} {
		if !have[want] {
			t.Errorf("BOM lacks %s: %v", want, have)
		}
	}
	removed := ""
	for _, p := range bom.Metadata.Properties {
		if p.Name == "kiln:slim:removed" {
			removed += p.Value + "; "
		}
	}
	if !strings.Contains(removed, "static_libs") {
		t.Errorf("BOM does not say slim removed the static library: %q", removed)
	}
	if v := cosignVerify(t, cosign, k.pkcs8Pub, slimmed); v.code != 0 {
		t.Fatalf("cosign verify of the slimmed index: exit %d\n%s", v.code, v.err)
	}

	// weights strip --sbom --sign-key: the image and the artifact signed,
	// the artifact's BOM (files with digests) as its referrer.
	stripped, wrepo := repo+":stripped", repo+"-weights"
	r = run(t, nil, kiln, "weights", "strip", src, "--to", stripped, "--weights-to", wrepo+":w", "--sbom", "--sign-key", k.pkcs8, "--json", "--progress", "none")
	if r.code != 0 {
		t.Fatalf("kiln weights strip --sbom: exit %d\n%s", r.code, r.err)
	}
	var wr struct {
		Weights  string         `json:"weights"`
		SBOM     string         `json:"sbom"`
		Signed   []*sign.Signed `json:"signed"`
		Manifest struct {
			Files []struct{ Path, SHA256 string } `json:"files"`
		} `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(r.out), &wr); err != nil || wr.SBOM == "" || len(wr.Signed) != 2 || len(wr.Manifest.Files) != 1 {
		t.Fatalf("strip report: %v\n%s", err, r.out)
	}
	var ref v1.Manifest
	json.Unmarshal(crane(t, "manifest", wrepo+"@"+wr.SBOM), &ref)
	if ref.Subject == nil || !strings.HasSuffix(wr.Weights, ref.Subject.Digest.String()) || len(ref.Layers) != 1 {
		t.Fatalf("SBOM referrer %s: %+v (weights %s)", wr.SBOM, ref, wr.Weights)
	}
	wb := validBOM(t, crane(t, "blob", wrepo+"@"+ref.Layers[0].Digest.String()))
	// The volume is the mount directory whole (here the weights alone):
	// one component per file, with its digest.
	if len(wb.Components) != len(wr.Manifest.Files) {
		t.Fatalf("weights BOM components %+v, manifest files %+v", wb.Components, wr.Manifest.Files)
	}
	sums := map[string]string{}
	for _, f := range wr.Manifest.Files {
		sums[f.Path] = f.SHA256
	}
	for _, c := range wb.Components {
		if len(c.Hashes) != 1 || sums[c.Name] == "" || c.Hashes[0].Content != sums[c.Name] {
			t.Fatalf("weights BOM components %+v, manifest files %+v", wb.Components, wr.Manifest.Files)
		}
	}
	for _, ref := range []string{stripped, wr.Weights} {
		if v := cosignVerify(t, cosign, k.pkcs8Pub, ref); v.code != 0 {
			t.Fatalf("cosign verify %s: exit %d\n%s", ref, v.code, v.err)
		}
	}

	// Warm with verify-before-ready: image and weights artifact both
	// checked; a policy whose key for the weights repository signed
	// nothing refuses the weights, naming them, before any blob.
	vol := filepath.Join(t.TempDir(), "vol")
	w := run(t, nil, kiln, "warm", stripped, "--target", "oci:"+filepath.Join(t.TempDir(), "oci"), "--weights-into", vol, "--verify-key", k.pkcs8Pub, "--json", "--progress", "none")
	var rep warmJSON
	if err := json.Unmarshal([]byte(w.out), &rep); err != nil || w.code != 0 || !rep.Ready || len(rep.Signatures) != 2 {
		t.Fatalf("warm stripped + weights: exit %d %v\n%s%s", w.code, err, w.out, w.err)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("schema: kiln.verify-policy/v1\nkeys:\n  - scope: %s\n    key: %s\n  - scope: %s\n    key: %s\n", repo, k.pkcs8Pub, wrepo, k.otherPub)), 0o644)
	vol2 := filepath.Join(t.TempDir(), "vol")
	w = run(t, nil, kiln, "warm", stripped, "--target", "oci:"+filepath.Join(t.TempDir(), "oci"), "--weights-into", vol2, "--verify-key", pol, "--json", "--progress", "none")
	if w.code != 4 || !strings.Contains(w.err, wrepo) || !strings.Contains(w.err, sign.ReasonWrongKey) {
		t.Fatalf("warm with the wrong weights key: exit %d\n%s", w.code, w.err)
	}
	if ents, _ := os.ReadDir(vol2); len(ents) != 0 {
		t.Fatalf("refused warm wrote %d entries into the volume", len(ents))
	}
}
