//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
)

// TestCRIPodMountsWeightsTwin runs what a kubelet runs for a pod with an
// image volume, through the CRI of a real containerd 2.x (its CRI plugin,
// driven by the real crictl), with everything the pod needs warmed by
// kiln beforehand:
//
//   - the app: a small image holding the static kiln binary and two
//     safetensors files; `kiln weights strip --image-twin` moves the
//     weights out into an artifact and its image-shaped twin, and `kiln
//     slim` rewrites the stripped image (this is the image the container
//     runs; small, so the test takes seconds, not the fixture app's
//     minutes, and it needs no fixtures);
//   - `kiln warm SLIM TWIN PAUSE --target containerd:SOCK --namespace
//     k8s.io --unpack` puts the three images into the kubelet's namespace;
//     `kiln warm status --node` (what --emit k8s --status pods run) says
//     cold before and warm after, as `kiln warm status --from-logs` reads
//     its lines with kubectl's --prefix;
//   - then the registry is shut down: crictl's image list (the CRI's own
//     view, not containerd's) must already show all three, and the pod
//     sandbox (host network: no CNI) and the container (the twin mounted
//     read-only at the volume's mount, CRI Mount.image) start with no pull
//     possible;
//   - the container runs `kiln weights verify MOUNT --json`: it reads every
//     weight file in the image volume and checks its size and sha256
//     against the volume manifest the twin carries; the test checks the
//     report says ok for the files and set digest strip published.
//
// It skips without root, containerd 2.x (scripts/containerd2.sh), crictl
// (scripts/crictl.sh) or runc, and fails instead with
// KILN_REQUIRE_CONTAINERD=1.
func TestCRIPodMountsWeightsTwin(t *testing.T) {
	t.Setenv("KILN_CONTAINERD_BIN", testdaemon.Containerd2Bin(t))
	crictl := testdaemon.CrictlBin(t)
	if _, err := exec.LookPath("runc"); err != nil {
		testkit.Need(t, "no runc", "KILN_REQUIRE_CONTAINERD")
	}
	dir := t.TempDir()
	kiln := testdaemon.KilnBinary(t)
	srv := testimage.RegistryServer(t)
	reg := strings.TrimPrefix(srv.URL, "http://")

	// The app before kiln: kiln itself (a static binary, so the container
	// needs no libc) and the weights, in one layer.
	bin, err := os.ReadFile(kiln)
	if err != nil {
		t.Fatal(err)
	}
	app := testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/local/bin"}},
		testimage.Layer(t, []testimage.Entry{
			{Name: "usr/local/bin/kiln", Body: bin, Mode: 0o755},
			testimage.Safetensors("models/tiny/model-00001.safetensors", 6<<20),
			testimage.Safetensors("models/tiny/model-00002.safetensors", 70000),
		}, "gzip"))
	src := reg + "/kiln-cri-it/app:src"
	testimage.Push(t, src, app)
	// The sandbox image: the pod's long-running process is this host's
	// sleep (the kubelet's pause image would need a pull).
	pause := reg + "/kiln-cri-it/pause:1"
	testimage.Push(t, pause, testimage.Image(t, testimage.Config{Entrypoint: []string{"/bin/sleep", "infinity"}},
		testimage.HostLayer(t, "/bin/sleep", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")))

	kilnJSON := func(v any, args ...string) {
		t.Helper()
		cmd := exec.Command(kiln, append(args, "--json", "--progress", "none")...)
		cmd.Env = append(os.Environ(), "TMPDIR="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kiln %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		if err := json.Unmarshal(out, v); err != nil {
			t.Fatalf("kiln %s: %v\n%s", args[0], err, out)
		}
	}
	var strip struct {
		Mount     string `json:"mount"`
		SetDigest string `json:"set_digest"`
		Files     int    `json:"files"`
		Bytes     int64  `json:"bytes"`
		Twin      string `json:"twin"`
	}
	stripped, twin := reg+"/kiln-cri-it/app:stripped", reg+"/kiln-cri-it/weights:twin"
	kilnJSON(&strip, "weights", "strip", src, "--to", stripped, "--weights-to", reg+"/kiln-cri-it/weights:v1", "--image-twin", twin)
	if strip.Files != 2 || strip.Mount != "/models/tiny" || !strings.HasPrefix(strip.Twin, reg+"/kiln-cri-it/weights@sha256:") {
		t.Fatalf("strip: %+v", strip)
	}
	var slimRep struct {
		Digest string `json:"digest"`
	}
	slimRef := reg + "/kiln-cri-it/app:slim"
	kilnJSON(&slimRep, "slim", stripped, "--to", slimRef)

	// The sandbox image is ours (no pull of registry.k8s.io/pause); no
	// AppArmor profile to load; and oom_score_adj no lower than
	// containerd's own: the sandbox's -998 is refused where the test runs
	// without CAP_SYS_RESOURCE (runc: "failed to update
	// /proc/self/oom_score_adj: Permission denied"), as in a nested
	// container; restrict_oom_score_adj is the setting for exactly that.
	cd := testdaemon.StartContainerd(t, testdaemon.EnableCRI(), testdaemon.ExtraConfig(fmt.Sprintf(`
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = %q
`, pause, filepath.Join(dir, "no-cni"))))
	if cd.Major < 2 {
		t.Fatalf("%s is containerd %d: CRI image volumes need 2.1+", cd.Bin, cd.Major)
	}
	var warm struct {
		Ready    bool `json:"ready"`
		Unpacked bool `json:"unpacked"`
		Images   []struct {
			Ref string `json:"ref"`
		} `json:"images"`
	}
	refs := []string{slimRef, twin, pause}
	// What a --emit k8s --status pod prints on this node, before and
	// after the warm, gathered as kubectl logs --prefix shows them.
	status := func() string {
		t.Helper()
		out, err := exec.Command(kiln, append(append([]string{"warm", "status", "--node", "node-1"}, refs...),
			"--target", "containerd:"+cd.Socket, "--namespace", "k8s.io")...).Output()
		if err != nil {
			t.Fatalf("kiln warm status --node: %v\n%s", err, out)
		}
		return "[pod/kiln-warm-status-abcde/status] " + string(out)
	}
	before := status()
	kilnJSON(&warm, append([]string{"warm"}, append(refs, "--target", "containerd:"+cd.Socket, "--namespace", "k8s.io", "--unpack")...)...)
	if !warm.Ready || !warm.Unpacked || len(warm.Images) != 3 {
		t.Fatalf("warm: %+v", warm)
	}
	logs := filepath.Join(dir, "status.log")
	if err := os.WriteFile(logs, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kiln, "warm", "status", "--from-logs", logs).CombinedOutput(); exitCode(err) != 5 || !regexp.MustCompile(`node-1\s+pull\s+cold\s+[1-9]`).Match(out) {
		t.Fatalf("status before the warm: %v\n%s", err, out)
	}
	if err := os.WriteFile(logs, []byte(before+status()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kiln, "warm", "status", "--from-logs", logs).CombinedOutput(); err != nil || !regexp.MustCompile(`node-1\s+pull\s+warm\s+0 B`).Match(out) {
		t.Fatalf("status after the warm: %v\n%s", err, out)
	}

	// No registry from here on: whatever the pod needs must be on the node.
	srv.Close()
	out, err := cd.Crictl(t, crictl, "images", "-o", "json")
	if err != nil {
		t.Fatalf("crictl images: %v\n%s", err, out)
	}
	var imgs struct {
		Images []struct {
			RepoTags []string `json:"repoTags"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &imgs); err != nil {
		t.Fatalf("crictl images: %v\n%s", err, out)
	}
	var tags []string
	for _, im := range imgs.Images {
		tags = append(tags, im.RepoTags...)
	}
	for _, r := range refs {
		if !slices.Contains(tags, r) {
			t.Fatalf("the CRI does not list %s after kiln warm: %v", r, tags)
		}
	}

	podCfg := writeJSON(t, filepath.Join(dir, "pod.json"), map[string]any{
		"metadata":      map[string]any{"name": "kiln-cri-it", "namespace": "default", "uid": "kiln-cri-it-1", "attempt": 0},
		"log_directory": filepath.Join(dir, "pod-logs"),
		// NamespaceMode NODE (2): the host's network, so no CNI is needed.
		"linux": map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}}},
	})
	ctrCfg := writeJSON(t, filepath.Join(dir, "container.json"), map[string]any{
		"metadata": map[string]any{"name": "verify"},
		"image":    map[string]any{"image": slimRef},
		"command":  []string{"/usr/local/bin/kiln", "weights", "verify", strip.Mount, "--json"},
		"log_path": "verify.log",
		"mounts":   []any{map[string]any{"container_path": strip.Mount, "readonly": true, "image": map[string]any{"image": twin}}},
	})
	pod := crictlID(t, cd, crictl, "runp", podCfg)
	t.Cleanup(func() {
		cd.Crictl(t, crictl, "stopp", pod)
		cd.Crictl(t, crictl, "rmp", "-f", pod)
	})
	ctr := crictlID(t, cd, crictl, "create", "--no-pull", pod, ctrCfg, podCfg)
	crictlID(t, cd, crictl, "start", ctr)
	state, code := "", -1
	for deadline := time.Now().Add(2 * time.Minute); state != "CONTAINER_EXITED"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %s after 2 minutes", ctr, state)
		}
		out, err := cd.Crictl(t, crictl, "inspect", "-o", "json", ctr)
		if err != nil {
			t.Fatalf("crictl inspect: %v\n%s", err, out)
		}
		var st struct {
			Status struct {
				State    string `json:"state"`
				ExitCode int    `json:"exitCode"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("crictl inspect: %v\n%s", err, out)
		}
		state, code = st.Status.State, st.Status.ExitCode
	}
	out, err = cd.Crictl(t, crictl, "logs", ctr)
	if err != nil {
		t.Fatalf("crictl logs: %v\n%s", err, out)
	}
	var rep struct {
		Dir       string `json:"dir"`
		SetDigest string `json:"set_digest"`
		Files     int    `json:"files"`
		Bytes     int64  `json:"bytes"`
		OK        bool   `json:"ok"`
		Problems  []any  `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d; the container's output is no verify report: %v\n%s", code, err, out)
	}
	if code != 0 || !rep.OK || rep.Files != strip.Files || rep.Bytes != strip.Bytes || rep.SetDigest != strip.SetDigest || rep.Dir != strip.Mount {
		t.Fatalf("in the pod, kiln weights verify exited %d: %+v; strip published %+v", code, rep, strip)
	}
	t.Logf("pod %s: %d weight files (%d bytes) in the image volume verify, set digest %s", pod, rep.Files, rep.Bytes, rep.SetDigest)
}

// exitCode is a finished command's exit status (0 when err is nil).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// crictlID runs a crictl command that prints an ID (runp, create, start)
// and returns it.
func crictlID(t *testing.T, cd *testdaemon.Containerd, crictl string, args ...string) string {
	t.Helper()
	out, err := cd.Crictl(t, crictl, args...)
	if err != nil {
		t.Fatalf("crictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

func writeJSON(t *testing.T, path string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
