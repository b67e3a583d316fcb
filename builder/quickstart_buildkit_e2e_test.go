package builder

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/recipes"
)

// TestQuickstartGoInstalled (issue 38): the README's quickstart in the
// words a user copies — recipes init, resolve, lock, build --to oci:,
// analyze, warm — run by the kiln the README's Install section gives (go
// install, cgo on: dynamically linked against this host's glibc), from an
// empty BuildKit with KILN_QUICKSTART_EMPTY=1 (CI keeps what the e2e
// tier's other builds left: the same Debian layers), through the
// stand-ins alone: NVIDIA's images in the
// registry (--mirror), PyTorch's and PyPI's pins in one index
// (--wheel-index), the Python download through $KILN_PYTHON_MIRROR.
//
// What differs from a networked machine, and why:
//   - kiln.yaml names Python 3.13, not the default recipe's 3.12: offline
//     there is no real 3.12, and the stand-in Ubuntu 24.04 is Debian's
//     (its python3 is 3.13);
//   - $KILN_COMPAT_DATA names a data file whose python section pins the
//     stand-in archives' sha256s (kiln's own data pins the real ones, which
//     no stand-in can match): the data file a company with its own
//     CPython builds writes;
//   - the test lines a user adds (python -c, python3 -c, pip list) are
//     appended to the recipe.
func TestQuickstartGoInstalled(t *testing.T) {
	c, reg := buildkitEnv(t, "12.8.1-devel-ubuntu24.04", "12.8.1-base-ubuntu24.04")
	testdaemon.PruneAfter(t, true)
	pyMirror, pySHAs, _ := pythonMirror(t)
	idx := catalogIndex(t)
	kiln := goInstalledKiln(t)
	if os.Getenv("KILN_QUICKSTART_EMPTY") == "1" {
		pruneAll(t, c) // as a new machine builds it; CI keeps the tier's cache
	}

	dir := t.TempDir()
	env := append(os.Environ(),
		"KILN_COMPAT_DATA="+standInCompatData(t, filepath.Join(t.TempDir(), "compat.json"), pySHAs),
		"KILN_PYTHON_MIRROR="+pyMirror,
		"NO_COLOR=1",
	)
	run := func(args ...string) string {
		t.Helper()
		start := time.Now()
		cmd := exec.Command(kiln, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("kiln %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		t.Logf("kiln %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), lastLines(out.String(), 12))
		return out.String()
	}

	run("recipes", "init")
	y, err := os.ReadFile(filepath.Join(dir, "kiln.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(y, []byte("name: "+recipes.DefaultRecipe)) {
		t.Fatalf("kiln recipes init wrote another recipe than %s:\n%s", recipes.DefaultRecipe, y)
	}
	y = pythonLine.ReplaceAll(y, []byte(`python: "3.13"`))
	y = append(y, []byte(`  - python -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version; print(sys.version)'
  - python3 -c 'import torch, torchvision; print(torch.__version__)'
  - test "$(readlink -f "$(command -v python3)")" = "$(readlink -f "$(command -v python)")"
  - pip --version | grep -F "(python 3.13)"
  - pip list
`)...)
	if err := os.WriteFile(filepath.Join(dir, "kiln.yaml"), y, 0o644); err != nil {
		t.Fatal(err)
	}
	stand := []string{"--mirror", reg, "--wheel-index", idx}
	if out := run(append([]string{"resolve"}, stand...)...); !strings.Contains(out, "3.13") {
		t.Errorf("kiln resolve does not name Python 3.13:\n%s", out)
	}
	run(append([]string{"lock"}, stand...)...)
	lock, err := os.ReadFile(filepath.Join(dir, "kiln.lock"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := false
	for _, sha := range pySHAs {
		pinned = pinned || bytes.Contains(lock, []byte(sha))
	}
	if !pinned {
		t.Errorf("kiln.lock does not pin the Python archive's sha256:\n%s", lock)
	}
	run("build", "--locked", "--to", "oci:./built", "--progress", "plain")
	if out := run("analyze", "oci:./built"); !regexp.MustCompile(`(?i)cuda`).MatchString(out) {
		t.Errorf("kiln analyze says nothing of CUDA:\n%s", out)
	}
	run("warm", "oci:./built", "--target", "oci:"+filepath.Join(dir, "cache"))
}

// standInCompatData writes, at path, the data file that pins the stand-in
// Python archives (file name → sha256) in place of the real ones, kiln's
// torch and image data unchanged, and returns path.
func standInCompatData(t *testing.T, path string, shas map[string]string) string {
	t.Helper()
	db, err := recipes.Data()
	if err != nil {
		t.Fatal(err)
	}
	f := recipes.DataFile{Format: recipes.DataFileFormat, DataVersion: db.Version() + "+standin-python", BaseDataVersion: db.Version(),
		Generated: time.Now().UTC().Format(time.RFC3339), Sources: []recipes.DataSource{}, Changes: []recipes.DataChange{},
		Torch: db.Torch, Images: db.Images}
	py := db.Python
	py.Releases = nil
	for _, b := range db.PythonBuilds() {
		file := "cpython-" + b.Version + "+" + b.Release + "-x86_64-unknown-linux-gnu-" + py.Archive + ".tar.gz"
		if sha, ok := shas[file]; ok {
			b.SHA256 = map[string]string{"x86_64-unknown-linux-gnu": sha}
			py.Releases = append(py.Releases, b)
		}
	}
	if len(py.Releases) == 0 {
		t.Fatalf("no stand-in Python archive has the name of a build kiln pins (%v)", shas)
	}
	f.Python = &py
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lastLines is s's last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
