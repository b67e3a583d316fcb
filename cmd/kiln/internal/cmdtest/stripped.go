package cmdtest

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// StrippedApp pushes a small app image with two weight files to the
// registry at host reg and strips it with kiln weights strip (weightsVerb,
// the weights verb's NewCmd): it returns the slim image's reference and
// the weights artifact's, pinned by digest. The verb is handed in so that
// the weights verb's own tests and warm's run the same strip.
func StrippedApp(t *testing.T, reg string, weightsVerb Verb) (string, string) {
	t.Helper()
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/bin"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 3000)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/serve.py", []byte("print('hi')\n")),
			testimage.Safetensors("app/models/m-00001.safetensors", 20<<20), testimage.Safetensors("app/models/m-00002.safetensors", 5000)}, "gzip"))
	testimage.WriteLayout(t, filepath.Join(dir, "src"), "app", img)
	slimRef := reg + "/acme/serve:slim"
	wref := reg + "/acme/serve-weights:v1"
	code, out, errOut := Run(t, []Verb{weightsVerb}, "weights", "strip", "oci:"+filepath.Join(dir, "src")+":app", "--to", slimRef, "--weights-to", wref, "--json", "--progress", "none")
	if code != 0 {
		t.Fatalf("strip: code %d\n%s\n%s", code, out, errOut)
	}
	var r struct {
		Files   int    `json:"files"`
		Mount   string `json:"mount"`
		Weights string `json:"weights"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Files != 2 || r.Mount != "/app/models" || !strings.HasPrefix(r.Weights, reg+"/acme/serve-weights@sha256:") {
		t.Fatalf("strip result: %+v", r)
	}
	return slimRef, r.Weights
}
