package weightscmd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/weights"
)

var updateWeights = flag.Bool("update-weights", false, "rewrite cmd/kiln weights golden files")

// strippedApp strips a small image with two weight files (cmdtest.StrippedApp).
func strippedApp(t *testing.T) (string, string) {
	t.Helper()
	return cmdtest.StrippedApp(t, testimage.Registry(t), NewCmdWeights)
}

func TestWeightsStripPullVerify(t *testing.T) {
	slimRef, wref := strippedApp(t)
	// The slim image has no weights left and points at the artifact.
	img, err := testkit.OpenImage(t.Context(), slimRef)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Config.Config.Labels[layers.LabelWeightsManifest]; got != wref {
		t.Errorf("label %s = %q, want %q", layers.LabelWeightsManifest, got, wref)
	}
	if got := img.Config.Config.Labels[layers.LabelWeightsMount]; got != "/app/models" {
		t.Errorf("label %s = %q", layers.LabelWeightsMount, got)
	}
	if img.CompressedSize() > 1<<20 {
		t.Errorf("slim image is %d bytes: the 20 MiB weights are still in it", img.CompressedSize())
	}

	// Pull through the image's label.
	vol := filepath.Join(t.TempDir(), "vol")
	code, out, errOut := run(t, "weights", "pull", slimRef, "--into", vol, "--progress", "none")
	if code != cmdutil.ExitOK || !strings.Contains(out, "state       pulled\nfiles       2 files") {
		t.Fatalf("pull: code %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = run(t, "weights", "pull", wref, "--into", vol, "--json")
	var pr weights.PullResult
	json.Unmarshal([]byte(out), &pr)
	if code != cmdutil.ExitOK || !pr.AlreadyReady {
		t.Errorf("second pull: code %d %s", code, out)
	}
	code, out, _ = run(t, "weights", "verify", vol)
	if code != cmdutil.ExitOK || !strings.Contains(out, "state       ok\nfiles       2 files") {
		t.Errorf("verify: code %d %s", code, out)
	}
	os.WriteFile(filepath.Join(vol, weights.ModelDir, "m-00002.safetensors"), []byte("tampered"), 0o644)
	code, out, errOut = run(t, "weights", "verify", vol)
	if code != cmdutil.ExitFailure || !strings.Contains(out, "m-00002.safetensors") || !strings.Contains(errOut, "does not verify") {
		t.Errorf("tampered verify: code %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = run(t, "weights", "verify", vol, "--json")
	var rep weights.VerifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != cmdutil.ExitFailure || rep.OK || len(rep.Problems) != 1 {
		t.Errorf("verify --json: code %d %s", code, out)
	}
}

// runArgsManifest writes a one-file volume manifest mounted at
// /app/models (what run-args reads) and returns its path.
func runArgsManifest(t *testing.T) string {
	t.Helper()
	m := &weights.Manifest{SchemaVersion: 1, MediaType: weights.MediaTypeManifest, Mount: "/app/models",
		Files:  []weights.File{{Path: "m.safetensors", Size: 3, SHA256: strings.Repeat("a", 64), Mode: 0o644, Layer: "sha256:" + strings.Repeat("a", 64)}},
		Layers: []weights.Layer{{Digest: "sha256:" + strings.Repeat("a", 64), MediaType: weights.MediaTypeWeightRaw, Size: 3}}, Size: 3}
	m.SetDigest = weights.SetDigest(m.Files)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	mf := filepath.Join(t.TempDir(), "weights.json")
	if err := os.WriteFile(mf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return mf
}

func TestWeightsRunArgsGolden(t *testing.T) {
	dir := t.TempDir()
	mf := runArgsManifest(t)
	for _, tc := range []struct{ name, volume string }{{"pvc", "serve-weights"}, {"hostdir", "/var/lib/models/serve"}} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, "weights", "run-args", mf, "--volume", tc.volume, "--image", "registry.local/acme/serve:1.2-slim", "--pull-ref", "registry.local/acme/serve-weights@sha256:"+strings.Repeat("b", 64))
			if code != cmdutil.ExitOK {
				t.Fatalf("code %d %s", code, errOut)
			}
			golden := filepath.Join("testdata", "weights-run-args-"+tc.name+".golden")
			if *updateWeights {
				os.WriteFile(golden, []byte(out), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("run-args differs from %s:\n%s", golden, out)
			}
			// The YAML snippets parse, and mount the volume's model
			// directory read-only (kiln's bookkeeping stays out of the
			// app's mount); the init container fills the whole volume.
			_, y, _ := run(t, "weights", "run-args", mf, "--volume", tc.volume, "--format", "kubernetes")
			var pod struct {
				Spec struct {
					InitContainers []struct {
						Args []string `yaml:"args"`
					} `yaml:"initContainers"`
					Containers []struct {
						VolumeMounts []struct {
							MountPath string `yaml:"mountPath"`
							SubPath   string `yaml:"subPath"`
							ReadOnly  bool   `yaml:"readOnly"`
						} `yaml:"volumeMounts"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			}
			if err := yaml.Unmarshal([]byte(strings.TrimPrefix(y, "\n# kubernetes\n")), &pod); err != nil {
				t.Fatalf("kubernetes snippet: %v\n%s", err, y)
			}
			vm := pod.Spec.Containers[0].VolumeMounts[0]
			if vm.MountPath != "/app/models" || vm.SubPath != weights.ModelDir || !vm.ReadOnly || pod.Spec.InitContainers[0].Args[1] != "pull" {
				t.Errorf("kubernetes snippet: %+v", pod)
			}
			_, y, _ = run(t, "weights", "run-args", mf, "--volume", tc.volume, "--format", "compose")
			var compose struct {
				Services map[string]struct {
					Volumes []struct {
						Type     string `yaml:"type"`
						Source   string `yaml:"source"`
						Target   string `yaml:"target"`
						ReadOnly bool   `yaml:"read_only"`
						Volume   struct {
							Subpath string `yaml:"subpath"`
						} `yaml:"volume"`
					} `yaml:"volumes"`
				} `yaml:"services"`
			}
			if err := yaml.Unmarshal([]byte(strings.TrimPrefix(y, "\n# compose.yaml\n")), &compose); err != nil || len(compose.Services["app"].Volumes) != 1 {
				t.Fatalf("compose snippet: %v\n%s", err, y)
			}
			cv := compose.Services["app"].Volumes[0]
			if cv.Target != "/app/models" || !cv.ReadOnly ||
				tc.name == "pvc" && (cv.Type != "volume" || cv.Source != tc.volume || cv.Volume.Subpath != weights.ModelDir) ||
				tc.name == "hostdir" && (cv.Type != "bind" || cv.Source != tc.volume+"/"+weights.ModelDir) {
				t.Errorf("compose snippet mounts %+v, want the volume's %s directory", cv, weights.ModelDir)
			}
		})
	}
	if code, _, _ := run(t, "weights", "run-args", mf, "--volume", "bad name!"); code != cmdutil.ExitUsage {
		t.Errorf("bad volume name: code %d, want %d", code, cmdutil.ExitUsage)
	}
	// k8s is kiln warm --emit's word for the same thing; an image in a
	// layout or an archive would paste into a docker run that cannot run it.
	k8s := []string{"weights", "run-args", mf, "--volume", "w", "--image", "registry.local/acme/serve:1", "--pull-ref", "registry.local/acme/w@sha256:" + strings.Repeat("b", 64), "--format"}
	_, y1, _ := run(t, append(k8s, "k8s")...)
	_, y2, _ := run(t, append(k8s, "kubernetes")...)
	if y1 == "" || y1 != y2 {
		t.Errorf("--format k8s:\n%s\nwant what kubernetes prints:\n%s", y1, y2)
	}
	if code, _, errOut := run(t, "weights", "run-args", mf, "--volume", "w", "--image", "oci:"+dir+"/slim:app"); code != cmdutil.ExitUsage || !strings.Contains(errOut, "push it to a registry") {
		t.Errorf("an oci: image: code %d %s", code, errOut)
	}
	if code, _, _ := run(t, "weights", "pull", mf); code != cmdutil.ExitUsage {
		t.Errorf("pull without --into: code %d", code)
	}
	if code, _, errOut := run(t, "weights", "pull", mf, "--into", dir+"/v"); code != cmdutil.ExitFailure || !strings.Contains(errOut, "--from") {
		t.Errorf("pull of a manifest without a repository: code %d %s", code, errOut)
	}
}

func TestWeightsPullChunkFlags(t *testing.T) {
	_, wref := strippedApp(t)
	// The 20 MiB file in 1 MiB Range chunks, three at a time.
	vol := filepath.Join(t.TempDir(), "vol")
	code, out, errOut := run(t, "weights", "pull", wref, "--into", vol, "--chunk-size", "1MiB", "--concurrency", "3", "--limit-rate", "1G", "--progress", "none")
	if code != cmdutil.ExitOK || !strings.Contains(out, "state       pulled\nfiles       2 files") {
		t.Fatalf("chunked pull: code %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := run(t, "weights", "verify", vol); code != cmdutil.ExitOK {
		t.Errorf("verify: code %d %s", code, out)
	}
	for _, tc := range []struct{ args, want string }{
		{"--chunk-size lots", "--chunk-size"},
		{"--chunk-size 4KiB", "under 1MiB"},
		{"--concurrency 0", "--requests: must be at least 1"},
		{"--requests 0", "--requests: must be at least 1"},
		{"--limit-rate -5M", "--limit-rate"},
	} {
		args := append([]string{"weights", "pull", wref, "--into", t.TempDir()}, strings.Fields(tc.args)...)
		if code, _, errOut := run(t, args...); code != cmdutil.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: code %d, stderr %q", tc.args, code, errOut)
		}
	}
}

// --image-twin: the volume as an image, named by the stripped image's
// label, whose layers a runtime unpacks into exactly the volume; run-args
// --twin prints the Kubernetes image-volume form.
func TestWeightsStripImageTwin(t *testing.T) {
	reg := testimage.Registry(t)
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("app/serve.py", []byte("print('hi')\n")),
			testimage.Safetensors("app/models/m-00001.safetensors", 20<<20), testimage.Safetensors("app/models/m-00002.safetensors", 5000)}, "gzip"))
	testimage.WriteLayout(t, filepath.Join(dir, "src"), "app", img)
	slimRef, twinAt := reg+"/acme/serve:slim", reg+"/acme/serve-weights:v1-image"
	code, out, errOut := run(t, "weights", "strip", "oci:"+filepath.Join(dir, "src")+":app", "--to", slimRef,
		"--weights-to", reg+"/acme/serve-weights:v1", "--image-twin", twinAt, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("strip: code %d\n%s\n%s", code, out, errOut)
	}
	var r stripResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Twin, reg+"/acme/serve-weights@sha256:") {
		t.Fatalf("twin %q", r.Twin)
	}
	slim, err := testkit.OpenImage(t.Context(), slimRef)
	if err != nil {
		t.Fatal(err)
	}
	slim.Close()
	if got := slim.Config.Config.Labels[weights.LabelTwin]; got != r.Twin {
		t.Errorf("stripped image label %s = %q, want %q", weights.LabelTwin, got, r.Twin)
	}
	twin, err := testkit.OpenImage(t.Context(), r.Twin)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Close()
	if twin.Config.Config.Labels[weights.LabelTwinOf] != r.Weights || len(twin.Layers) != 3 {
		t.Fatalf("twin: labels %v, %d layers; want it tied to %s, 2 files + manifest", twin.Config.Config.Labels, len(twin.Layers), r.Weights)
	}
	code, out, _ = run(t, "weights", "run-args", slimRef, "--volume", "w", "--twin", r.Twin, "--format", "kubernetes")
	if code != cmdutil.ExitOK || !strings.Contains(out, "image volume") || !strings.Contains(out, "reference: "+r.Twin) {
		t.Fatalf("run-args --twin: code %d\n%s", code, out)
	}
	if code, _, _ := run(t, "weights", "strip", "oci:"+filepath.Join(dir, "src")+":app", "--to", slimRef, "--weights-to", reg+"/acme/w:v2", "--image-twin", "docker-archive:/tmp/x.tar"); code != cmdutil.ExitUsage {
		t.Errorf("--image-twin docker-archive: exit %d, want usage", code)
	}
}

// D11: `kiln weights pull` (what the Kubernetes init container runs) must
// not call a volume "already ready" over bit rot that kept the file's size
// and modification time: it hashes, finds and heals it.
func TestWeightsPullHealsBitRot(t *testing.T) {
	_, wref := strippedApp(t)
	vol := filepath.Join(t.TempDir(), "vol")
	if code, out, errOut := run(t, "weights", "pull", wref, "--into", vol, "--progress", "none"); code != cmdutil.ExitOK {
		t.Fatalf("pull: code %d\n%s\n%s", code, out, errOut)
	}
	file := filepath.Join(vol, weights.ModelDir, "m-00002.safetensors")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0x80
	if err := os.WriteFile(file, b, fi.Mode()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "weights", "pull", wref, "--into", vol, "--progress", "none", "--quick")
	if code != cmdutil.ExitOK || !strings.Contains(out, "already ready (--quick: not verified)") {
		t.Fatalf("--quick trusts the marker: code %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, "weights", "pull", wref, "--into", vol, "--progress", "none")
	if code != cmdutil.ExitOK || strings.Contains(out, "already ready") || !strings.Contains(out, "1 already present") {
		t.Fatalf("pull over bit rot: code %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := run(t, "weights", "verify", vol); code != cmdutil.ExitOK {
		t.Fatalf("after the healing pull: code %d %s", code, out)
	}
	code, out, _ = run(t, "weights", "pull", wref, "--into", vol, "--progress", "none")
	if code != cmdutil.ExitOK || !strings.Contains(out, "already ready (verified)") {
		t.Fatalf("healed volume: code %d %s", code, out)
	}
}

// Issue 25 item 3: weights keep their neighbours. A Hugging Face-shaped
// model directory is stripped; the volume must hold every file the image
// had below the mount (shards, index, config, tokenizer, generation
// config, a README, a subdirectory), the stripped image none of them (the
// mount would hide them) and everything else; pulled, the volume has
// their bytes, and every run-args form mounts it at that directory.
func TestWeightsStripKeepsNeighbours(t *testing.T) {
	reg := testimage.Registry(t)
	dir := t.TempDir()
	img, orig := cmdtest.HFModelImage(t)
	testimage.WriteLayout(t, filepath.Join(dir, "src"), "app", img)
	slimRef, wref := reg+"/acme/hf:slim", reg+"/acme/hf-weights:v1"
	code, out, errOut := run(t, "weights", "strip", "oci:"+filepath.Join(dir, "src")+":app", "--to", slimRef, "--weights-to", wref, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("strip: code %d\n%s\n%s", code, out, errOut)
	}
	var r struct {
		Files, Beside int
		Mount         string
		Weights       string
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	under := map[string]string{} // path below the mount → sha256
	for p, sum := range orig {
		if strings.HasPrefix(p, cmdtest.HFModelMount+"/") {
			under[strings.TrimPrefix(p, cmdtest.HFModelMount+"/")] = sum
		}
	}
	if r.Mount != cmdtest.HFModelMount || r.Files != len(under) || r.Beside != len(under)-2 {
		t.Errorf("strip: mount %s, %d files (%d beside the weights); want %s, %d (%d)", r.Mount, r.Files, r.Beside, cmdtest.HFModelMount, len(under), len(under)-2)
	}
	slimFiles := cmdtest.RefFiles(t, slimRef)
	for p, sum := range orig {
		_, inImage := slimFiles[p]
		switch below := strings.HasPrefix(p, cmdtest.HFModelMount+"/"); {
		case below && inImage:
			t.Errorf("%s is still in the stripped image, under the volume's mount", p)
		case !below && slimFiles[p] != sum:
			t.Errorf("%s left the image (sha256 %q), but it is not below the mount", p, slimFiles[p])
		}
	}

	vol := filepath.Join(t.TempDir(), "vol")
	if code, out, errOut := run(t, "weights", "pull", slimRef, "--into", vol, "--progress", "none"); code != cmdutil.ExitOK {
		t.Fatalf("pull: code %d\n%s\n%s", code, out, errOut)
	}
	for rel, sum := range under {
		b, err := os.ReadFile(filepath.Join(vol, weights.ModelDir, rel))
		if err != nil {
			t.Errorf("volume: %v", err)
			continue
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("volume: %s differs from the image's", rel)
		}
	}

	for _, format := range []string{"docker", "compose", "kubernetes"} {
		code, out, errOut := run(t, "weights", "run-args", slimRef, "--volume", "models", "--format", format)
		if code != cmdutil.ExitOK {
			t.Fatalf("run-args %s: code %d\n%s\n%s", format, code, out, errOut)
		}
		want := map[string]string{"docker": "src=models,dst=/app/models,volume-subpath=model,ro", "compose": "target: /app/models", "kubernetes": "mountPath: /app/models\n          subPath: model\n"}[format]
		if !strings.Contains(out, want) {
			t.Errorf("run-args %s does not mount the volume at %s:\n%s", format, cmdtest.HFModelMount, out)
		}
	}
}

// A link below the mount cannot go into a volume of regular files and
// would be hidden by the mount: strip refuses and says what to do. A
// symlink elsewhere that points at a weight stays in the image: the
// volume brings its target back at run time.
func TestWeightsStripLinksAndMount(t *testing.T) {
	reg := testimage.Registry(t)
	dir := t.TempDir()
	st := testimage.Safetensors("app/models/model.safetensors", 5000)
	cases := []struct {
		name    string
		entries []testimage.Entry
		args    []string
		want    string
	}{
		{"symlink below the mount", []testimage.Entry{st, testimage.Symlink("app/models/latest.safetensors", "model.safetensors")}, nil,
			"/app/models/latest.safetensors is a symlink to model.safetensors below the weights' mount /app/models"},
		{"mount above no weight", []testimage.Entry{st}, []string{"--mount", "/app/other"},
			"/app/models/model.safetensors is not below the mount /app/other"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, tc.entries, "gzip"))
			src := filepath.Join(dir, fmt.Sprint(i))
			testimage.WriteLayout(t, src, "app", img)
			args := append([]string{"weights", "strip", "oci:" + src + ":app", "--to", reg + "/links/app:slim", "--weights-to", reg + "/links/w:v1", "--progress", "none"}, tc.args...)
			code, out, errOut := run(t, args...)
			if code == cmdutil.ExitOK || !strings.Contains(errOut, tc.want) {
				t.Fatalf("code %d\n%s\n%s\nwant an error with %q", code, out, errOut, tc.want)
			}
		})
	}

	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{st, testimage.Symlink("app/current.safetensors", "models/model.safetensors")}, "gzip"))
	testimage.WriteLayout(t, filepath.Join(dir, "ok"), "app", img)
	if code, out, errOut := run(t, "weights", "strip", "oci:"+filepath.Join(dir, "ok")+":app", "--to", reg+"/links/ok:slim", "--weights-to", reg+"/links/okw:v1", "--progress", "none"); code != cmdutil.ExitOK {
		t.Fatalf("strip: code %d\n%s\n%s", code, out, errOut)
	}
	slim, err := testkit.OpenImage(t.Context(), reg+"/links/ok:slim")
	if err != nil {
		t.Fatal(err)
	}
	defer slim.Close()
	found := false
	for _, l := range slim.Layers {
		if _, err := l.Walk(t.Context(), layers.WalkOptions{}, func(e *layers.Entry, _ io.Reader) error {
			found = found || e.Path == "app/current.safetensors" && e.Header.Linkname == "models/model.safetensors"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !found {
		t.Error("the symlink /app/current.safetensors to a diverted weight left the image; the volume brings its target back")
	}
}

// TestWeightsRunArgsCases: an init image named by tag is warned about (on
// stderr, and in --json's warnings) where a snippet runs it; an application
// image in an OCI layout or a docker archive is refused in words (exit 2),
// one in the Docker daemon is named as docker names it (no docker-daemon:);
// k8s is kubernetes.
func TestWeightsRunArgsCases(t *testing.T) {
	dir := t.TempDir()
	mf := runArgsManifest(t)
	pinned := "ghcr.io/kiln-build/kiln@sha256:" + strings.Repeat("c", 64)
	base := []string{"weights", "run-args", mf, "--pull-ref", "registry.local/acme/w@sha256:" + strings.Repeat("b", 64)}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		errWords []string // each in stderr
		noErr    string   // not in stderr
		out      string   // in stdout
	}{
		{name: "default init image warns", args: []string{"--volume", "w", "--image", "reg/a:1"},
			errWords: []string{"warning: --init-image ghcr.io/kiln-build/kiln:", "not pinned by digest", "crane digest ghcr.io/kiln-build/kiln:latest", "--init-image ghcr.io/kiln-build/kiln@sha256:..."}, out: "# kubernetes"},
		{name: "tagged init image warns", args: []string{"--volume", "w", "--image", "reg/a:1", "--init-image", "127.0.0.1:5000/kiln:v1", "--format", "k8s"},
			errWords: []string{"--init-image 127.0.0.1:5000/kiln:v1 is not pinned", "--init-image 127.0.0.1:5000/kiln@sha256:..."}, out: "image: 127.0.0.1:5000/kiln:v1"},
		{name: "pinned init image is quiet", args: []string{"--volume", "w", "--image", "reg/a:1", "--init-image", pinned},
			noErr: "warning", out: "image: " + pinned},
		{name: "compose does not run the init image", args: []string{"--volume", "w", "--image", "reg/a:1", "--format", "compose"},
			noErr: "warning", out: "# compose.yaml"},
		{name: "docker into a host dir does not run it", args: []string{"--volume", "/srv/w", "--image", "reg/a:1", "--format", "docker"},
			noErr: "warning", out: "kiln weights pull"},
		{name: "docker into a volume runs it", args: []string{"--volume", "w", "--image", "reg/a:1", "--format", "docker"},
			errWords: []string{"not pinned by digest"}, out: "# docker"},
		{name: "k8s alias", args: []string{"--volume", "w", "--image", "reg/a:1", "--init-image", pinned, "--format", "k8s"},
			noErr: "warning", out: "initContainers"},
		{name: "kubernetes", args: []string{"--volume", "w", "--image", "reg/a:1", "--init-image", pinned, "--format", "kubernetes"},
			noErr: "warning", out: "initContainers"},
		{name: "unknown format", args: []string{"--volume", "w", "--format", "helm"}, code: cmdutil.ExitUsage,
			errWords: []string{"kubernetes (or k8s)"}},
		{name: "oci image refused", args: []string{"--volume", "w", "--image", "oci:" + dir + "/slim:app"}, code: cmdutil.ExitUsage,
			errWords: []string{"is a file on this machine", "push it to a registry", "--image REGISTRY/REPO:TAG"}, noErr: "warning"},
		{name: "oci image refused for k8s", args: []string{"--volume", "w", "--image", "oci:" + dir + "/slim", "--format", "k8s"}, code: cmdutil.ExitUsage,
			errWords: []string{"push it to a registry"}},
		{name: "docker archive refused", args: []string{"--volume", "w", "--image", "docker-archive:" + dir + "/app.tar", "--format", "compose"}, code: cmdutil.ExitUsage,
			errWords: []string{"docker load -i " + dir + "/app.tar", "--image NAME:TAG"}},
		// A docker-daemon: image is one docker runs: by its name, as docker
		// images lists it, without the transport.
		{name: "docker-daemon image named as docker names it", args: []string{"--volume", "w", "--image", "docker-daemon:acme/serve:1.2-slim", "--init-image", pinned, "--format", "docker"},
			noErr: "warning", out: "docker run --mount type=volume,src=w,dst=/app/models,volume-subpath=model,ro \\\n    acme/serve:1.2-slim\n"},
		{name: "docker-daemon official image", args: []string{"--volume", "w", "--image", "docker-daemon:docker.io/library/ubuntu", "--init-image", pinned},
			noErr: "warning", out: "image: ubuntu:latest\n"},
		{name: "docker-daemon image on a registry host", args: []string{"--volume", "w", "--image", "docker-daemon:127.0.0.1:5000/acme/serve:1", "--init-image", pinned, "--format", "compose"},
			noErr: "warning", out: "    image: 127.0.0.1:5000/acme/serve:1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, append(base, tc.args...)...)
			if code != tc.code {
				t.Fatalf("code %d, want %d\n%s\n%s", code, tc.code, out, errOut)
			}
			flat := testkit.Flat(errOut) // wrapped at 80
			for _, w := range tc.errWords {
				if !strings.Contains(flat, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if tc.noErr != "" && strings.Contains(errOut, tc.noErr) {
				t.Errorf("stderr has %q:\n%s", tc.noErr, errOut)
			}
			if !strings.Contains(out, tc.out) {
				t.Errorf("stdout lacks %q:\n%s", tc.out, out)
			}
		})
	}
	// --json: the warning is in warnings ([] when pinned); a refusal is one
	// JSON object with exit_code 2.
	for _, tc := range []struct {
		init string
		n    int
	}{{"", 1}, {pinned, 0}} {
		args := append(base, "--volume", "w", "--image", "reg/a:1", "--json")
		if tc.init != "" {
			args = append(args, "--init-image", tc.init)
		}
		code, out, _ := run(t, args...)
		var s struct {
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil || code != cmdutil.ExitOK || s.Warnings == nil || len(s.Warnings) != tc.n {
			t.Errorf("--json with init image %q: code %d, %d warnings, want %d: %v\n%s", tc.init, code, len(s.Warnings), tc.n, err, out)
		}
	}
	code, out, _ := run(t, append(base, "--volume", "w", "--image", "oci:"+dir+"/slim", "--json")...)
	var res struct {
		OK       bool   `json:"ok"`
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != cmdutil.ExitUsage || res.OK || res.ExitCode != cmdutil.ExitUsage || !strings.Contains(res.Error, "push it to a registry") {
		t.Errorf("--json with an oci: image: code %d %v\n%s", code, err, out)
	}
}

// A volume pulled by a kiln before DIR/model (files at the top level,
// beside the bookkeeping) does not verify, and verify says in words that
// kiln weights pull moves it; the pull does, by renames (nothing
// fetched), and says so; then it verifies. Every line fits 80 columns.
func TestWeightsOldLayoutVolume(t *testing.T) {
	_, wref := strippedApp(t)
	vol := filepath.Join(t.TempDir(), "vol")
	if code, out, errOut := run(t, "weights", "pull", wref, "--into", vol, "--progress", "none"); code != cmdutil.ExitOK ||
		!strings.Contains(strings.Join(strings.Fields(out), " "), "mount "+filepath.Join(vol, weights.ModelDir)+" at /app/models, read-only") {
		t.Fatalf("pull: code %d\n%s\n%s", code, out, errOut)
	}
	// The old layout, as an earlier kiln left it.
	model := filepath.Join(vol, weights.ModelDir)
	ents, _ := os.ReadDir(model)
	for _, e := range ents {
		if err := os.Rename(filepath.Join(model, e.Name()), filepath.Join(vol, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(model)
	os.Remove(filepath.Join(vol, weights.LayoutMarker))

	fits := func(what, out string) {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if !testkit.Fits(l, 80) {
				t.Errorf("%s: line wider than 80 columns: %q", what, l)
			}
		}
	}
	code, out, errOut := run(t, "weights", "verify", vol)
	flat := strings.Join(strings.Fields(out), " ")
	if code != cmdutil.ExitFailure || !strings.Contains(flat, weights.LayoutMarker+" missing: the model files lie at the volume's top level") ||
		!strings.Contains(flat, "kiln weights pull into this directory moves them into model/") || !strings.Contains(errOut, "1 problems") {
		t.Fatalf("verify of an old-layout volume: code %d\n%s\n%s", code, out, errOut)
	}
	fits("verify", out)
	t.Logf("kiln weights verify (old layout):\n%s%s", out, errOut)
	code, out, errOut = run(t, "weights", "pull", wref, "--into", vol, "--progress", "none")
	flat = strings.Join(strings.Fields(out), " ")
	if code != cmdutil.ExitOK || !strings.Contains(flat, "moved from kiln's old layout") || !strings.Contains(flat, "fetched 0 B") || !strings.Contains(flat, "2 already present") {
		t.Fatalf("pull over the old layout: code %d\n%s\n%s", code, out, errOut)
	}
	fits("pull", out)
	t.Logf("kiln weights pull (old layout):\n%s", out)
	if code, out, _ := run(t, "weights", "verify", vol); code != cmdutil.ExitOK {
		t.Errorf("verify after the move: code %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(model, "m-00002.safetensors")); err != nil {
		t.Errorf("after the move: %v", err)
	}
}
