package warm_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// The name a local image is recorded under comes from a file: an OCI
// layout whose ref.name is only a tag ("latest", as skopeo writes it) is
// named by its directory (it was recorded in containerd as "latest"), a
// docker-archive:FILE:TAG selection by the RepoTag it selects (it was
// recorded as docker.io/library/1:latest), and a hostile name is refused
// (issue 27 D15: newlines, ';', '../' went into containerd unchecked).
func TestLocalImageNames(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	root := t.TempDir()

	wapp := filepath.Join(root, "img", "wapp")
	testimage.WriteLayout(t, wapp, "latest", img)
	full := filepath.Join(root, "full")
	testimage.WriteLayout(t, full, "127.0.0.1:5000/team/app:v1", img)
	evil := filepath.Join(root, "evil")
	testimage.WriteLayout(t, evil, "x/y:1\n;rm -rf /", img)
	dots := filepath.Join(root, "dots")
	testimage.WriteLayout(t, dots, "../../etc/x:1", img)
	upper := filepath.Join(root, "Upper")
	testimage.WriteLayout(t, upper, "v1", img)

	archive := filepath.Join(root, "app.tar")
	testimage.WriteArchive(t, archive, "kiln/app:1", img)
	hostile := filepath.Join(root, "hostile.tar")
	writeArchiveNamed(t, archive, hostile, "kiln/app:1", `a;\n/../b1`)

	for _, tc := range []struct{ ref, name, err string }{
		{ref: "oci:" + wapp, name: "docker.io/library/wapp:latest"},
		{ref: "oci:" + wapp + ":latest", name: "docker.io/library/wapp:latest"},
		{ref: "oci:" + full, name: "127.0.0.1:5000/team/app:v1"},
		{ref: "oci:" + full + ":127.0.0.1:5000/team/app:v1", name: "127.0.0.1:5000/team/app:v1"},
		{ref: "oci:" + evil, err: "not an image name"},
		{ref: "oci:" + dots, err: "not an image name"},
		{ref: "oci:" + upper, err: "rename the directory"},
		{ref: "docker-archive:" + archive, name: "docker.io/kiln/app:1"},
		{ref: "docker-archive:" + archive + ":1", name: "docker.io/kiln/app:1"},
		{ref: "docker-archive:" + hostile, err: "not an image name"},
	} {
		s, err := warm.Resolve(ctx, testkit.Refs(t, tc.ref), warm.ResolveOptions{Platform: warmtest.AMD64})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.ref, err, tc.err)
			}
			if s != nil {
				s.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.ref, err)
			continue
		}
		if len(s.Images) != 1 || s.Images[0].Name != tc.name {
			t.Errorf("%s: images %+v, want one named %s", tc.ref, s.Images, tc.name)
		}
		s.Close()
	}
}

// writeArchiveNamed copies the docker archive src to dst with the RepoTag
// old replaced by the JSON text repl in manifest.json (same length, so
// the tar stays valid).
func writeArchiveNamed(t *testing.T, src, dst, old, repl string) {
	t.Helper()
	if len(old) != len(repl) {
		t.Fatalf("replacement %q must be %d bytes", repl, len(old))
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	tr, tw := tar.NewReader(in), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			b = bytes.ReplaceAll(b, []byte(`"`+old+`"`), []byte(`"`+repl+`"`))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	tw.Close()
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kiln warm docker-daemon:NAME reads the image out of the local Docker
// daemon, names it in full and leaves no temporary archive behind.
func TestWarmFromDockerDaemon(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	archive := filepath.Join(t.TempDir(), "d.tar")
	testimage.WriteArchive(t, archive, "kiln/daemon:1", img)
	if out, err := exec.Command("docker", "-H", "unix://"+dk.Socket, "load", "-i", archive).CombinedOutput(); err != nil {
		t.Fatalf("docker load: %v\n%s", err, out)
	}
	t.Setenv("DOCKER_HOST", "unix://"+dk.Socket)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s, err := warm.Resolve(context.Background(), testkit.Refs(t, "docker-daemon:kiln/daemon:1"), warm.ResolveOptions{Platform: warmtest.AMD64})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Images) != 1 || s.Images[0].Name != "docker.io/kiln/daemon:1" || s.Images[0].Source != "docker-daemon:kiln/daemon:1" {
		t.Errorf("images %+v", s.Images)
	}
	dst, err := ocilayout.New(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := warm.Warm(context.Background(), s, dst, warm.Options{}); err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v %v", rep.Ready, err)
	}
	s.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
