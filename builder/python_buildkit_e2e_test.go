package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/recipes"
)

// standInPythons reads the fixtures' stand-in of python-build-standalone's
// release directory: real CPythons (3.13 from Debian trixie, 3.11 from
// bookworm, made relocatable by scripts/fixtures.sh) under the names
// kiln's data gives those versions' builds, and their SHA256SUMS. It
// returns the mirror root (the release directories under it), the release,
// and each archive's sha256 by file name.
func standInPythons(t *testing.T) (dir, release string, shas map[string]string) {
	t.Helper()
	out := filepath.Dir(fixtureWheels(t))
	release = "20260814"
	dir = filepath.Join(out, "python")
	sums := filepath.Join(dir, release, "SHA256SUMS")
	b, err := os.ReadFile(sums)
	if err != nil {
		if os.Getenv("KILN_REQUIRE_BUILDKIT") == "1" {
			t.Fatalf("the stand-in Python download is missing: %v (bash scripts/fixtures.sh python)", err)
		}
		t.Skipf("the stand-in Python download is missing: %v (bash scripts/fixtures.sh python)", err)
	}
	list, err := wheelserve.ParseSums(sums, b)
	if err != nil {
		t.Fatal(err)
	}
	shas = map[string]string{}
	for _, s := range list {
		if strings.HasSuffix(s.Name, "-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz") {
			shas[s.Name] = s.SHA256
		}
	}
	if len(shas) == 0 {
		t.Fatalf("%s lists no x86_64 install_only_stripped archive", sums)
	}
	return dir, release, shas
}

// standInMinors are the Python versions the stand-in download has.
func standInMinors(shas map[string]string) []string {
	var out []string
	for name := range shas {
		v := strings.TrimPrefix(name, "cpython-")
		if i := strings.IndexAny(v, "+"); i > 0 {
			v = v[:i]
		}
		if p := strings.Split(v, "."); len(p) >= 2 {
			out = append(out, p[0]+"."+p[1])
		}
	}
	return out
}

// pythonMirror serves the fixtures' stand-in Python download as a Python
// mirror (--python-mirror's shape: RELEASE/FILE under its root) until the
// test ends; it returns the mirror's URL, each stand-in archive's sha256
// by file name (kiln's data has the real archives'), and the paths
// fetched.
func pythonMirror(t *testing.T) (string, map[string]string, *[]string) {
	t.Helper()
	dir, _, shas := standInPythons(t)
	var fetched []string
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched = append(fetched, r.URL.Path)
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, shas, &fetched
}

// standInSHA puts the stand-in archives' sha256s in the plan in place of
// the real ones kiln's data pins (the mirror serves the stand-ins).
func standInSHA(t *testing.T, p *recipes.Plan, shas map[string]string) {
	t.Helper()
	for i := range p.PythonDist.Archives {
		a := &p.PythonDist.Archives[i]
		file, err := url.PathUnescape(path.Base(a.URL))
		if err != nil {
			t.Fatal(err)
		}
		sha, ok := shas[file]
		if !ok {
			t.Fatalf("the stand-in download has no %s", file)
		}
		a.SHA256 = sha
	}
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
	_, release, _ := standInPythons(t)
	mirror, shas, fetched := pythonMirror(t)
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
	standInSHA(t, p, shas)
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
	// BuildKit keys a download by its checksum: an archive an earlier
	// build fetched is not fetched again, so no request is asserted here.
	// The refusal below is the mirror's: a wrong sha256 makes BuildKit
	// download from it and compare.
	before := len(*fetched)

	// Another archive under the pinned sha256: refused by BuildKit.
	a.SHA256 = strings.Repeat("0", 64)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: ctxDir, Progress: "quiet", Outputs: []Output{mustOutput(t, ref+"-bad")}}); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("an archive with another sha256: %v", err)
	}
	if len(*fetched) == before {
		t.Error("the build with another sha256 did not download the archive from the mirror")
	}
}

// A base without apt (a UBI-style image: RPM's world, no apt, no dpkg, no
// Python) gets the recipe's Python all the same: resolve picks the
// relocatable CPython for an OS kiln knows no python3 of, and no step of
// the build calls apt (issue 38). The base is the CUDA 12.4 fixture with
// apt and dpkg whited out and UBI 9's os-release.
func TestStandalonePythonOnBaseWithoutApt(t *testing.T) {
	c, reg := buildkitEnv(t, "12.4.1-base-debian13")
	mirror, shas, _ := pythonMirror(t)
	idx := catalogIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stamp := time.Now().UnixNano()
	base := fmt.Sprintf("%s/kiln-test/ubi9-standin:%d", reg, stamp)
	withoutApt(t, reg+"/nvidia/cuda:12.4.1-base-debian13", base)

	r, err := recipes.Parse("kiln.yaml", []byte(`name: py-no-apt
cuda: "12.4"
os: ubi9
python: "3.13"
pip: [packaging]
test:
  - python -c 'import sys, packaging; assert sys.version_info[:2] == (3, 13), sys.version; print(sys.version)'
  - pip list | grep -i packaging
  - test "$(readlink -f "$(command -v python3)")" = "$(readlink -f "$(command -v python)")"
  - "! command -v apt-get && ! command -v dpkg && grep -q '^ID=\"rhel\"' /etc/os-release"
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithPythonMirror(mirror), recipes.WithWheelIndexes(idx))
	if err != nil {
		t.Fatal(err)
	}
	if p.PythonSource != recipes.PythonStandalone {
		t.Fatalf("python source %q on ubi9: want the relocatable CPython", p.PythonSource)
	}
	standInSHA(t, p, shas)
	p.Platforms = []string{"linux/amd64"}
	p.BaseImages.Devel, p.BaseImages.Runtime = base, base
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	ref := fmt.Sprintf("%s/kiln-test/py-no-apt:%d", reg, stamp)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: t.TempDir(), Progress: progressMode(), Outputs: []Output{mustOutput(t, ref)}}); err != nil {
		t.Fatalf("build on a base without apt: %v", err)
	}
}

// withoutApt pushes to dst the image src with apt and dpkg whited out
// (their programs, /etc/apt, dpkg's database) and UBI 9's os-release.
func withoutApt(t *testing.T, src, dst string) {
	t.Helper()
	sref, err := name.ParseReference(src, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(sref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	put := func(name string, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	for _, p := range []string{"apt", "apt-cache", "apt-cdrom", "apt-config", "apt-get", "apt-key", "apt-mark", "dpkg", "dpkg-deb", "dpkg-divert", "dpkg-maintscript-helper", "dpkg-query", "dpkg-realpath", "dpkg-split", "dpkg-statoverride", "dpkg-trigger"} {
		put("usr/bin/.wh."+p, nil)
	}
	put("etc/.wh.apt", nil)
	put("var/lib/.wh.dpkg", nil)
	put("var/lib/.wh.apt", nil)
	put("usr/lib/os-release", []byte("NAME=\"Red Hat Enterprise Linux\"\nVERSION=\"9.5 (Plow)\"\nID=\"rhel\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"9.5\"\nPLATFORM_ID=\"platform:el9\"\n"))
	put("etc/redhat-release", []byte("Red Hat Enterprise Linux release 9.5 (Plow)\n"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	out, err := mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "kiln test: apt and dpkg whited out, UBI 9's os-release"}})
	if err != nil {
		t.Fatal(err)
	}
	dref, err := name.ParseReference(dst, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dref, out); err != nil {
		t.Fatalf("push %s: %v", dst, err)
	}
}
