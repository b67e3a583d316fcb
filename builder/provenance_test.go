package builder

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
)

func TestProvenanceAttr(t *testing.T) {
	for _, tc := range []struct {
		mode, id, want, err string
	}{
		{mode: "", want: ""},
		{mode: "none", want: ""},
		{mode: "max", want: "mode=max,version=v1"},
		{mode: "min", id: "https://ci.example/job/7", want: "mode=min,version=v1,builder-id=https://ci.example/job/7"},
		{mode: "full", err: `provenance "full": want min, max or none`},
		{mode: "max", id: "a,b", err: "no commas"},
	} {
		got, err := provenanceAttr(tc.mode, tc.id)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: err %v, want %q", tc.mode, tc.id, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q %q: %q %v, want %q", tc.mode, tc.id, got, err, tc.want)
		}
	}
}

func TestProvenanceParams(t *testing.T) {
	torch := "2.6.0+cu124"
	p := &recipes.Plan{Name: "serve", CUDA: "12.4.1", Torch: &torch, CUDAArchs: []string{"8.0", "9.0"},
		BaseImages: recipes.BaseImages{Runtime: "nvidia/cuda:12.4.1-base-debian13", Devel: "nvidia/cuda:12.4.1-devel-debian13"}}
	// A cached wheel (N4) is named with its digest: code in the image no
	// step of the build compiled.
	cached := map[WheelSlot]string{{"linux/amd64", "flash-attn"}: "flash_attn-2.7.4-cp312-cp312-linux_x86_64.whl@sha256:ab"}
	got := provenanceParams(p, Inputs{RecipeHash: "sha256:r", LockDigest: "sha256:l", CachedWheelDigests: cached}, map[string]string{"version": "v9"})
	want := map[string]string{
		"recipe": "serve", "recipe-sha256": "sha256:r", "lock-sha256": "sha256:l", "cuda": "12.4.1", "torch": torch,
		"cuda-archs": "8.0,9.0", "runtime-base": p.BaseImages.Runtime, "devel-base": p.BaseImages.Devel, "version": "v9",
		"cached-wheel.flash-attn.linux/amd64": "flash_attn-2.7.4-cp312-cp312-linux_x86_64.whl@sha256:ab",
	}
	if len(got) != len(want) {
		t.Errorf("params %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("param %s = %q, want %q", k, got[k], v)
		}
	}
}

// A max-mode provenance publishes every step's command, pip's index URL
// among them: credentials in it refuse the build, and the error does not
// repeat them.
func TestProvenanceSafe(t *testing.T) {
	p := &recipes.Plan{WheelIndexes: []string{"https://pypi.example/simple"},
		Pip: []recipes.PipPackage{{Name: "torch", IndexURL: "https://tok3n-s3cret@download.example/whl/cu124"}}}
	if err := provenanceSafe(p, "min"); err != nil {
		t.Errorf("min mode: %v", err)
	}
	err := provenanceSafe(p, "max")
	if err == nil || !strings.Contains(err.Error(), "pip torch index_url") || !strings.Contains(err.Error(), "--provenance min") {
		t.Fatalf("max mode: %v", err)
	}
	if strings.Contains(err.Error(), "tok3n") {
		t.Errorf("the error repeats the credential: %v", err)
	}
	p.Pip[0].IndexURL = "https://download.example/whl/cu124"
	if err := provenanceSafe(p, "max"); err != nil {
		t.Errorf("no credentials: %v", err)
	}
}

// checkProvenance builds the plan again (cached) into gzip and zstd
// outputs with a max-mode provenance and an SBOM attestation, and checks
// what BuildKit pushed: for each output an index whose image is byte for
// byte the reproducible one (want, the first build's), and, for the gzip
// one, an attestation manifest beside it holding the SLSA v1 provenance,
// with the build's steps in buildConfig, kiln's parameters as a statement
// beside it, and the SBOM as a statement about the image.
func checkProvenance(t *testing.T, ctx context.Context, build func(tag string, o Options) *Result, repo string, want []Pushed, in Inputs) *Result {
	t.Helper()
	bom := []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","components":[{"type":"library","name":"torch","version":"2.6.0+cu124"}]}`)
	outs := []Output{mustOutput(t, repo+":v2-provenance"), {Ref: mustOutput(t, repo+":v2-provenance-zstd").Ref, Compression: "zstd"}}
	res := build("v2-provenance", Options{Outputs: outs, Provenance: "max", BuilderID: "https://ci.example/kiln/e2e",
		Params:       map[string]string{"version": "e2e"},
		Attestations: []Attestation{{PredicateType: "https://cyclonedx.org/bom", Path: "sbom.cdx.json", Body: bom, SBOM: true}},
		// The image's own files, read through BuildKit's file API before
		// the export: what kiln build --sbom lists.
		Attest: func(ctx context.Context, platform string, f sbom.Files) ([]Attestation, error) {
			comps, err := sbom.ScanFiles(ctx, f, "amd64")
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(comps)
			return []Attestation{{PredicateType: "https://kiln.dev/test/components", Path: "components.json", Body: b}}, err
		}})
	if len(res.Pushed) != len(want) {
		t.Fatalf("pushed %+v, want %d outputs", res.Pushed, len(want))
	}
	// Each output is an index around the image the first build pushed
	// (gzip, then zstd): the cached rebuild's images are the same.
	for k, pu := range res.Pushed {
		if pu.Compression != want[k].Compression || pu.Images["linux/amd64"] != want[k].Digest || len(pu.Images) != 1 {
			t.Errorf("provenance build's %s images %v, want linux/amd64 %s %s (the reproducible image, unchanged)", pu.Compression, pu.Images, want[k].Compression, want[k].Digest)
		}
		if pu.Digest == want[k].Digest {
			t.Fatalf("provenance build pushed %s, the bare image: no index", pu.Digest)
		}
	}
	pu, imageDigest := res.Pushed[0], want[0].Digest
	ref, err := name.ParseReference(repo+"@"+pu.Digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pushed index: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var att *v1.Descriptor
	for i, d := range im.Manifests {
		if layers.IsAttestation(d.Annotations) {
			att = &im.Manifests[i]
		}
	}
	if att == nil || att.Annotations[layers.AnnotationRefDigest] != imageDigest {
		t.Fatalf("index %s: no attestation manifest for %s: %+v", pu.Digest, imageDigest, im.Manifests)
	}
	ai, err := idx.Image(att.Digest)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := ai.Layers()
	if err != nil {
		t.Fatal(err)
	}
	preds := map[string][]byte{}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
			Predicate json.RawMessage `json:"predicate"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("attestation layer: %v", err)
		}
		if len(st.Subject) == 0 || "sha256:"+st.Subject[0].Digest["sha256"] != imageDigest {
			t.Errorf("%s statement's subject %+v, want %s", st.PredicateType, st.Subject, imageDigest)
		}
		preds[st.PredicateType] = st.Predicate
	}
	var prov struct {
		BuildDefinition struct {
			BuildType          string `json:"buildType"`
			InternalParameters struct {
				BuildConfig struct {
					LLBDefinition []json.RawMessage `json:"llbDefinition"`
				} `json:"buildConfig"`
			} `json:"internalParameters"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
		} `json:"runDetails"`
	}
	pb, ok := preds["https://slsa.dev/provenance/v1"]
	if !ok {
		t.Fatalf("attestation manifest holds %v, no SLSA v1 provenance", keys(preds))
	}
	if err := json.Unmarshal(pb, &prov); err != nil {
		t.Fatal(err)
	}
	var kp struct {
		Parameters map[string]string `json:"parameters"`
	}
	if err := json.Unmarshal(preds[KilnParamsPredicateType], &kp); err != nil {
		t.Fatalf("kiln's build parameters statement: %v (%s)", err, preds[KilnParamsPredicateType])
	}
	for k, v := range map[string]string{"recipe-sha256": in.RecipeHash, "version": "e2e", "torch": "2.6.0", "torch-cuda-variant": "cu124", "cuda": "12.4.1"} {
		if kp.Parameters[k] != v {
			t.Errorf("kiln parameter %s = %q, want %q (%v)", k, kp.Parameters[k], v, kp.Parameters)
		}
	}
	if prov.RunDetails.Builder.ID != "https://ci.example/kiln/e2e" {
		t.Errorf("builder id %q", prov.RunDetails.Builder.ID)
	}
	if n := len(prov.BuildDefinition.InternalParameters.BuildConfig.LLBDefinition); n < 10 {
		t.Errorf("mode=max provenance records %d LLB steps, want the build's graph", n)
	}
	if string(preds["https://cyclonedx.org/bom"]) == "" || !strings.Contains(string(preds["https://cyclonedx.org/bom"]), `"torch"`) {
		t.Errorf("SBOM statement %s", preds["https://cyclonedx.org/bom"])
	}
	var comps []sbom.Component
	if err := json.Unmarshal(preds["https://kiln.dev/test/components"], &comps); err != nil {
		t.Fatalf("scanned components: %v", err)
	}
	found := map[string]string{}
	for _, c := range comps {
		found[c.Name] = c.Version
	}
	for name, v := range map[string]string{"torch": "2.6.0+cu124", "nvidia-cublas-cu12": "", "libc6": ""} {
		if got, ok := found[name]; !ok || v != "" && got != v {
			t.Errorf("the build result's scan: %s = %q (found %v), want %q", name, got, ok, v)
		}
	}
	// kiln's own readers take the image out of the index.
	img, err := testkit.OpenImage(ctx, repo+":v2-provenance")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if img.Digest.String() != imageDigest {
		t.Errorf("layers.Open of the provenance tag: %s, want the image %s", img.Digest, imageDigest)
	}
	return res
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
