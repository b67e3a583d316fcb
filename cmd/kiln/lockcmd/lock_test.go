package lockcmd

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/recipes"
)

// testRegistry serves small random multi-platform images under nvidia/cuda names.
func testRegistry(t *testing.T, tags ...string) (host string, digests map[string]map[string]string) {
	t.Helper()
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	digests = map[string]map[string]string{}
	for _, tag := range tags {
		var idx v1.ImageIndex = empty.Index
		per := map[string]string{}
		for _, arch := range []string{"amd64", "arm64"} {
			img, err := random.Image(256, 1)
			if err != nil {
				t.Fatal(err)
			}
			cf, _ := img.ConfigFile()
			cf.OS, cf.Architecture = "linux", arch
			img, _ = mutate.ConfigFile(img, cf)
			d, _ := img.Digest()
			per["linux/"+arch] = d.String()
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
		}
		ref, err := name.ParseReference(u.Host+"/nvidia/cuda:"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(ref, idx); err != nil {
			t.Fatal(err)
		}
		d, _ := idx.Digest()
		per["index"] = d.String()
		digests[tag] = per
	}
	return u.Host, digests
}

// testIndex is a local wheel index: PEP 691 JSON for clients that ask,
// PEP 503 HTML otherwise, over generated wheel files.
type testIndex struct {
	srv    *httptest.Server
	files  map[string][]byte // filename -> content
	hashes map[string]string
	asJSON bool
}

func newTestIndex(t *testing.T, asJSON bool, filenames ...string) *testIndex {
	t.Helper()
	ix := &testIndex{files: map[string][]byte{}, hashes: map[string]string{}, asJSON: asJSON}
	for _, f := range filenames {
		b := make([]byte, 1024)
		_, _ = rand.Read(b)
		s := sha256.Sum256(b)
		ix.files[f] = b
		ix.hashes[f] = hex.EncodeToString(s[:])
	}
	ix.srv = httptest.NewServer(http.HandlerFunc(ix.serve))
	t.Cleanup(ix.srv.Close)
	return ix
}

func (ix *testIndex) serve(w http.ResponseWriter, r *http.Request) {
	if f, ok := strings.CutPrefix(r.URL.Path, "/files/"); ok {
		b, ok := ix.files[f]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
		return
	}
	project, ok := strings.CutPrefix(r.URL.Path, "/simple/")
	project = strings.TrimSuffix(project, "/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	type jf struct {
		Filename string            `json:"filename"`
		URL      string            `json:"url"`
		Hashes   map[string]string `json:"hashes"`
	}
	var list []jf
	for f := range ix.files {
		n := strings.ToLower(strings.ReplaceAll(strings.SplitN(f, "-", 2)[0], "_", "-"))
		if n == project {
			list = append(list, jf{f, "../../files/" + url.PathEscape(f), map[string]string{"sha256": ix.hashes[f]}})
		}
	}
	if len(list) == 0 {
		http.NotFound(w, r)
		return
	}
	if ix.asJSON && strings.Contains(r.Header.Get("Accept"), "application/vnd.pypi.simple.v1+json") {
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		_ = json.NewEncoder(w).Encode(map[string]any{"meta": map[string]string{"api-version": "1.0"}, "name": project, "files": list})
		return
	}
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
	for _, f := range list {
		fmt.Fprintf(w, "<a href=\"%s#sha256=%s\">%s</a><br/>\n", f.URL, f.Hashes["sha256"], f.Filename)
	}
	fmt.Fprint(w, "</body></html>\n")
}

func TestLockRoundTrip(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("pep691=%v", asJSON), func(t *testing.T) { lockRoundTrip(t, asJSON) })
	}
}

func lockRoundTrip(t *testing.T, asJSON bool) {
	host, digests := testRegistry(t, "11.8.0-devel-debian12", "11.8.0-runtime-debian12")
	fa := "flash_attn-2.7.0.post2+cu11torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
	ix := newTestIndex(t, asJSON,
		"torch-2.5.1+cu118-cp311-cp311-linux_x86_64.whl",
		"torch-2.5.1+cu118-cp312-cp312-linux_x86_64.whl",
		"torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl",
		fa,
		"flash_attn-2.7.0.post2+cu11torch2.4cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
		"bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl",
	)
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "recipes", "debian-cuda11.8.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	recipe := filepath.Join(dir, "kiln.yaml")
	if err := os.WriteFile(recipe, src, 0o644); err != nil {
		t.Fatal(err)
	}
	index := ix.srv.URL + "/simple"
	args := []string{"--mirror", host, "--wheel-index", index}
	code, out, errOut := run(t, append([]string{"lock", recipe}, args...)...)
	if code != 0 {
		t.Fatalf("lock: %d %s %s", code, out, errOut)
	}
	l, err := recipes.ReadLock(filepath.Join(dir, "kiln.lock"))
	if err != nil {
		t.Fatal(err)
	}
	devel := l.BaseImages["devel"]
	if devel.Ref != host+"/nvidia/cuda:11.8.0-devel-debian12" || devel.Digest != digests["11.8.0-devel-debian12"]["index"] || devel.Platforms["linux/amd64"] != digests["11.8.0-devel-debian12"]["linux/amd64"] {
		t.Errorf("devel: %+v want %v", devel, digests["11.8.0-devel-debian12"])
	}
	if l.BaseImages["runtime"].Platforms["linux/amd64"] != digests["11.8.0-runtime-debian12"]["linux/amd64"] {
		t.Errorf("runtime: %+v", l.BaseImages["runtime"])
	}
	want := map[string]string{"torch": "torch-2.5.1+cu118-cp311-cp311-linux_x86_64.whl", "flash-attn": fa, "bitsandbytes": "bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl"}
	if len(l.Wheels) != len(want) {
		t.Fatalf("wheels: %+v", l.Wheels)
	}
	for _, w := range l.Wheels {
		if want[w.Name] != w.Filename || w.SHA256 != ix.hashes[w.Filename] || w.Platform != "linux/amd64" {
			t.Errorf("wheel %+v", w)
		}
		// The URL is absolute and serves bytes with that hash.
		resp, err := http.Get(w.URL)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if s := sha256.Sum256(b.Bytes()); hex.EncodeToString(s[:]) != w.SHA256 {
			t.Errorf("%s: served bytes do not match the locked sha256", w.URL)
		}
	}
	if l.RecipeHash == "" || l.Plan.RegistryMirror != host {
		t.Errorf("lock: %+v", l)
	}

	// --check: current.
	if code, out, errOut := run(t, append([]string{"lock", recipe, "--check"}, args...)...); code != 0 || !strings.Contains(out, "up to date") {
		t.Errorf("check: %d %s %s", code, out, errOut)
	}
	// --locked: the plan from the lock, pinned by digest, no look-ups.
	ix.srv.Close()
	code, out, errOut = run(t, "resolve", recipe, "--locked", "--json")
	if code != 0 || !strings.Contains(out, host+"/nvidia/cuda@"+digests["11.8.0-devel-debian12"]["index"]) {
		t.Errorf("--locked: %d %s %s", code, out, errOut)
	}
	// A changed recipe makes the lock stale.
	if err := os.WriteFile(recipe, bytes.Replace(src, []byte(`python: "3.11"`), []byte(`python: "3.10"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, append([]string{"lock", recipe, "--check"}, args...)...)
	if code != 1 || !strings.Contains(errOut, "the recipe changed") || !strings.Contains(errOut, "python 3.11 -> 3.10") {
		t.Errorf("stale: %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "resolve", recipe, "--locked"); code != 1 || !strings.Contains(errOut, "stale") {
		t.Errorf("--locked stale: %d %s", code, errOut)
	}
	// No lock at all is stale too.
	if code, _, _ := run(t, "lock", recipe, "--check", "-o", filepath.Join(dir, "none.lock")); code != 1 {
		t.Errorf("missing lock: exit %d", code)
	}
}

func TestLockFailures(t *testing.T) {
	host, _ := testRegistry(t, "11.8.0-devel-debian12") // no runtime image
	ix := newTestIndex(t, true, "torch-2.5.1+cu118-cp311-cp311-linux_x86_64.whl")
	src, _ := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "recipes", "debian-cuda11.8.yaml"))
	recipe := filepath.Join(t.TempDir(), "kiln.yaml")
	_ = os.WriteFile(recipe, src, 0o644)
	code, _, errOut := run(t, "lock", recipe, "--mirror", host, "--wheel-index", ix.srv.URL+"/simple")
	if code != 1 || !strings.Contains(errOut, "11.8.0-runtime-debian12") {
		t.Errorf("missing base: %d %s", code, errOut)
	}
	host, _ = testRegistry(t, "11.8.0-devel-debian12", "11.8.0-runtime-debian12")
	code, _, errOut = run(t, "lock", recipe, "--mirror", host, "--wheel-index", ix.srv.URL+"/simple")
	if code != 1 || !strings.Contains(errOut, "flash-attn") {
		t.Errorf("missing wheel: %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(recipe), "kiln.lock")); err == nil {
		t.Error("a failed lock wrote kiln.lock")
	}
}

// lock refuses a Python kiln cannot provide as resolve does, before any
// look-up, and writes no lock.
func TestLockRefusesPythonItCannotProvide(t *testing.T) {
	dir := t.TempDir()
	recipe := filepath.Join(dir, "kiln.yaml")
	if err := os.WriteFile(recipe, []byte("name: x\ncuda: '12.4'\nos: ubuntu22.04\npython: '3.8'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "lock", recipe, "--mirror", "127.0.0.1:1")
	if code != 1 || !strings.Contains(errOut, "python: kiln cannot provide Python 3.8 on ubuntu22.04") || !strings.Contains(errOut, "  try: python: \"3.10\"") {
		t.Errorf("code %d\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "kiln.lock")); err == nil {
		t.Error("a refused lock wrote kiln.lock")
	}
}

// lock's warnings wrap at 80 columns as resolve's do (the default
// recipe's GeForce warning was one 214-column line) (issue 36 item 7).
func TestLockFitsEightyColumns(t *testing.T) {
	host, _ := testRegistry(t, "12.8.1-devel-ubuntu24.04", "12.8.1-base-ubuntu24.04")
	ix := newTestIndex(t, true,
		"torch-2.11.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
		"torchvision-0.26.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
	)
	src, err := recipes.CatalogRecipe(recipes.DefaultRecipe)
	if err != nil {
		t.Fatal(err)
	}
	// In the recipe's directory, as a user runs it (a long temporary
	// path in "wrote PATH" is the test's, not the output's).
	t.Chdir(t.TempDir())
	if err := os.WriteFile("kiln.yaml", src, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "lock", "--mirror", host, "--wheel-index", ix.srv.URL+"/simple")
	if code != 0 {
		t.Fatalf("lock: %d %s %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "warning: ") {
		t.Fatalf("no warning to check the width of:\n%s", errOut)
	}
	for _, l := range strings.Split(out+errOut, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("%d columns: %s", n, l)
		}
	}
}

// --mirror docker.io=HOST means what --mirror HOST always meant (the
// plan's nvidia/cuda bases named through HOST); $KILN_WHEEL_INDEX stands
// for --wheel-index, and an index that does not answer is named with the
// setting and its URL.
func TestLockMirrorSyntaxAndWheelIndexEnv(t *testing.T) {
	host, _ := testRegistry(t, "11.8.0-devel-debian12", "11.8.0-runtime-debian12")
	down := httptest.NewServer(nil)
	down.Close()
	src, _ := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "recipes", "debian-cuda11.8.yaml"))
	recipe := filepath.Join(t.TempDir(), "kiln.yaml")
	_ = os.WriteFile(recipe, src, 0o644)
	t.Setenv(recipes.WheelIndexEnv, down.URL+"/simple")
	code, out, errOut := run(t, "resolve", recipe, "--json", "--mirror", "docker.io="+host)
	if code != 0 || !strings.Contains(out, `"registry_mirror": "`+host+`"`) || !strings.Contains(out, host+"/nvidia/cuda:11.8.0-devel-debian12") || !strings.Contains(out, down.URL+"/simple") {
		t.Errorf("resolve --mirror docker.io=%s with $%s: %d\n%s\n%s", host, recipes.WheelIndexEnv, code, out, errOut)
	}
	code, _, errOut = run(t, "lock", recipe, "--mirror", "docker.io="+host)
	want := "wheel index " + down.URL + "/simple (set by --wheel-index, $KILN_WHEEL_INDEX or the recipe's wheel_indexes): cannot reach it: nothing answers at " + strings.TrimPrefix(down.URL, "http://")
	if code != 1 || !strings.Contains(errOut, want) || strings.Contains(errOut, "dial tcp") {
		t.Errorf("lock with an index that is down: %d\n%s\nwant %q", code, errOut, want)
	}
	t.Setenv(recipes.WheelIndexEnv, "ftp://nope")
	if code, _, errOut = run(t, "lock", recipe, "--mirror", host); code == 0 || !strings.Contains(errOut, "$KILN_WHEEL_INDEX") {
		t.Errorf("a bad $KILN_WHEEL_INDEX: %d\n%s", code, errOut)
	}
}
