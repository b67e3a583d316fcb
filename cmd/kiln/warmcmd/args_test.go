package warmcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/weights"
)

// kiln warm's arguments are classified once, by one rule
// (localfile.ReadArg): a lock's runtime images and plain references come
// out parsed, a weights manifest file decoded from the bytes read then;
// nothing reads or parses them again.
func TestWarmArgsClassifiedOnce(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dg := "sha256:" + strings.Repeat("a", 64)
	lock := write("kiln.lock", `{"lock_version": 1, "recipe": "kiln.yaml", "recipe_sha256": "sha256:`+strings.Repeat("1", 64)+`", "data_version": "2026-11",
		"plan": {"name": "serve", "cuda": "12.4.1", "os": "debian13", "python": "3.11"},
		"base_images": {"runtime": {"ref": "127.0.0.1:5000/nvidia/cuda:12.4.1-base-debian13", "digest": "`+dg+`", "platforms": {"linux/amd64": "`+dg+`"}}},
		"wheels": [], "warnings": []}`)
	m := &weights.Manifest{SchemaVersion: weights.SchemaVersion, MediaType: weights.MediaTypeManifest, Mount: "/models", Size: 1,
		Files:  []weights.File{{Path: "m.safetensors", Size: 1, SHA256: strings.Repeat("a", 64), Mode: 0o644, Layer: dg}},
		Layers: []weights.Layer{{Digest: dg, MediaType: weights.MediaTypeWeightRaw, Size: 1}}}
	m.SetDigest = weights.SetDigest(m.Files)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	man := write("volume.json", string(b))

	parse := func(args ...string) (*warmFlags, error) {
		t.Helper()
		o, err := cmdtest.Options(t, NewCmdWarm, append(args, "--target", "oci:"+dir+"/out")...)
		if err != nil {
			t.Fatal(err)
		}
		return parseWarmFlags(o)
	}
	fl, err := parse("127.0.0.1:5000/acme/app:v1", lock, man)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range fl.refs {
		if r.Kind != layers.KindRegistry || r.Name == nil {
			t.Errorf("%s: not parsed (%+v)", r.Raw, r)
		}
		got = append(got, r.Raw)
	}
	want := []string{"127.0.0.1:5000/acme/app:v1", "127.0.0.1:5000/nvidia/cuda@" + dg}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("refs %q, want %q (the reference, then the lock's runtime image by digest)", got, want)
	}
	if len(fl.manifests) != 1 || fl.manifests[0].Path != man || fl.manifests[0].Manifest.SetDigest != m.SetDigest {
		t.Errorf("manifests %+v, want %s decoded", fl.manifests, man)
	}

	// A file named .json that is neither is a usage error naming it.
	other := write("other.json", `{"schemaVersion": 2}`)
	if _, err := parse(other); err == nil || !strings.Contains(err.Error(), other) {
		t.Errorf("%s: %v", other, err)
	}
}
