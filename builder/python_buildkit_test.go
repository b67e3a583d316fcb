package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
)

// standInPython is a gzipped tar laid out as python-build-standalone's
// install_only archives (python/bin/python3, python/bin/python3.X ->
// python3) whose python3 is a shell script: it answers kiln's version
// check for version alone, and pip --version as pip on it does.
func standInPython(t *testing.T, version string) []byte {
	t.Helper()
	script := "#!/bin/sh\n" +
		"if [ \"$1 $2 $3\" = \"-m pip --version\" ]; then echo \"pip 0 from /opt/python (python " + version + ")\"; exit 0; fi\n" +
		"if [ \"$1\" = \"-c\" ]; then [ \"$3\" = \"" + version + "\" ] && exit 0; echo \"kiln: the recipe names Python $3, but $4 runs Python " + version + "\" >&2; exit 1; fi\n" +
		"echo \"Python " + version + ".99\"\n"
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	epoch := time.Unix(1700000000, 0)
	for _, h := range []*tar.Header{
		{Name: "python/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "python/bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "python/bin/python3", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(script)), ModTime: epoch},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(script))
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "python/bin/python" + version, Typeflag: tar.TypeSymlink, Linkname: "python3", Mode: 0o777, ModTime: epoch}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// A recipe whose OS ships another Python builds on a real buildkitd with
// the relocatable one: BuildKit downloads the archive, checks its sha256,
// and the runtime's python, python3, python3.X and pip run it (the
// recipe's test lines call them); an archive with another sha256 fails
// the build before any step runs it.
func TestStandalonePythonOnBuildKit(t *testing.T) {
	c, reg := buildkitEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	archive := standInPython(t, "3.11")
	sum := sha256.Sum256(archive)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(archive) }))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	r, err := recipes.Parse("kiln.yaml", []byte(`name: py-standalone
cuda: "12.4"
os: ubuntu22.04
python: "3.11"
test:
  - python -V
  - python3 -V && python3.11 -V
  - pip --version | grep -F "(python 3.11)"
  - test -L /usr/local/bin/python && test -x /opt/python/bin/python3
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg))
	if err != nil {
		t.Fatal(err)
	}
	if p.PythonSource != recipes.PythonStandalone {
		t.Fatalf("python source %q", p.PythonSource)
	}
	p.PythonDist.Archives[0].URL = srv.URL + "/cpython.tar.gz"
	p.PythonDist.Archives[0].SHA256 = hex.EncodeToString(sum[:])

	stamp := time.Now().UnixNano()
	base := fmt.Sprintf("%s/kiln-test/py-base:%d", reg, stamp)
	libs := []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libselinux.so.1", "/lib/x86_64-linux-gnu/libacl.so.1", "/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libpcre2-8.so.0"}
	host := testimage.HostLayer(t, append([]string{"/bin/sh", "/bin/find", "/bin/rm", "/bin/mkdir", "/bin/ln", "/bin/chmod", "/bin/grep", "/bin/tar", "/bin/gzip", "/bin/test"}, libs...)...)
	testimage.Push(t, base, testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, host))
	p.BaseImages.Devel, p.BaseImages.Runtime = base, base

	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	ref := fmt.Sprintf("%s/kiln-test/py-standalone:%d", reg, stamp)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: t.TempDir(), Progress: "quiet", Outputs: []Output{mustOutput(t, ref)}}); err != nil {
		t.Fatalf("build: %v", err)
	}

	// Another archive under the pinned sha256: refused by BuildKit.
	p.PythonDist.Archives[0].SHA256 = strings.Repeat("0", 64)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: t.TempDir(), Progress: "quiet", Outputs: []Output{mustOutput(t, ref+"-bad")}}); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("an archive with another sha256: %v", err)
	}
}
