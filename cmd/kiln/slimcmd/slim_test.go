package slimcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/slim"
	"github.com/kiln-build/kiln/weights"
)

func TestSlimCommand(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/bin"}},
		testimage.Layer(t, []testimage.Entry{
			testimage.Sized("usr/local/cuda/bin/nvcc", 5000), testimage.Sized("usr/bin/python3", 100),
			testimage.Sized("usr/lib/x86_64-linux-gnu/libcudart_static.a", 4000),
		}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.Safetensors("app/models/m.safetensors", 4096), testimage.File("app/main.py", []byte("m"))}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	src := "oci:" + dir + ":app"
	reg := testimage.Registry(t)

	// Registry destination, weights to an OCI layout, JSON report.
	code, out, errOut := run(t, "slim", src, "--to", reg+"/slim/app:v1", "--weights-to", "oci:"+filepath.Join(dir, "w")+":app", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.DivertedFiles != 1 || rep.After.Files != 2 || rep.Digest == "" {
		t.Errorf("report: diverted %d, after %d files, digest %q", rep.DivertedFiles, rep.After.Files, rep.Digest)
	}
	got, err := testkit.OpenImage(context.Background(), reg+"/slim/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Digest.String() != rep.Digest {
		t.Errorf("pushed %s, report says %s", got.Digest, rep.Digest)
	}
	lb := got.Config.Config.Labels
	if !strings.HasPrefix(lb[layers.LabelWeightsManifest], "oci:") || lb[layers.LabelWeightsMount] != "/app/models" {
		t.Errorf("labels %v", lb)
	}
	if got.Config.Config.Env[0] != "PATH=/usr/bin" {
		t.Errorf("env %v", got.Config.Config.Env)
	}

	// --compression both (the default): gzip under the tag, zstd under
	// TAG-zstd, one config.
	if len(rep.Images) != 2 || rep.Images[0].Ref.String() != reg+"/slim/app:v1" || rep.Images[0].Compression != "gzip" ||
		rep.Images[1].Ref.String() != reg+"/slim/app:v1-zstd" || rep.Images[1].Compression != "zstd" || rep.ImageID == "" {
		t.Fatalf("images %+v, image ID %q", rep.Images, rep.ImageID)
	}
	for _, p := range rep.Images {
		im, err := testkit.OpenImage(context.Background(), p.Ref.String())
		if err != nil {
			t.Fatal(err)
		}
		if im.Digest.String() != p.Digest || im.Config.RootFS.DiffIDs[0] != got.Config.RootFS.DiffIDs[0] {
			t.Errorf("%s: digest %s, report says %s", p.Ref, im.Digest, p.Digest)
		}
		for _, l := range im.Layers {
			if want := map[string]string{"gzip": "application/vnd.oci.image.layer.v1.tar+gzip", "zstd": "application/vnd.oci.image.layer.v1.tar+zstd"}[p.Compression]; string(l.MediaType) != want {
				t.Errorf("%s: layer %s, want %s", p.Ref, l.MediaType, want)
			}
		}
		im.Close()
	}

	// Same input and weights destination, docker archive output, table:
	// the same image ID (reproducible; the archive holds plain tars).
	arch := filepath.Join(dir, "slim.tar")
	code, out, errOut = run(t, "slim", src, "--to", "docker-archive:"+arch, "--weights-to", "oci:"+filepath.Join(dir, "w")+":app", "--progress", "none")
	if code != cmdutil.ExitOK || !strings.Contains(out, "static_libs") || !strings.Contains(out, rep.ImageID) {
		t.Errorf("table run: code %d\n%s\n%s", code, out, errOut)
	}

	// Without --weights-to the weights stay and the report says so.
	code, out, _ = run(t, "slim", src, "--to", "oci:"+filepath.Join(dir, "kept"), "--progress", "none")
	// (Prose is wrapped at the terminal's width: compare words.)
	if code != cmdutil.ExitOK || !strings.Contains(strings.Join(strings.Fields(out), " "), "no weights destination given") {
		t.Errorf("kept weights not reported: %d\n%s", code, out)
	}
}

func TestSlimCommandErrors(t *testing.T) {
	dir := t.TempDir()
	good := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))})
	bad := bytes.Clone(good)
	bad[600] ^= 1
	h, _, _ := v1SHA(good)
	img := testimage.Image(t, testimage.Config{}, testimage.Lying(bad, h, h, "application/vnd.oci.image.layer.v1.tar"))
	testimage.WriteLayout(t, dir, "bad", img)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("drop: [nvcc]\n"), 0o644)
	dest := filepath.Join(dir, "out.tar")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"slim", "oci:" + dir + ":bad"}, cmdutil.ExitUsage, "--to is required"},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "docker-archive:" + dest, "--level", "30"}, cmdutil.ExitUsage, "--level 30"},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "docker-archive:" + dest, "--policy", pol}, cmdutil.ExitUsage, "p.yaml:1: drop[0]"},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "docker-archive:" + dest, "--policy", "nope"}, cmdutil.ExitUsage, "unknown built-in policy"},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "docker-archive:" + dest}, cmdutil.ExitFailure, "digest"},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "docker-archive:" + dest, "--compression", "xz"}, cmdutil.ExitUsage, `--compression: "xz" is not one of both, gzip, zstd`},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "docker-archive:" + dest, "--max-layer-size", "big"}, cmdutil.ExitUsage, "--max-layer-size"},
		{[]string{"slim", "oci:" + dir + ":bad", "--to", "127.0.0.1:1/a/b@sha256:" + strings.Repeat("0", 64)}, cmdutil.ExitUsage, "--compression both: 127.0.0.1:1/a/b@sha256:"},
	}
	for _, tc := range cases {
		code, _, errOut := run(t, append(tc.args, "--progress", "none")...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, %s; want %d %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Errorf("destination written after a failure: %v", err)
	}
}

func v1SHA(b []byte) (v1.Hash, int64, error) { return v1.SHA256(bytes.NewReader(b)) }

// --prune-libs drops a library nothing links (the report says which, and
// warns that no probe checked the result); the program's libc stays.
func TestSlimCommandPruneLibs(t *testing.T) {
	prog, err1 := os.ReadFile("/usr/bin/true")
	libz, err2 := os.ReadFile("/usr/lib/x86_64-linux-gnu/libz.so.1")
	libc, err3 := os.ReadFile("/usr/lib/x86_64-linux-gnu/libc.so.6")
	if err1 != nil || err2 != nil || err3 != nil {
		t.Skip("host ELF files missing")
	}
	dir := t.TempDir()
	ml := "usr/lib/x86_64-linux-gnu/"
	img := testimage.Image(t, testimage.Config{Cmd: []string{"/usr/bin/true"}},
		testimage.Layer(t, []testimage.Entry{
			testimage.File("usr/bin/true", prog), testimage.File(ml+"libc.so.6", libc),
			testimage.File(ml+"libz.so.1.2.13", libz), testimage.Symlink(ml+"libz.so.1", "libz.so.1.2.13"),
		}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	code, out, errOut := run(t, "slim", "oci:"+dir+":app", "--to", "oci:"+filepath.Join(dir, "out"), "--prune-libs", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Prune == nil || rep.Prune.DroppedFiles != 1 || rep.Prune.DroppedBytes != int64(len(libz)) || rep.Prune.Top[0].Path != "/"+ml+"libz.so.1.2.13" {
		t.Fatalf("prune report: %+v", rep.Prune)
	}
	if !strings.Contains(strings.Join(rep.Warnings, "\n"), "without --probe") {
		t.Errorf("no warning about the missing probe: %v", rep.Warnings)
	}
	if !strings.Contains(rep.PolicySummary, "prune unreferenced libs") || rep.After.Files != 2 {
		t.Errorf("policy %q, %d files after", rep.PolicySummary, rep.After.Files)
	}
}

// --compression gzip writes one gzip image under --to; --max-layer-size
// splits a group into layers named GROUP-N, reported in the JSON.
func TestSlimCommandCompressionAndCap(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{
			testimage.Sized("usr/local/cuda/lib64/libcublas.so.12", 3000), testimage.Sized("usr/local/cuda/lib64/libcudnn.so.9", 3000),
			testimage.File("app/main.py", []byte("m")),
		}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	out := "oci:" + filepath.Join(dir, "out") + ":v1"
	code, stdout, errOut := run(t, "slim", "oci:"+dir+":app", "--to", out, "--compression", "gzip", "--max-layer-size", "4KiB", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range rep.Layers {
		names = append(names, l.Name)
	}
	if strings.Join(names, " ") != "cuda-1 cuda-2 app" || rep.MaxLayerSize != 4096 {
		t.Errorf("layers %v, max %d", names, rep.MaxLayerSize)
	}
	if len(rep.Images) != 1 || rep.Images[0].Ref.String() != out || rep.Images[0].Compression != "gzip" {
		t.Fatalf("images %+v", rep.Images)
	}
	got, err := testkit.OpenImage(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	for _, l := range got.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("layer %s", l.MediaType)
		}
	}
	if _, err := testkit.OpenImage(context.Background(), "oci:"+filepath.Join(dir, "out")+":v1-zstd"); err == nil {
		t.Error("a zstd variant was written with --compression gzip")
	}
}

// Issue 25 item 3 through slim --weights-to: every file below the
// weights' mount (a Hugging Face-shaped directory) goes into the volume,
// none stays in the image where the mount would hide it.
func TestSlimWeightsToKeepsNeighbours(t *testing.T) {
	dir := t.TempDir()
	img, orig := cmdtest.HFModelImage(t)
	testimage.WriteLayout(t, filepath.Join(dir, "src"), "app", img)
	reg := testimage.Registry(t)
	wto := "oci:" + filepath.Join(dir, "w") + ":hf"
	code, out, errOut := run(t, "slim", "oci:"+filepath.Join(dir, "src")+":app", "--to", reg+"/slim/hf:v1", "--weights-to", wto, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var below []string
	for p := range orig {
		if strings.HasPrefix(p, cmdtest.HFModelMount+"/") {
			below = append(below, strings.TrimPrefix(p, cmdtest.HFModelMount+"/"))
		}
	}
	if rep.DivertedFiles != len(below) || rep.DivertedBeside != len(below)-2 || rep.DivertMount != cmdtest.HFModelMount {
		t.Errorf("report: diverted %d (%d beside) below %q; want %d (%d) below %s", rep.DivertedFiles, rep.DivertedBeside, rep.DivertMount, len(below), len(below)-2, cmdtest.HFModelMount)
	}
	slimFiles := cmdtest.RefFiles(t, reg+"/slim/hf:v1")
	for p, sum := range orig {
		_, in := slimFiles[p]
		if strings.HasPrefix(p, cmdtest.HFModelMount+"/") == in {
			t.Errorf("%s: in the slim image %v (sha256 %s)", p, in, sum)
		}
	}
	res, err := weights.Resolve(context.Background(), reg+"/slim/hf:v1", "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range res.Manifest.Files {
		got[f.Path] = f.SHA256
	}
	for _, rel := range below {
		if got[rel] != orig[cmdtest.HFModelMount+"/"+rel] {
			t.Errorf("volume manifest: %s has sha256 %q, want the image's %s", rel, got[rel], orig[cmdtest.HFModelMount+"/"+rel])
		}
	}
	if len(got) != len(below) || res.Manifest.Mount != cmdtest.HFModelMount {
		t.Errorf("volume: %d files at %s, want %d at %s", len(got), res.Manifest.Mount, len(below), cmdtest.HFModelMount)
	}
}

// Each pass reads every layer once: its bar ends at the image's
// compressed size, where one bar for both used to claim twice the image.
func TestSlimProgressCountsEachPassOnce(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 300_000), testimage.Sized("usr/local/cuda/bin/nvcc", 200_000)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("m"))}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	src := "oci:" + dir + ":app"
	li, err := testkit.OpenImage(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	size := li.CompressedSize()
	li.Close()

	code, _, errOut := run(t, "slim", src, "--to", "oci:"+filepath.Join(dir, "out")+":app", "--progress", "plain")
	if code != cmdutil.ExitOK {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, pass := range []string{"scan", "rewrite"} {
		want := pass + " " + src + ": done, " + bytesize.Format(size) + " in "
		if !strings.Contains(errOut, want) {
			t.Errorf("no %q in\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, bytesize.Format(2*size)) {
		t.Errorf("progress claims twice the image (%s):\n%s", bytesize.Format(2*size), errOut)
	}
}
