package analyzecmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testimage"
)

func TestAnalyzeCommand(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{Env: []string{"CUDA_VERSION=11.8.0"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/local/cuda/bin/nvcc", 5000), testimage.Sized("usr/bin/python3", 100)}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	ref := "oci:" + dir + ":app"
	rules := filepath.Join(dir, "runtime.yaml")
	os.WriteFile(rules, []byte("forbid: [dev_tools]\n"), 0o644)
	lenient := filepath.Join(dir, "lenient.yaml")
	os.WriteFile(lenient, []byte("max_size: 1GB\n"), 0o644)
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("forbid: [dev_tools]\nmax_sise: 1GB\n"), 0o644)

	code, out, _ := run(t, "analyze", ref)
	if code != cmdutil.ExitOK || !strings.Contains(out, "dev_tools") || !strings.Contains(out, "/usr/local/cuda/bin/nvcc") {
		t.Errorf("table: code %d\n%s", code, out)
	}

	code, out, _ = run(t, "analyze", ref, "--json", "--ci", rules)
	if code != cmdutil.ExitRule {
		t.Errorf("--ci with a broken rule: exit %d, want %d", code, cmdutil.ExitRule)
	}
	var rep struct {
		Schema string `json:"schema"`
		CI     struct {
			Passed     bool
			Violations []struct{ Rule string }
		} `json:"ci"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if rep.Schema != "kiln.analyze/v1" || rep.CI.Passed || len(rep.CI.Violations) != 1 || rep.CI.Violations[0].Rule != "forbid" {
		t.Errorf("ci result = %+v", rep)
	}

	if code, _, _ := run(t, "analyze", ref, "--ci", lenient); code != cmdutil.ExitOK {
		t.Errorf("lenient rules: exit %d", code)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"analyze"}, cmdutil.ExitUsage, "accepts 1 arg"},
		{[]string{"analyze", ref, "--bogus"}, cmdutil.ExitUsage, "unknown flag"},
		{[]string{"analyze", ref, "--platform", "amd64"}, cmdutil.ExitUsage, "--platform"},
		{[]string{"analyze", ref, "--ci", broken}, cmdutil.ExitUsage, "broken.yaml"},
		{[]string{"analyze", "oci:" + filepath.Join(dir, "nope")}, cmdutil.ExitFailure, "not an OCI image layout"},
		{[]string{"nosuchverb"}, cmdutil.ExitUsage, "unknown command"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}

// TestAnalyzeHTML: --html writes the page beside the table, whole (no
// temporary file left), and an unwritable path is an error naming the flag
// before the image is opened.
func TestAnalyzeHTML(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{Env: []string{"CUDA_VERSION=12.8.1"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/local/cuda/bin/nvcc", 5000), testimage.Sized("usr/bin/python3", 100)}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	ref := "oci:" + dir + ":app"
	page := filepath.Join(dir, "out", "report.html")
	os.Mkdir(filepath.Dir(page), 0o755)
	code, out, errOut := run(t, "analyze", ref, "--html", page)
	b, err := os.ReadFile(page)
	if code != cmdutil.ExitOK || err != nil || !strings.Contains(out, "dev_tools") {
		t.Fatalf("exit %d, %v: %s", code, err, errOut)
	}
	if !strings.HasPrefix(string(b), "<!DOCTYPE html>") || !strings.HasSuffix(string(b), "</html>\n") || !strings.Contains(string(b), `data-path="/usr/local/cuda/bin/nvcc"`) {
		t.Errorf("page:\n%s", b)
	}
	if ents, _ := os.ReadDir(filepath.Dir(page)); len(ents) != 1 {
		t.Errorf("left beside the page: %v", ents)
	}
	// Said before any layer is read: the image here does not even exist.
	code, _, errOut = run(t, "analyze", "oci:"+filepath.Join(dir, "missing"), "--html", filepath.Join(dir, "nope", "r.html"))
	if code != cmdutil.ExitFailure || !strings.Contains(errOut, "--html") || strings.Contains(errOut, "missing") {
		t.Errorf("unwritable --html: exit %d, %s", code, errOut)
	}
}

// N6 from the command line: kiln's own TAG-erofs (a filesystem image, not
// a tar) is refused in words, never analyzed as an empty, verified image.
func TestAnalyzeRefusesAnErofsImage(t *testing.T) {
	dir := t.TempDir()
	fsimg := append(append(make([]byte, 1024), "\xe2\xe1\xf5\xe0"...), make([]byte, 3068)...)
	testimage.WriteLayout(t, dir, "app-erofs", testimage.Image(t, testimage.Config{}, testimage.RawLayer(fsimg, "application/vnd.erofs.layer.v1")))
	code, out, errOut := run(t, "analyze", "oci:"+dir+":app-erofs", "--json")
	if code != cmdutil.ExitFailure || !strings.Contains(out+errOut, "EROFS layer") || strings.Contains(out, `"verified": true`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// --top N lists N files (it listed 2N largest files), in the table and
// in --json.
func TestAnalyzeTopN(t *testing.T) {
	dir := t.TempDir()
	var es []testimage.Entry
	for i := 0; i < 8; i++ {
		es = append(es, testimage.Sized(fmt.Sprintf("data/f%d.bin", i), 1000*(i+1)))
	}
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{}, testimage.Layer(t, es, "gzip")))
	code, out, _ := run(t, "analyze", "oci:"+dir+":app", "--top", "3", "--json")
	var rep struct {
		Largest []struct{ Path string } `json:"largest_files"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Largest) != 3 {
		t.Fatalf("--top 3: exit %d, %d largest files\n%s", code, len(rep.Largest), out)
	}
	_, table, _ := run(t, "analyze", "oci:"+dir+":app", "--top", "3")
	if n := strings.Count(table, "/data/f"); n > 3+3 { // the largest list, and at most one per class line
		t.Errorf("--top 3: %d file lines in the table\n%s", n, table)
	}
}

// againstImages writes a baseline and a change of it as OCI layouts in
// dir (tags old and new) and returns their refs: the change keeps the
// base layer, rebuilds the app layer (a file grown, one shrunk, one the
// same) and adds a layer that deletes docs (whiteout) and adds weights.
func againstImages(t *testing.T, dir string) (string, string) {
	t.Helper()
	te := testimage.Sized
	base := testimage.Layer(t, []testimage.Entry{te("usr/bin/python3", 3000), te("usr/share/doc/python3/README", 700),
		te("usr/local/cuda-12.8/lib64/libcudart.so.12.8.57", 9000)}, "gzip")
	app1 := testimage.Layer(t, []testimage.Entry{te("app/serve.py", 400), te("app/util.py", 300), te("app/same.py", 50),
		te("usr/local/lib/python3.12/dist-packages/some-really-long-package-name/with/a/deep/tree/module_one.py", 900)}, "gzip")
	app2 := testimage.Layer(t, []testimage.Entry{te("app/serve.py", 650), te("app/util.py", 100), te("app/same.py", 50),
		te("usr/local/lib/python3.12/dist-packages/some-really-long-package-name/with/a/deep/tree/module_one.py", 900)}, "gzip")
	extra := testimage.Layer(t, []testimage.Entry{testimage.Whiteout("usr/share/doc"), testimage.Safetensors("app/models/model.safetensors", 20000),
		te("usr/local/cuda-12.8/bin/nvcc", 5000)}, "gzip")
	cfg := testimage.Config{Env: []string{"CUDA_VERSION=12.8.1"}, CreatedBy: []string{"debootstrap", "COPY app /app", "RUN rm -rf /usr/share/doc && fetch model && apt-get install cuda-nvcc"}}
	testimage.WriteLayout(t, dir, "old", testimage.Image(t, cfg, base, app1))
	testimage.WriteLayout(t, dir, "new", testimage.Image(t, cfg, base, app2, extra))
	return "oci:" + dir + ":new", "oci:" + dir + ":old"
}

// kiln analyze IMAGE --against OTHER: the table (80 columns) says what
// was added, removed, grown and shrunk and the bytes to pull; --json has
// the analyze object with its "against" object; --html shows the diff.
func TestAnalyzeAgainst(t *testing.T) {
	dir := t.TempDir()
	cur, old := againstImages(t, dir)
	code, out, errOut := run(t, "analyze", cur, "--against", old)
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if n := termtable.Len(l); n > 80 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	for _, want := range []string{"Before    " + old, "After     " + cur, "1 shared, 2 added, 1 removed", "FILES ADDED", "/app/models/model.safetensors",
		"FILES REMOVED", "/usr/share/doc/python3/README", "FILES GROWN", "400 B → 650 B", "FILES SHRUNK", "/app/util.py", "dev_tools", "weights"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}

	code, out, _ = run(t, "analyze", cur, "--against", old, "--json", "--top", "1")
	var rep struct {
		Schema  string `json:"schema"`
		Image   string `json:"image"`
		Against struct {
			Before    struct{ Image string }
			After     struct{ Image string }
			PullBytes int64 `json:"pull_bytes"`
			Shared    int   `json:"shared_layers"`
			Added     []struct {
				Path   string
				Change string
			} `json:"added"`
			Changes map[string]struct{ Files int } `json:"changes"`
			Classes []struct{ Class string }       `json:"classes"`
			AddedL  []struct {
				Index          int
				CompressedSize int64 `json:"compressed_size"`
			} `json:"added_layers"`
		} `json:"against"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, json: %v\n%s", code, err, out)
	}
	a := rep.Against
	if rep.Schema != "kiln.analyze/v1" || rep.Image != cur || a.Before.Image != old || a.After.Image != cur || a.Shared != 1 || len(a.AddedL) != 2 ||
		a.PullBytes != a.AddedL[0].CompressedSize+a.AddedL[1].CompressedSize || a.PullBytes == 0 {
		t.Errorf("against: %+v", rep)
	}
	// --top 1: one file listed of the two added; full paths.
	if len(a.Added) != 1 || a.Added[0].Path != "/app/models/model.safetensors" || a.Added[0].Change != "added" || a.Changes["added"].Files != 2 {
		t.Errorf("added: %+v, changes %+v", a.Added, a.Changes)
	}

	// Against itself: nothing to pull.
	_, out, _ = run(t, "analyze", cur, "--against", cur)
	if !strings.Contains(out, "To pull   0 B in 0 new layer(s)") || !strings.Contains(out, "3 shared, 0 added, 0 removed") {
		t.Errorf("against itself:\n%s", out)
	}

	page := filepath.Join(dir, "report.html")
	if code, _, errOut := run(t, "analyze", cur, "--against", old, "--html", page); code != 0 {
		t.Fatalf("--html: exit %d: %s", code, errOut)
	}
	b, _ := os.ReadFile(page)
	for _, want := range []string{"Changes against " + old, `<td class="chg-added">added</td><td><code>/app/models/model.safetensors</code>`,
		`<td class="chg-removed">removed</td><td><code>/usr/share/doc/python3/README</code>`, `d-grown" x=`, `data-path="/app/serve.py"`,
		`<body class="by-change">`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// Which of the two images failed is said: the baseline by its flag.
func TestAnalyzeAgainstErrors(t *testing.T) {
	dir := t.TempDir()
	cur, _ := againstImages(t, dir)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"analyze", cur, "--against", "oci:" + filepath.Join(dir, "nope")}, cmdutil.ExitFailure, `the baseline (--against): image "oci:` + filepath.Join(dir, "nope") + `": `},
		{[]string{"analyze", cur, "--against", "BAD::ref"}, cmdutil.ExitUsage, "--against: "},
		{[]string{"analyze", "oci:" + filepath.Join(dir, "nope"), "--against", cur}, cmdutil.ExitFailure, `the image analyzed (IMAGE): image "oci:` + filepath.Join(dir, "nope") + `": `},
		{[]string{"analyze", cur, "--against", "oci:" + dir + ":missing-tag"}, cmdutil.ExitFailure, `the baseline (--against): image "oci:` + dir + `:missing-tag": no image tagged "missing-tag"`},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
		t.Logf("%v: %s", tc.args[1:], errOut)
	}
}
