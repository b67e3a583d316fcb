package buildcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/recipes"
)

func buildRecipe(t *testing.T) string {
	t.Helper()
	b, err := recipes.CatalogRecipe("debian-cuda11.8")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "kiln.yaml")
	os.WriteFile(f, b, 0o644)
	os.MkdirAll(filepath.Join(dir, "app"), 0o755)
	os.WriteFile(filepath.Join(dir, "app", "main.py"), []byte("print(1)\n"), 0o644)
	return f
}

func TestBuildDryRun(t *testing.T) {
	f := buildRecipe(t)
	args := []string{"build", f, "--dry-run", "--mirror", "127.0.0.1:5000", "--wheel-index", "http://127.0.0.1:9/simple"}
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"stage devel  FROM 127.0.0.1:5000/nvidia/cuda:11.8.0-devel-debian12", "[layer: app]", "graph linux/amd64  sha256:"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	_, out2, _ := run(t, args...)
	if out != out2 {
		t.Error("two dry runs differ")
	}
	code, js, _ := run(t, append(args, "--json")...)
	if code != 0 || !strings.Contains(js, `"graph_digest": "sha256:`) {
		t.Errorf("--json: %d %s", code, js)
	}
}

func TestBuildDockerfile(t *testing.T) {
	f := buildRecipe(t)
	code, out, errOut := run(t, "build", f, "--dockerfile", "--mirror", "127.0.0.1:5000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"AS devel", "AS runtime", "--mount=type=bind,from=devel", "ENTRYPOINT"} {
		if !strings.Contains(out, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

func TestBuildUsageErrors(t *testing.T) {
	f := buildRecipe(t)
	for _, args := range [][]string{
		{"build", f, "--progress", "fancy"},
		{"build", f, "--compression", "lz4"},
		{"build", f, "--output", "tar:/x"},
		{"build", f, "--output", "127.0.0.1:5000/a:b"},
		{"build", f, "--push", "oci:/tmp/x"},
		{"build", f, "--cache-to", "type=s3,bucket=b"},
		{"build", f, "--platform", "amd64"},
		{"build", f, "--source-date-epoch", "yesterday", "--dry-run"},
		{"build", f, "--dry-run", "--dockerfile"},
		{"build", f, "--output", "oci:/tmp/a", "--output", "docker-archive:/tmp/b.tar"},
		{"build", f, "--provenance", "full"},
		{"build", f, "--builder-id", "https://ci.example/1"},
		{"build", f, "--sbom", "--output", "oci:/tmp/a"},
		{"build", f, "--format", "erofs", "--output", "oci:/tmp/a"},
		{"build", f, "--format", "squashfs", "--push", "127.0.0.1:5000/a:b"},
		{"build", f, "--format", "erofs", "--push", "127.0.0.1:5000/a:b", "--erofs-compression", "gzip"},
		{"build", f, "--format", "erofs", "--push", "127.0.0.1:5000/a:b", "--platform", "linux/amd64,linux/arm64"},
	} {
		if code, _, errOut := run(t, args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut)
		}
	}
}

func TestBuildNoDaemon(t *testing.T) {
	f := buildRecipe(t)
	code, _, errOut := run(t, "build", f, "--builder", "unix:///nonexistent/buildkitd.sock", "--mirror", "127.0.0.1:5000")
	if code != cmdutil.ExitFailure || !strings.Contains(errOut, "run buildkitd as root") && !strings.Contains(errOut, "BuildKit's own daemon") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// Where the image goes is checked before the build (issue 25 item 8): an
// unreachable --push or an --output that cannot be written fails at once,
// not after a build that takes minutes.
func TestBuildChecksOutputsFirst(t *testing.T) {
	f := buildRecipe(t)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tc := range []struct{ flag, dest, want string }{
		{"--push", "127.0.0.1:1/kiln/app:v1", "--push 127.0.0.1:1/kiln/app:v1: cannot reach"},
		{"--output", "oci:" + filepath.Join(file, "out"), "is a file, not a directory"},
	} {
		code, _, errOut := run(t, "build", f, tc.flag, tc.dest, "--builder", "unix:///nonexistent/buildkitd.sock", "--mirror", "127.0.0.1:5000")
		if code != cmdutil.ExitFailure || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %s: exit %d: %s; want %q", tc.flag, tc.dest, code, errOut, tc.want)
		}
	}
}

func TestBuildMissingRecipe(t *testing.T) {
	if code, _, _ := run(t, "build", filepath.Join(t.TempDir(), "nope.yaml"), "--dry-run"); code != cmdutil.ExitFailure {
		t.Errorf("exit %d", code)
	}
}
