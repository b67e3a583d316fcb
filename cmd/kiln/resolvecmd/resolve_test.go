package resolvecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testkit"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/recipes/*.golden")

func TestResolveGolden(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "recipes", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("recipes: %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := runResolve(context.Background(), &ResolveOptions{IO: &cmdutil.IO{Out: &out, ErrOut: &errOut}, File: f, JSON: true, Now: goldenNow})
			if err != nil {
				t.Fatalf("%v: %s", err, errOut.String())
			}
			var plan map[string]any
			if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"cuda", "cudnn", "python", "torch", "torch_cuda_variant", "flash_attn", "flash_attn_wheel", "bitsandbytes", "base_images", "cuda_archs", "min_driver", "warnings", "data"} {
				if _, ok := plan[k]; !ok {
					t.Errorf("plan lacks key %q", k)
				}
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *updateGolden {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/kiln -run TestResolveGolden -update)", err)
			}
			if !bytes.Equal(want, out.Bytes()) {
				t.Errorf("kiln resolve --json %s differs from %s (run with -update if intended):\n%s", f, golden, out.String())
			}
		})
	}
}

// goldenNow is the clock of golden plans: their data age must not change
// with the calendar.
func goldenNow() time.Time { return time.Date(2026, 12, 15, 12, 0, 0, 0, time.UTC) }

func TestResolveCommand(t *testing.T) {
	f := filepath.Join("..", "..", "..", "testdata", "recipes", "torch25-cu124.yaml")
	code, out, _ := run(t, "resolve", f)
	if code != 0 || !strings.Contains(out, "torch         2.5.1+cu124") || !strings.Contains(out, "min driver    550.54.15") {
		t.Errorf("code %d\n%s", code, out)
	}
	code, out, _ = run(t, "resolve", f, "--json", "--mirror", "127.0.0.1:5000")
	if code != 0 || !strings.Contains(out, `"devel": "127.0.0.1:5000/nvidia/cuda:12.4.1-devel-ubuntu22.04"`) {
		t.Errorf("mirror: code %d\n%s", code, out)
	}
	// A refusal exits 1 with the reason and alternatives.
	bad := cmdtest.WriteFile(t, "kiln.yaml", "name: x\ncuda: '12.4'\ntorch: {version: 2.8.0}\n")
	code, _, errOut := run(t, "resolve", bad)
	if code != 1 || !strings.Contains(errOut, "torch 2.8 has no cu124 wheels") || !strings.Contains(errOut, "try: torch 2.6 or 2.5 with cuda 12.4") {
		t.Errorf("code %d\n%s", code, errOut)
	}
	code, out, _ = run(t, "resolve", bad, "--json")
	var refusal struct {
		Field        string   `json:"field"`
		Reason       string   `json:"reason"`
		Alternatives []string `json:"alternatives"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &refusal) != nil || refusal.Field != "torch.version" || len(refusal.Alternatives) != 2 {
		t.Errorf("json refusal: code %d %s", code, out)
	}
	t4 := cmdtest.WriteFile(t, "kiln.yaml", "name: x\ncuda: '12.4'\ntorch: {version: 2.5.1}\nflash_attn: {}\ngpus: [t4]\n")
	if code, _, errOut := run(t, "resolve", t4); code != 1 || !strings.Contains(errOut, "FlashAttention 2 needs sm_80 or newer") {
		t.Errorf("t4: %d %s", code, errOut)
	}
	// Recipe errors carry file:line:col and the field path.
	typo := cmdtest.WriteFile(t, "kiln.yaml", "name: x\ntorch:\n  verison: 2.5.1\n")
	if code, _, errOut := run(t, "resolve", typo); code != 1 || !strings.Contains(errOut, "kiln.yaml:3:3: torch.verison: unknown field \"verison\" (did you mean \"version\"?)") {
		t.Errorf("typo: %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "resolve", filepath.Join(t.TempDir(), "missing.yaml")); code != 1 || !strings.Contains(errOut, "kiln recipes init") {
		t.Errorf("missing: %d %s", code, errOut)
	}
	if code, _, _ := run(t, "resolve", "a", "b"); code != 2 {
		t.Errorf("two args: exit %d, want 2", code)
	}
}

// A Python kiln cannot put in the image is refused, with what would work
// (issue 38): not left for pip to discover in the build.
func TestResolveRefusesPythonItCannotProvide(t *testing.T) {
	f := cmdtest.WriteFile(t, "kiln.yaml", "name: x\ncuda: '12.4'\nos: ubuntu22.04\npython: '3.8'\n")
	code, _, errOut := run(t, "resolve", f)
	if code != 1 || !strings.Contains(errOut, "kiln: refused: python: kiln cannot provide Python 3.8 on ubuntu22.04") ||
		!strings.Contains(errOut, "\n  try: python: \"3.10\" (the Python ubuntu22.04 ships)\n") || !strings.Contains(errOut, "\n  try: python: \"3.14\"") {
		t.Errorf("code %d\n%s", code, errOut)
	}
	// The recipe's Python where the OS ships another: kiln provides it, and says so.
	f = cmdtest.WriteFile(t, "kiln.yaml", "name: x\ncuda: '12.4'\nos: ubuntu22.04\npython: '3.11'\ntest: [\"python -c 'import sys'\", \"foo --version\"]\n")
	code, out, errOut := run(t, "resolve", f)
	// The table wraps at 80 columns: compare its words.
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if code != 0 || !strings.Contains(words(out), "python 3.11 (CPython 3.11.16, python-build-standalone 20260814, sha256 pinned: ubuntu22.04 ships Python 3.10)") {
		t.Errorf("code %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(words(errOut), "warning: test[1] (foo --version) runs foo, which the image will not have") || strings.Contains(errOut, "test[0]") {
		t.Errorf("warnings:\n%s", errOut)
	}
}

// resolve's table and warnings fit 80 columns (lines of 236 columns
// before; the full values are in --json) (issue 36 item 7).
func TestResolveFitsEightyColumns(t *testing.T) {
	f := cmdtest.WriteFile(t, "kiln.yaml", "name: x\ncuda: '12.4'\nos: ubuntu22.04\npython: '3.11'\ntorch: {version: 2.5.1}\nflash_attn: {}\ntest: [\"python -c 'import torch; assert torch.version.cuda.startswith(\\\"12.4\\\"), torch.version.cuda'\"]\n")
	_, out, errOut := run(t, "resolve", f)
	for _, l := range strings.Split(out+errOut, "\n") {
		if !testkit.Fits(l, 80) {
			t.Errorf("%d columns: %s", utf8.RuneCountInString(l), l)
		}
	}
}
