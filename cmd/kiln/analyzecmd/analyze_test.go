package analyzecmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
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
