package compatcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/refresh/refreshtest"
	"github.com/kiln-build/kiln/registry"
)

func refreshOpts(s *refreshtest.Set, out string) (*CompatRefreshOptions, *bytes.Buffer, *bytes.Buffer) {
	var o, e bytes.Buffer
	return &CompatRefreshOptions{
		IO: &cmdutil.IO{Out: &o, ErrOut: &e}, Output: out,
		IndexURL: s.IndexURL(), MatrixURL: s.MatrixURL(), Repository: s.Repository(),
		HTTP:   registry.HTTPClient(nil, registry.WithRetries(2, time.Millisecond)),
		Remote: []remote.Option{remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 2})},
		Now:    func() time.Time { return time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC) },
	}, &o, &e
}

func TestCompatRefresh(t *testing.T) {
	db, err := recipes.Data()
	if err != nil {
		t.Fatal(err)
	}
	s := refreshtest.New(t, db)
	dir := t.TempDir()
	out := filepath.Join(dir, "compat.json")

	// Sources that agree with the embedded data: no change; the file is
	// written and holds the same facts.
	opts, stdout, _ := refreshOpts(s, out)
	if err := runCompatRefresh(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "0 added, 0 removed, 0 changed against data "+db.Version()) || !strings.Contains(stdout.String(), "wrote "+out) {
		t.Errorf("stdout:\n%s", stdout)
	}
	if _, err := recipes.LoadDataFile(out); err != nil {
		t.Fatal(err)
	}
	opts, _, _ = refreshOpts(s, out)
	opts.Check = true
	if err := runCompatRefresh(context.Background(), opts); err != nil {
		t.Errorf("--check without changes: %v", err)
	}

	// A new torch patch on the indexes: --check reports it and exits 1,
	// writing nothing; --json is one object.
	for _, v := range []string{"cu126", "cu130"} {
		s.Index.Add(v, "torch", refreshtest.Wheel("torch", "2.13.1", v, 12, "manylinux_2_28_x86_64"))
	}
	before, _ := os.ReadFile(out)
	opts, stdout, _ = refreshOpts(s, out)
	opts.Check, opts.JSON = true, true
	err = runCompatRefresh(context.Background(), opts)
	if code, ok := err.(cmdutil.SilentExit); !ok || int(code) != cmdutil.ExitFailure {
		t.Errorf("--check with changes: %v", err)
	}
	var res refreshResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if res.Written || res.Output != nil || res.Summary["changed"] != 1 || len(res.Changes) != 1 || res.Changes[0].Fact != "torch 2.13 patches" || res.Changes[0].New != "2.13.0, 2.13.1" || res.Changes[0].Date != "2027-01-02" || !strings.Contains(res.Changes[0].Source, "/torch/") {
		t.Errorf("json: %s", stdout)
	}
	if after, _ := os.ReadFile(out); !bytes.Equal(before, after) {
		t.Error("--check wrote the data file")
	}

	// Written, with the text diff beside it; resolve uses it only when told.
	diffFile := filepath.Join(dir, "compat.diff")
	opts, _, _ = refreshOpts(s, out)
	opts.Diff = diffFile
	if err := runCompatRefresh(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(diffFile); !strings.Contains(string(b), "~ torch 2.13 patches: 2.13.0 -> 2.13.0, 2.13.1") {
		t.Errorf("diff file:\n%s", b)
	}
	recipe := cmdtest.WriteFile(t, "kiln.yaml", "name: x\ncuda: '13.0'\ntorch: {version: '2.13'}\n")
	plan := func(args ...string) map[string]any {
		t.Helper()
		code, o, e := run(t, append([]string{"resolve", recipe, "--json"}, args...)...)
		var p map[string]any
		if code != 0 || json.Unmarshal([]byte(o), &p) != nil {
			t.Fatalf("resolve %v: %d %s %s", args, code, o, e)
		}
		return p
	}
	if p := plan(); p["torch"] != "2.13.0" || p["data"].(map[string]any)["origin"] != "embedded" {
		t.Errorf("embedded default: torch %v data %v", p["torch"], p["data"])
	}
	if p := plan("--compat-data", out); p["torch"] != "2.13.1" || p["data"].(map[string]any)["origin"] != out || !strings.HasSuffix(p["data_version"].(string), "+refresh.20270102") {
		t.Errorf("--compat-data: torch %v data %v", p["torch"], p["data"])
	}
	t.Setenv(recipes.DataEnv, out)
	if p := plan(); p["torch"] != "2.13.1" || p["data"].(map[string]any)["date"] != "2027-01-02" {
		t.Errorf("%s: torch %v data %v", recipes.DataEnv, p["torch"], p["data"])
	}

	// A data file that cannot be used: refused naming the file and field,
	// as one JSON object with --json.
	bad := filepath.Join(dir, "bad.json")
	b, _ := os.ReadFile(out)
	os.WriteFile(bad, bytes.Replace(b, []byte(`"name": "cu130"`), []byte(`"name": "cu13"`), 1), 0o644)
	code, o, e := run(t, "resolve", recipe, "--json", "--compat-data", bad)
	var je map[string]any
	if code != 1 || json.Unmarshal([]byte(o), &je) != nil || !strings.Contains(je["error"].(string), bad) || !strings.Contains(je["error"].(string), `.name: "cu13" does not match cuda 13.0`) || !strings.Contains(e, bad) {
		t.Errorf("bad file: %d %s %s", code, o, e)
	}

	// A source that cannot be read fails, as one JSON object.
	opts, stdout, _ = refreshOpts(s, filepath.Join(dir, "x.json"))
	opts.JSON, opts.MatrixURL = true, s.MatrixS.URL+"/nope.md"
	if err := runCompatRefresh(context.Background(), opts); err == nil || !strings.Contains(stdout.String(), `"error": "release matrix`) {
		t.Errorf("unreadable matrix: %v %s", err, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.json")); err == nil {
		t.Error("a failed refresh wrote its file")
	}
}
