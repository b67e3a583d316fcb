package buildcmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// buildSchema compiles docs/schema/kiln.build.v1.json (and what it refers to).
func buildSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	for _, f := range []string{"kiln.result.json", "kiln.build.v1.json"} {
		abs, _ := filepath.Abs("../../../docs/schema/" + f)
		b, err := os.ReadFile(abs)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource("file://"+abs, doc); err != nil {
			t.Fatal(err)
		}
	}
	abs, _ := filepath.Abs("../../../docs/schema/kiln.build.v1.json")
	s, err := c.Compile("file://" + abs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBuildExplainSaysTheNoOpAnswered: --explain on a no-op rebuild says
// the content tag answered; against the tag's last push (none the first
// time: every step a miss, said why) and then against itself (every step
// a hit, no layer new), in words within 80 columns and in --json, valid
// against the schema.
func TestBuildExplainSaysTheNoOpAnswered(t *testing.T) {
	_, _, args := reuseSetup(t, func(plan *recipes.Plan, in builder.Inputs) testimage.Config {
		rec, err := builder.NewRecord(plan, in)
		if err != nil {
			t.Fatal(err)
		}
		rj, _ := json.Marshal(rec)
		return testimage.Config{Labels: map[string]string{layers.LabelRecipeHash: in.RecipeHash, layers.LabelInputs: string(rj)}}
	})
	code, out, errOut := run(t, append(args, "--explain")...)
	if code != cmdutil.ExitOK || !strings.Contains(out, "no image at") || !strings.Contains(out, "no-op: answered from the content tag") || !strings.Contains(out, "  miss  runtime: app files") {
		t.Fatalf("first --explain: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, append(args, "--explain")...)
	if code != cmdutil.ExitOK || strings.Contains(out, "miss") || !strings.Contains(out, "no-op: answered") || !strings.Contains(out, "0 of 1 layers new: 0 B to push, 0 B every host pulls again") {
		t.Fatalf("second --explain: exit %d\n%s\n%s", code, out, errOut)
	}
	// The explanation fits 80 columns (the pushed lines above it carry
	// whole digests).
	for _, l := range strings.Split(out[strings.Index(out, "explain  "):], "\n") {
		if termtable.Len(l) > 80 {
			t.Errorf("wider than 80 columns: %q", l)
		}
	}
	code, js, errOut := run(t, append(args, "--explain", "--json")...)
	var obj any
	if err := json.Unmarshal([]byte(js), &obj); code != cmdutil.ExitOK || err != nil {
		t.Fatalf("--json: exit %d %v\n%s\n%s", code, err, js, errOut)
	}
	if err := buildSchema(t).Validate(obj); err != nil {
		t.Errorf("--json against kiln.build.v1.json: %v\n%s", err, js)
	}
	var rep struct {
		Explain builder.Explanation `json:"explain"`
	}
	json.Unmarshal([]byte(js), &rep)
	e := rep.Explain
	if !e.Reused || e.AgainstDigest == "" || len(e.Steps) == 0 || len(e.Changes) != 0 || e.Cost == nil || e.Cost.NewLayers != 0 || e.Cost.PushBytes != 0 {
		t.Errorf("--json explain: %+v", e)
	}
	for _, s := range e.Steps {
		if !s.Hit {
			t.Errorf("step %s missed against the same inputs: %s", s.Name, s.Why)
		}
	}
	if code, _, errOut := run(t, "build", args[1], "--explain", "--mirror", args[3]); code != cmdutil.ExitUsage || !strings.Contains(errOut, "--explain needs --push") {
		t.Errorf("--explain without --push: exit %d %s", code, errOut)
	}
}
