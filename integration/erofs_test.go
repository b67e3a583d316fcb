//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
)

// The CUDA 12.4 runtime image from the shared registry, into containerd
// 2.x's EROFS snapshotter (scripts/containerd2.sh erofs-config) by the
// real kiln binary, two ways: its native EROFS form (kiln convert
// --format erofs: each layer an EROFS image, mounted as it is) and the
// gzip original converted at warm (--snapshotter erofs). `ctr run
// --snapshotter erofs` of each finds libcudart and libcublas through
// ldconfig and reads them, with the same sha256 both ways. Then a
// layer's EROFS image is corrupted in place: the next warm exits 1, NOT
// READY, naming it.
func TestWarmErofsCUDARuntime(t *testing.T) {
	reg := registry()
	needRoot(t, "runc")
	if err := erofs.Check(context.Background()); err != nil {
		needFixtures(t, err.Error())
	}
	src := needCUDARuntime(t, reg)
	t.Setenv("KILN_CONTAINERD_BIN", testdaemon.Containerd2Bin(t, testdaemon.RequireEnv("KILN_REQUIRE_FIXTURES")))
	testdaemon.PruneAfter(t, false)
	dir := t.TempDir()
	kiln := testdaemon.KilnBinary(t)
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(kiln, append(args, "--progress", "none")...)
		cmd.Env = append(os.Environ(), "TMPDIR="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%v\n%s", err, stderr.String())
		}
		return out, err
	}

	// The native EROFS form (lz4 inside: quick to make on a loaded machine).
	native := reg + "/kiln-erofs-it/cuda:12.4.1-runtime-erofs"
	if out, err := run("convert", src, "--to", native, "--format", "erofs", "--erofs-compression", "lz4"); err != nil {
		t.Fatalf("kiln convert --format erofs: %v\n%s", err, out)
	}
	script, err := testdaemon.RepoFile("scripts/containerd2.sh")
	if err != nil {
		t.Fatal(err)
	}
	conf, err := exec.Command("bash", script, "erofs-config").Output()
	if err != nil {
		t.Fatal(err)
	}
	cd := testdaemon.StartContainerd(t, testdaemon.RequireEnv("KILN_REQUIRE_FIXTURES"), testdaemon.ExtraConfig("\n"+string(conf)))

	type report struct {
		Ready       bool   `json:"ready"`
		Unpacked    bool   `json:"unpacked"`
		Snapshotter string `json:"snapshotter"`
		Error       string `json:"error"`
	}
	warm := func(ref string, extra ...string) (report, error) {
		out, err := run(append([]string{"warm", ref, "--target", "containerd:" + cd.Socket, "--unpack", "--platform", "linux/amd64", "--json"}, extra...)...)
		var rep report
		if jerr := json.Unmarshal(out, &rep); jerr != nil {
			t.Fatalf("kiln warm %s: not one JSON object (%v): %v\n%s", ref, jerr, err, out)
		}
		return rep, err
	}
	// The libraries where the loader finds them, hashed (stdin closed:
	// ctr run attaches one).
	probe := `set -e; for l in libcudart.so.12 libcublas.so.12; do p=$(ldconfig -p | grep -m1 "$l (" | sed 's/.* => //'); test -n "$p"; sha256sum "$(readlink -f "$p")" | cut -c1-64; done </dev/null`
	sums := map[string]string{}
	for _, tc := range []struct {
		name, ref string
		extra     []string
	}{
		{"native", native, nil},
		{"converted", src, []string{"--snapshotter", "erofs"}},
	} {
		rep, err := warm(tc.ref, tc.extra...)
		if err != nil || !rep.Ready || !rep.Unpacked || rep.Snapshotter != "erofs" {
			t.Fatalf("%s: warm %+v: %v", tc.name, rep, err)
		}
		out, err := cd.RunOutput(t, "erofs", tc.ref, "kiln-erofs-"+tc.name, nil, "sh", "-c", probe)
		lines := strings.Fields(out)
		if err != nil || len(lines) != 2 || len(lines[0]) != 64 || len(lines[1]) != 64 {
			t.Fatalf("%s: ctr run: %v\n%s", tc.name, err, out)
		}
		sums[tc.name] = strings.Join(lines, " ")
		t.Logf("%s: %s", tc.name, out)
	}
	if sums["native"] != sums["converted"] {
		t.Fatalf("the CUDA libraries differ: native %s, converted %s", sums["native"], sums["converted"])
	}

	// The readiness gate: the largest layer image corrupted in place.
	layers, _ := filepath.Glob(filepath.Join(cd.Root, "io.containerd.snapshotter.v1.erofs", "snapshots", "*", "layer.erofs"))
	var big string
	var size int64
	for _, l := range layers {
		if fi, err := os.Stat(l); err == nil && fi.Size() > size {
			big, size = l, fi.Size()
		}
	}
	if big == "" {
		t.Fatal("no layer.erofs in the snapshotter")
	}
	f, err := os.OpenFile(big, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("corrupt"), size/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bad := 0
	for _, ref := range []string{native, src} {
		extra := []string{"--snapshotter", "erofs"}
		rep, err := warm(ref, extra...)
		if err != nil && !rep.Ready && strings.Contains(rep.Error, "corrupted") {
			bad++
		} else if err != nil || !rep.Ready {
			t.Fatalf("warm %s after corrupting %s: %+v: %v", ref, big, rep, err)
		}
	}
	if bad == 0 {
		t.Fatalf("no warm refused the corrupted %s", big)
	}
}

// The CRI path: a containerd 2.x whose CRI runs pods on the EROFS
// snapshotter (snapshotter = "erofs"), warmed by kiln for the kubelet
// (namespace k8s.io) with no format or snapshotter flag: kiln asks the
// CRI, takes the app's native EROFS form (TAG names TAG-erofs) and
// converts the sandbox image (gzip) at warm. With the registry gone, crictl starts
// the pod and the container, which reads its file from the EROFS layers.
func TestCRIErofsPod(t *testing.T) {
	t.Setenv("KILN_CONTAINERD_BIN", testdaemon.Containerd2Bin(t))
	crictl := testdaemon.CrictlBin(t)
	if _, err := exec.LookPath("runc"); err != nil {
		testkit.Need(t, "no runc", "KILN_REQUIRE_CONTAINERD")
	}
	testkit.RequireErofs(t, "KILN_REQUIRE_CONTAINERD")
	dir := t.TempDir()
	kiln := testdaemon.KilnBinary(t)
	srv := testimage.RegistryServer(t)
	reg := strings.TrimPrefix(srv.URL, "http://")

	// The app: /bin/cat and its libraries, and a file, as native EROFS
	// layers (what kiln convert --format erofs publishes).
	native := func(l v1.Layer) v1.Layer {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		p := filepath.Join(dir, "layer.erofs")
		if err := erofs.ConvertFile(context.Background(), rc, p); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return testimage.RawLayer(b, types.MediaType(layers.ErofsMediaType))
	}
	// TAG names TAG-erofs (kiln slim --format erofs publishes them so).
	cat := testimage.HostLayer(t, "/bin/cat", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
	hello := testimage.Layer(t, []testimage.Entry{testimage.File("etc/hello", []byte("hello from an EROFS pod"))}, "gzip")
	app := reg + "/kiln-cri-erofs/app:1"
	erofsForm := testimage.Image(t, testimage.Config{}, native(cat), native(hello))
	dg, err := erofsForm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	testimage.Push(t, app+layers.ErofsTagSuffix, erofsForm)
	testimage.Push(t, app, layers.NameErofsForm(testimage.Image(t, testimage.Config{}, cat, hello), dg))
	pause := reg + "/kiln-cri-erofs/pause:1"
	testimage.Push(t, pause, testimage.Image(t, testimage.Config{Entrypoint: []string{"/bin/sleep", "infinity"}},
		testimage.HostLayer(t, "/bin/sleep", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")))

	script, err := testdaemon.RepoFile("scripts/containerd2.sh")
	if err != nil {
		t.Fatal(err)
	}
	conf, err := exec.Command("bash", script, "erofs-config").Output()
	if err != nil {
		t.Fatal(err)
	}
	// containerd 2.x takes a version 2 file's CRI snapshotter only from a
	// table that also has runtimes (hostcheck's runtime item warns).
	cd := testdaemon.StartContainerd(t, testdaemon.EnableCRI(), testdaemon.ExtraConfig("\n"+string(conf)+fmt.Sprintf(`
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "erofs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`, pause, filepath.Join(dir, "no-cni"))))

	// No format or snapshotter flag (what kiln warm --emit k8s pods run):
	// kiln asks the CRI, which starts pods on erofs, so it takes TAG-erofs.
	out, err := exec.Command(kiln, "warm", app, pause, "--target", "containerd:"+cd.Socket, "--namespace", "k8s.io",
		"--unpack", "--json", "--progress", "none").Output()
	var rep struct {
		Ready       bool   `json:"ready"`
		Snapshotter string `json:"snapshotter"`
		Images      []struct {
			Form string `json:"form"`
		} `json:"images"`
	}
	if jerr := json.Unmarshal(out, &rep); err != nil || jerr != nil || !rep.Ready || rep.Snapshotter != "erofs" || len(rep.Images) != 2 || rep.Images[0].Form != "erofs" {
		t.Fatalf("kiln warm: %v %v\n%s", err, jerr, out)
	}

	srv.Close() // whatever the pod needs must be on the node
	podCfg := writeJSON(t, filepath.Join(dir, "pod.json"), map[string]any{
		"metadata":      map[string]any{"name": "kiln-cri-erofs", "namespace": "default", "uid": "kiln-cri-erofs-1", "attempt": 0},
		"log_directory": filepath.Join(dir, "pod-logs"),
		"linux":         map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}}},
	})
	ctrCfg := writeJSON(t, filepath.Join(dir, "container.json"), map[string]any{
		"metadata": map[string]any{"name": "cat"},
		"image":    map[string]any{"image": app},
		"command":  []string{"/bin/cat", "/etc/hello"},
		"log_path": "cat.log",
	})
	pod := crictlID(t, cd, crictl, "runp", podCfg)
	t.Cleanup(func() {
		cd.Crictl(t, crictl, "stopp", pod)
		cd.Crictl(t, crictl, "rmp", "-f", pod)
	})
	ctr := crictlID(t, cd, crictl, "create", "--no-pull", pod, ctrCfg, podCfg)
	crictlID(t, cd, crictl, "start", ctr)
	state := ""
	for deadline := time.Now().Add(2 * time.Minute); state != "CONTAINER_EXITED"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %s after 2 minutes", ctr, state)
		}
		out, err := cd.Crictl(t, crictl, "inspect", "-o", "go-template", "--template", "{{.status.state}}", ctr)
		if err != nil {
			t.Fatalf("crictl inspect: %v\n%s", err, out)
		}
		state = strings.TrimSpace(out)
	}
	logs, err := cd.Crictl(t, crictl, "logs", ctr)
	if err != nil || strings.TrimSpace(logs) != "hello from an EROFS pod" {
		t.Fatalf("crictl logs: %v\n%q", err, logs)
	}
	// The pod's rootfs came from the EROFS snapshotter.
	snaps, _ := cd.Ctr(t, "-n", "k8s.io", "snapshots", "--snapshotter", "erofs", "ls")
	if !strings.Contains(snaps, ctr) {
		t.Fatalf("the container's snapshot is not in the erofs snapshotter:\n%s", snaps)
	}
}
