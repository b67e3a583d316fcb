package builder

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/util/entitlements"
	"github.com/tonistiigi/fsutil"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
)

// dfBase pushes a tiny base image made offline from this host's sh, find,
// rm, mkdir, ln, chmod and grep (what the system-packages step runs),
// touch and date (what every run step's wrapper runs: runArgs) and a
// python3 that succeeds, and whose pip says it runs Python python, so the
// steps that would install python and pip have nothing to do and the
// version check passes.
func dfBase(t *testing.T, ref, python string) {
	t.Helper()
	libs := []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libselinux.so.1", "/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libpcre2-8.so.0"}
	host := testimage.HostLayer(t, append([]string{"/bin/sh", "/bin/find", "/bin/rm", "/bin/mkdir", "/bin/ln", "/bin/chmod", "/bin/grep", "/bin/touch", "/bin/date"}, libs...)...)
	fake := "#!/bin/sh\nif [ \"$1 $2 $3\" = \"-m pip --version\" ]; then echo \"pip 0 from /bin (python " + python + ")\"; fi\nexit 0\n"
	py := testimage.Layer(t, []testimage.Entry{{Name: "bin/python3", Body: []byte(fake), Mode: 0o755}}, "gzip")
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "CUDA_VERSION=12.4.1"},
		Labels: map[string]string{"from.base": "kept"},
		Cmd:    []string{"/bin/sh"},
	}, host, py))
}

// imageFiles is an image's config and the sorted file list of each
// non-empty layer.
func imageFiles(t *testing.T, ref string) (*v1.ConfigFile, [][]string) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, fmt.Sprintf("%s %o", strings.TrimSuffix(h.Name, "/"), h.Mode&0o7777))
		}
		rc.Close()
		sort.Strings(names)
		// A Dockerfile cannot set the working directory without WORKDIR,
		// which commits a layer even when the directory exists (empty).
		if len(names) > 0 {
			out = append(out, names)
		}
	}
	return cf, out
}

// The exported Dockerfile, built by BuildKit's own Dockerfile frontend
// (dockerfile.v0, built into buildkitd), gives the image kiln build gives
// for the same recipe: the same env, entrypoint, cmd, labels, user and
// workdir, and the same files in each layer, with values that JSON
// escaping, the lexer's quotes and '$' and a space in a path each broke
// (issue 25 item 4, issue 27 D8).
func TestDockerfileBuildsKilnsImage(t *testing.T) {
	c, reg := buildkitEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stamp := time.Now().UnixNano()
	base := fmt.Sprintf("%s/kiln-test/df-base:%d", reg, stamp)

	r, err := recipes.Parse("kiln.yaml", []byte(`name: df-export
cuda: "12.4"
app:
  files:
    - {src: "my dir", dst: "/opt/it's $x/"}
    - {src: app.py, dst: /app/main.py}
  workdir: "/srv/$HOME"
  user: "1000:1000"
  env: {EXTRA_PATH: "/opt/bin:${PATH}", QUOTES: "a\"b\\c'd <&>"}
  entrypoint: [python3, main.py]
  cmd: ["--flag=$x"]
test: ["[ -f /app/main.py ]"]
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg))
	if err != nil {
		t.Fatal(err)
	}
	dfBase(t, base, p.Python)
	p.BaseImages.Devel, p.BaseImages.Runtime = base, base
	dir := t.TempDir()
	for f, body := range map[string]string{"my dir/a b.txt": "a", "my dir/sub/c": "c", "app.py": "print(1)\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}

	kilnRef := fmt.Sprintf("%s/kiln-test/df-export:kiln-%d", reg, stamp)
	if _, err := Build(ctx, p, in, Options{Client: c, ContextDir: dir, Progress: "quiet", Outputs: []Output{mustOutput(t, kilnRef)}}); err != nil {
		t.Fatalf("kiln build: %v", err)
	}

	df, err := Dockerfile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	// The syntax line asks for docker/dockerfile:1 from Docker Hub; the
	// frontend built into buildkitd is the one to test, offline.
	df = strings.TrimPrefix(df, "# syntax=docker/dockerfile:1\n")
	dfDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dfDir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	ctxFS, err := fsutil.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	dfFS, err := fsutil.NewFS(dfDir)
	if err != nil {
		t.Fatal(err)
	}
	dfRef := fmt.Sprintf("%s/kiln-test/df-export:dockerfile-%d", reg, stamp)
	_, err = c.Solve(ctx, nil, client.SolveOpt{
		Frontend:            "dockerfile.v0",
		FrontendAttrs:       map[string]string{"build-arg:SOURCE_DATE_EPOCH": fmt.Sprint(epoch)},
		LocalMounts:         map[string]fsutil.FS{"context": ctxFS, "dockerfile": dfFS},
		AllowedEntitlements: []string{entitlements.EntitlementNetworkHost.String()},
		Exports:             []client.ExportEntry{{Type: client.ExporterImage, Attrs: map[string]string{"name": dfRef, "push": "true", "registry.insecure": "true"}}},
	}, nil)
	if err != nil {
		t.Fatalf("BuildKit's Dockerfile frontend on the export: %v\n%s", err, df)
	}

	kc, kl := imageFiles(t, kilnRef)
	dc, dl := imageFiles(t, dfRef)
	k, d := kc.Config, dc.Config
	for _, f := range []struct {
		what      string
		kiln, dfx any
	}{
		{"env", k.Env, d.Env},
		{"entrypoint", k.Entrypoint, d.Entrypoint},
		{"cmd", k.Cmd, d.Cmd},
		{"labels", k.Labels, d.Labels},
		{"user", k.User, d.User},
		{"workdir", k.WorkingDir, d.WorkingDir},
	} {
		if fmt.Sprint(f.kiln) != fmt.Sprint(f.dfx) {
			t.Errorf("%s: kiln build %q, the export %q", f.what, f.kiln, f.dfx)
		}
	}
	if !slices.Contains(k.Env, "QUOTES=a\"b\\c'd <&>") || !slices.Contains(k.Env, "EXTRA_PATH=/opt/bin:${PATH}") {
		t.Errorf("kiln build env %q", k.Env)
	}
	if len(kl) != len(dl) {
		t.Errorf("kiln build has %d layers, the export %d:\n%q\n%q", len(kl), len(dl), kl, dl)
	}
	for i := range min(len(kl), len(dl)) {
		if !slices.Equal(kl[i], dl[i]) {
			t.Errorf("layer %d: kiln build %q, the export %q", i, kl[i], dl[i])
		}
	}
	if t.Failed() {
		t.Logf("the export:\n%s", df)
	}
}
