package recipes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"name: a\ntorch:\n  version: 2.5.1\n  bogus: 1\n", "kiln.yaml:4:3: torch.bogus: unknown field \"bogus\""},
		{"name: a\ntorhc: {}\n", "kiln.yaml:2:1: torhc: unknown field \"torhc\" (did you mean \"torch\"?)"},
		{"name: a\ngpus: h100\n", "kiln.yaml:2:7: gpus: expected a list, got a string"},
		{"name: a\ntorch: [1]\n", "kiln.yaml:2:8: torch: expected a mapping, got a list"},
		{"name: a\nbuild:\n  memory_gb: lots\n", "kiln.yaml:3:14: build.memory_gb: expected an integer, got \"lots\""},
		{"name: a\npython: [3]\n", "kiln.yaml:2:9: python: expected a string, got a list"},
		{"name: a\ncuda: twelve\n", "kiln.yaml:2:7: cuda: \"twelve\" is not a CUDA version"},
		{"name: a\ngpus: [h100, k80]\n", "kiln.yaml:2:14: gpus[1]: unknown GPU \"k80\""},
		{"name: a\nplatforms: [linux/s390x]\n", "kiln.yaml:2:13: platforms[0]: \"linux/s390x\": want linux/amd64 or linux/arm64"},
		{"name: a\nweights:\n  - source: hf://x/y\n    mount: models\n", "kiln.yaml:4:12: weights[0].mount: \"models\" must be an absolute path"},
		{"name: a\nregistry_mirror: https://m.example\n", "kiln.yaml:2:18: registry_mirror:"},
		{"name: a\nruntime_base: slim\n", "kiln.yaml:2:15: runtime_base: \"slim\": want auto, base or runtime"},
		{"name: a\nos: windows\n", "kiln.yaml:2:5: os: unknown OS flavour \"windows\""},
		{"name: A B\n", "kiln.yaml:1:7: name: \"A B\": use lower-case"},
		{"cuda: '12.4'\n", "kiln.yaml: name: required"},
		{"name: a\nname: b\n", "kiln.yaml:2:1:"},
		{"name: [\n", "kiln.yaml:1:7:"},
		{"", "kiln.yaml: empty recipe"},
		{"name: a\n---\nname: b\n", "a recipe is one YAML document"},
		{"name: a\nflash_attn: {build: fast}\n", "kiln.yaml:2:21: flash_attn.build: \"fast\": want auto, wheel or source"},
		{"name: a\napp:\n  workdir: app\n", "kiln.yaml:3:12: app.workdir: \"app\" must be an absolute path"},
		{"name: a\nwheel_indexes: [ftp://x]\n", "kiln.yaml:2:17: wheel_indexes[0]:"},
		{"name: a\ngpus: !foo [h100]\n", "kiln.yaml:2:7: gpus: YAML tags"},
		{"name: a\npip: [pyyaml==6.0.2]\npip_from_source: [ujson]\n", "kiln.yaml:3:19: pip_from_source[0]: \"ujson\" is not in pip: list its requirement there"},
		{"name: a\npip: [pyyaml>=6]\npip_from_source: [PyYAML]\n", "pip_from_source[0]: \"PyYAML\": its requirement \"pyyaml>=6\" is not pinned: pin it with =="},
		{"name: a\npip: [pyyaml==6.0.2]\npip_from_source: [pyyaml, PyYAML]\n", "pip_from_source[1]: \"PyYAML\" is listed twice"},
		{"name: a\npip: [pyyaml==6.0.2]\npip_from_source: [pyyaml==6.0.2]\n", "pip_from_source[0]: \"pyyaml==6.0.2\": want a project name from pip"},
		{"name: a\nflash_attn: {version: 2.7.4.post1}\npip_from_source: [flash_attn]\n", "pip_from_source[0]: \"flash_attn\": FlashAttention is compiled with flash_attn: {build: source}"},
	}
	for _, tc := range cases {
		_, err := Parse("kiln.yaml", []byte(tc.yaml))
		if err == nil {
			t.Errorf("%q: parsed, want %q", tc.yaml, tc.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %q\n want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestParseKeepsVersionText(t *testing.T) {
	r, err := Parse("k.yaml", []byte("name: a\ncuda: 12.10\npython: 3.10\napp:\n  env: {V: 1.20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.CUDA != "12.10" || r.Python != "3.10" || r.App.Env["V"] != "1.20" {
		t.Errorf("got %q %q %v", r.CUDA, r.Python, r.App.Env)
	}
}

func TestHashIgnoresFormatting(t *testing.T) {
	a, _ := Parse("a", []byte("name: a\ncuda: '12.4'\n"))
	b, _ := Parse("b", []byte("# comment\ncuda: \"12.4\"\nname:   a\n"))
	c, _ := Parse("c", []byte("name: a\ncuda: '12.6'\n"))
	if a.Hash() != b.Hash() || a.Hash() == c.Hash() {
		t.Errorf("hashes %s %s %s", a.Hash(), b.Hash(), c.Hash())
	}
}

func TestCatalogParsesAndResolves(t *testing.T) {
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 4 {
		t.Fatalf("catalog has %d recipes", len(all))
	}
	for _, e := range all {
		if e.Description == "" {
			t.Errorf("%s: no description", e.Name)
		}
		// testdata/recipes holds a copy of each catalog recipe for the golden tests.
		b, err := os.ReadFile(filepath.Join("..", "testdata", "recipes", e.Name+".yaml"))
		if err != nil || string(b) != string(e.Source) {
			t.Errorf("testdata/recipes/%s.yaml differs from the catalog (copy recipes/catalog/*.yaml there)", e.Name)
		}
	}
	if _, err := CatalogRecipe("nope"); err == nil || !strings.Contains(err.Error(), "torch25-cu124") {
		t.Errorf("CatalogRecipe(nope) = %v", err)
	}
}

func FuzzParseRecipe(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "recipes", "*.yaml"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("name: a\ntorch: {version: 2.5.1}\n"))
	f.Add([]byte("name: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("kiln.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kiln.yaml") {
				t.Fatalf("error without file prefix: %v", err)
			}
			return
		}
		// A recipe that parses is valid: the resolver may refuse it, never panic.
		_, _ = Resolve(t.Context(), r)
		_ = r.Hash()
	})
}

// A control character in any recipe value is refused with the file and the
// field: a newline would start a new Dockerfile instruction in the export
// (issue 27 D8) that kiln build never runs.
func TestParseRefusesControlCharacters(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"name: a\napp:\n  workdir: \"/app\\nRUN touch /x\"\n", `kiln.yaml:3:12: app.workdir: "/app\nRUN touch /x" holds the control character U+000A`},
		{"name: a\napp:\n  user: \"app\\nRUN id\"\n", "kiln.yaml:3:9: app.user:"},
		{"name: a\napp:\n  files:\n    - {src: app, dst: \"/app\\nRUN id\"}\n", "app.files[0].dst:"},
		{"name: a\napp:\n  env: {A: \"x\\ty\"}\n", "app.env.A: \"x\\ty\" holds the control character U+0009"},
		{"name: a\napp:\n  cmd: [\"a\\rb\"]\n", "app.cmd[0]:"},
		{"name: a\ntest: [\"true\\nRUN touch /x\"]\n", "kiln.yaml:2:8: test[0]:"},
		{"name: a\npip: [\"numpy\\nRUN id\"]\n", "kiln.yaml:2:7: pip[0]:"},
		{"name: a\nweights:\n  - {source: \"hf://x/y\\u001b[2J\", mount: /m}\n", "weights[0].source:"},
	}
	for _, tc := range cases {
		_, err := Parse("kiln.yaml", []byte(tc.yaml))
		if err == nil {
			t.Errorf("%q: parsed, want %q", tc.yaml, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %q\n want %q", tc.yaml, err, tc.want)
		}
	}
	// A description may span lines: it is never written into the image.
	if _, err := Parse("kiln.yaml", []byte("name: a\ncuda: '12.4'\ndescription: |\n  two\n  lines\n")); err != nil {
		t.Errorf("multi-line description refused: %v", err)
	}
}

// wheel_cache: parsed and checked; where wheels are cached is not part of
// the recipe's hash (it changes no image, and leaves the lock fresh).
func TestWheelCacheSpec(t *testing.T) {
	base := "name: a\ncuda: \"12.4\"\n"
	r0, err := Parse("kiln.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse("kiln.yaml", []byte(base+"wheel_cache: {repo: ghcr.io/acme/wheels, mirror: \"mirror.local:5000\", allow_wider_archs: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if wc := r.WheelCache; wc == nil || wc.Repo != "ghcr.io/acme/wheels" || wc.Mirror != "mirror.local:5000" || !wc.AllowWiderArchs {
		t.Fatalf("wheel_cache %+v", r.WheelCache)
	}
	if r.Hash() != r0.Hash() {
		t.Error("wheel_cache changed the recipe's hash")
	}
	for _, bad := range []string{"{repo: \"ghcr.io/acme/wheels:v1\"}", "{repo: \"https://ghcr.io/acme/wheels\"}", "{mirror: \"http://m:5000\"}", "{allow_wider: true}"} {
		if _, err := Parse("kiln.yaml", []byte(base+"wheel_cache: "+bad+"\n")); err == nil || !strings.Contains(err.Error(), "wheel_cache") {
			t.Errorf("wheel_cache: %s: %v", bad, err)
		}
	}
}

// pip_from_source marks the requirement in the plan (Compiled, the
// table's pip line) and leaves the others fetched as wheels.
func TestPipFromSourceInPlan(t *testing.T) {
	r, err := Parse("kiln.yaml", []byte("name: a\ncuda: \"12.4\"\npip: [transformers==4.46.3, Kiln_Demo.Ext==1.0]\npip_from_source: [kiln-demo-ext]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Compiled()
	if len(c) != 1 || c[0].Requirement != "Kiln_Demo.Ext==1.0" || c[0].Build != BuildSource {
		t.Fatalf("compiled %+v", c)
	}
	var b strings.Builder
	p.WriteTable(&b)
	if !strings.Contains(b.String(), "pip           transformers==4.46.3, Kiln_Demo.Ext==1.0 (from source)\n") {
		t.Errorf("table:\n%s", b.String())
	}
}
