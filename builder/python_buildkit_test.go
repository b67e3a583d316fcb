package builder

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/recipes"
)

// standInPythonDir is the fixtures' stand-in of python-build-standalone's
// release directory: a real CPython 3.13 (Debian trixie's, made
// relocatable by scripts/fixtures.sh) under the name kiln's data gives
// CPython 3.13.15, and its SHA256SUMS. It returns the directory, the
// release and the archive's sha256.
func standInPythonDir(t *testing.T) (dir, release, sha string) {
	t.Helper()
	out := filepath.Dir(fixtureWheels(t))
	release = "20260814"
	dir = filepath.Join(out, "python")
	sums := filepath.Join(dir, release, "SHA256SUMS")
	f, err := os.Open(sums)
	if err != nil {
		if os.Getenv("KILN_REQUIRE_BUILDKIT") == "1" {
			t.Fatalf("the stand-in Python download is missing: %v (bash scripts/fixtures.sh python)", err)
		}
		t.Skipf("the stand-in Python download is missing: %v (bash scripts/fixtures.sh python)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// python-build-standalone's format: "HEX  NAME".
		if hex, name, ok := strings.Cut(sc.Text(), "  "); ok && strings.HasPrefix(name, "cpython-3.13.") && strings.HasSuffix(name, "-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz") {
			return dir, release, hex
		}
	}
	t.Fatalf("%s lists no CPython 3.13 x86_64 install_only_stripped archive", sums)
	return
}

// pythonMirror serves the fixtures' stand-in Python download as a Python
// mirror (--python-mirror's shape: RELEASE/FILE under its root) until the
// test ends; it returns the mirror's URL, the stand-in archive's sha256
// (kiln's data has the real archive's), and the paths fetched.
func pythonMirror(t *testing.T) (string, string, *[]string) {
	t.Helper()
	dir, _, sha := standInPythonDir(t)
	var fetched []string
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched = append(fetched, r.URL.Path)
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, sha, &fetched
}

// A recipe whose OS ships another Python builds on a real buildkitd with
// the relocatable CPython kiln pins, fetched through a Python mirror
// (--python-mirror's URL shape: the release directory under the mirror's
// root) from the fixtures' stand-in, which is a real interpreter: on a
// base without any Python (NVIDIA's images have none), python, python3,
// python3.13 and pip all run it in the image, with the stdlib's C
// modules; an archive with another sha256 fails the build before any step
// runs it.
func TestStandalonePythonOnBuildKit(t *testing.T) {
	c, reg := buildkitEnv(t, "12.4.1-base-debian13")
	_, release, _ := standInPythonDir(t)
	mirror, sha, fetched := pythonMirror(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Ubuntu 24.04's python3 is 3.12: kiln provides the 3.13 the recipe names.
	r, err := recipes.Parse("kiln.yaml", []byte(`name: py-standalone
cuda: "12.8"
os: ubuntu24.04
python: "3.13"
app:
  files:
    - src: app
      dst: /app
  workdir: /app
  entrypoint: [python, serve.py]
test:
  - python -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version; print(sys.version)'
  - python3 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, decimal, uuid'
  - python3.13 -V
  - pip --version | grep -F "(python 3.13)"
  - pip list
  - test "$(readlink -f "$(command -v python)")" = /opt/python/bin/python3.13 && test "$(readlink -f "$(command -v python3)")" = /opt/python/bin/python3.13
  - python -c 'import sys; assert sys.prefix == "/opt/python", sys.prefix'
  - python serve.py
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithPythonMirror(mirror))
	if err != nil {
		t.Fatal(err)
	}
	if p.PythonSource != recipes.PythonStandalone || p.PythonDist == nil || p.PythonDist.Release != release {
		t.Fatalf("python source %q, dist %+v", p.PythonSource, p.PythonDist)
	}
	a := &p.PythonDist.Archives[0]
	if !strings.HasPrefix(a.URL, mirror+"/"+release+"/cpython-3.13.") {
		t.Fatalf("archive URL %s is not under the mirror %s", a.URL, mirror)
	}
	// The stand-in's bytes are not the real archive's: its own sha256.
	a.SHA256 = sha
	base := reg + "/nvidia/cuda:12.4.1-base-debian13"
	p.BaseImages.Devel, p.BaseImages.Runtime = base, base

	ctxDir := t.TempDir()
	os.MkdirAll(filepath.Join(ctxDir, "app"), 0o755)
	os.WriteFile(filepath.Join(ctxDir, "app", "serve.py"), []byte("import sys, json\nprint(json.dumps({'python': sys.version.split()[0]}))\n"), 0o644)
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	stamp := time.Now().UnixNano()
	ref := fmt.Sprintf("%s/kiln-test/py-standalone:%d", reg, stamp)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: ctxDir, Progress: "quiet", Outputs: []Output{mustOutput(t, ref)}}); err != nil {
		t.Fatalf("build: %v", err)
	}
	if len(*fetched) == 0 {
		t.Fatal("the build did not fetch the Python archive from the mirror")
	}

	// Another archive under the pinned sha256: refused by BuildKit.
	a.SHA256 = strings.Repeat("0", 64)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: ctxDir, Progress: "quiet", Outputs: []Output{mustOutput(t, ref+"-bad")}}); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("an archive with another sha256: %v", err)
	}
}
