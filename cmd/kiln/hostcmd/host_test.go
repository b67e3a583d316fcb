package hostcmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
)

var hostTestdata = filepath.Join("..", "..", "..", "testdata", "hostcheck")

// cudaLayout writes an OCI layout with a recorded nvidia/cuda env and the
// real nvcc-built library lib (testdata/hostcheck/fatbin).
func cudaLayout(t *testing.T, env, lib string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hostTestdata, "images", env+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Config struct{ Env []string } `json:"config"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	so, err := os.ReadFile(filepath.Join(hostTestdata, "fatbin", lib))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{Env: c.Config.Env},
		testimage.Layer(t, []testimage.Entry{testimage.File("usr/lib/"+lib, so), testimage.Sized("usr/local/cuda/compat/libcuda.so.580.65.06", 1024)}, "gzip")))
	return "oci:" + dir + ":app"
}

func TestHostCheckCommand(t *testing.T) {
	host := func(n string) string { return filepath.Join(hostTestdata, "hosts", n+".json") }
	img124 := cudaLayout(t, "cuda-12.4.1", "libk_sm80_sm90.so")
	img128 := cudaLayout(t, "cuda-12.8.1", "libk_sm80_sm90.so")
	sm80 := cudaLayout(t, "cuda-12.4.1", "libk_sm80.so")

	lock := filepath.Join(t.TempDir(), "kiln.lock")
	lb, err := (&recipes.Lock{LockVersion: recipes.LockVersion, Plan: &recipes.Plan{CUDA: "12.8.1", CUDAArchs: []string{"9.0"}}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(lock, lb, 0o644)
	// A recipe, resolved offline: unpinned torch takes the newest wheels.
	recipe := filepath.Join(t.TempDir(), "kiln.yaml")
	os.WriteFile(recipe, []byte("name: serve\nos: ubuntu24.04\npython: \"3.12\"\ntorch: {}\n"), 0o644)

	// Runtime configs outside --root, named by flag.
	cfgDir := t.TempDir()
	ctrCfg, dockCfg := filepath.Join(cfgDir, "containerd.toml"), filepath.Join(cfgDir, "daemon.json")
	os.WriteFile(ctrCfg, []byte("version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\n  discard_unpacked_layers = true\n"), 0o644)
	os.WriteFile(dockCfg, []byte(`{"max-concurrent-downloads": 2}`), 0o644)

	cases := []struct {
		args []string
		code int
		out  []string
	}{
		{[]string{"--root", t.TempDir(), "--containerd-config", ctrCfg, "--docker-config", dockCfg}, cmdutil.ExitFailure, []string{
			"WARN  Runtime pull settings", "containerd discard_unpacked_layers = true", "pulls locally (not through the transfer service)",
			"Docker daemon config " + dockCfg + ": max-concurrent-downloads = 2"}},
		{[]string{"--host-info", host("h100-535"), "--containerd-config", ctrCfg}, cmdutil.ExitUsage, nil},
		// Planning for a Kubernetes node from its description: Spegel cannot
		// serve what this containerd discards.
		{[]string{"--host-info", host("k8s-h100-containerd2"), "--image", img124}, cmdutil.ExitFailure, []string{
			"FAIL  Runtime pull settings", "Spegel cannot serve layers this node unpacked",
			`→ set discard_unpacked_layers = false in [plugins."io.containerd.cri.v1.images"]`, "pull the zstd variant (TAG-zstd)"}},
		{[]string{"--host-info", host("h100-535"), "--image", img124}, cmdutil.ExitOK, []string{"PASS  Image CUDA vs driver", "0 failed"}},
		{[]string{"--host-info", host("rtx4090-550"), "--image", img128}, cmdutil.ExitFailure, []string{"FAIL  NVIDIA_REQUIRE_CUDA", "→ upgrade the driver to ≥ 570.124.06", "NVIDIA_DISABLE_REQUIRE=1"}},
		{[]string{"--host-info", host("h100-535"), "--image", sm80}, cmdutil.ExitFailure, []string{"FAIL  GPU architectures in the image", "no kernel image for sm_90"}},
		// A lock: the recipe's CUDA and targets, nothing pulled.
		{[]string{"--host-info", host("rtx4090-550"), "--image", lock}, cmdutil.ExitFailure, []string{"FAIL  NVIDIA_REQUIRE_CUDA", "not a target of the recipe"}},
		{[]string{"--host-info", host("rtx4090-550"), "--image", recipe}, cmdutil.ExitFailure, []string{"FAIL  Image CUDA vs driver", "wheels carry CUDA"}},
		{[]string{"--host-info", host("h100-535"), "--image", img124, "--no-kernels"}, cmdutil.ExitOK, []string{"skip  GPU architectures in the image"}},
		// Usage errors.
		{[]string{"--host-info", host("h100-535"), "--capture"}, cmdutil.ExitUsage, nil},
		{[]string{"--host-info", host("h100-535"), "--volume", "/tmp"}, cmdutil.ExitUsage, nil},
		{[]string{"--host-info", filepath.Join(hostTestdata, "images", "cuda-12.4.1.json")}, cmdutil.ExitUsage, nil},
		{[]string{"--host-info", host("h100-535"), "--weights-size", "lots"}, cmdutil.ExitUsage, nil},
		{[]string{"--root", "/nonexistent-kiln-root"}, cmdutil.ExitUsage, nil},
	}
	for _, c := range cases {
		code, out, errOut := run(t, append([]string{"host", "check", "--progress", "none"}, c.args...)...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.code, out, errOut)
			continue
		}
		// Prose is wrapped at the terminal's width: compare words.
		words := strings.Join(strings.Fields(out), " ")
		for _, w := range c.out {
			if !strings.Contains(words, strings.Join(strings.Fields(w), " ")) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}

	// --json: the documented schema's top-level keys and per-item fields.
	code, out, _ := run(t, "host", "check", "--progress", "none", "--json", "--host-info", host("rtx4090-550"), "--image", img128)
	if code != cmdutil.ExitFailure {
		t.Fatalf("json: exit %d", code)
	}
	var rep struct {
		Schema string          `json:"schema"`
		OK     *bool           `json:"ok"`
		Counts map[string]int  `json:"counts"`
		Host   json.RawMessage `json:"host"`
		Image  struct {
			CUDA    string `json:"cuda"`
			Kernels struct {
				SM []string `json:"sm"`
			} `json:"kernels"`
		} `json:"image"`
		Items []struct {
			ID, Status, Summary string
			Evidence, Fix       []string
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, it := range rep.Items {
		ids = append(ids, it.ID+"="+it.Status)
	}
	if rep.Schema != "kiln.host-check/v1" || rep.OK == nil || *rep.OK || rep.Counts["fail"] != 1 || rep.Image.CUDA != "12.8.1" || strings.Join(rep.Image.Kernels.SM, ",") != "sm_80,sm_90" ||
		strings.Join(ids, " ") != "driver=pass cuda-compat=warn require-cuda=fail kernels=pass container-toolkit=pass engine=pass registry-auth=skip volumes=pass compose=pass runtime-settings=skip" {
		t.Errorf("json report: %+v\n%s", rep, ids)
	}
}

// Issue 27 (minor): an image that cannot be read (a refused password, a
// missing tag) aborted host check with no report; the host is checked
// all the same and the report says why the image was not.
func TestHostCheckReportsAnUnreadableImage(t *testing.T) {
	host := filepath.Join(hostTestdata, "hosts", "h100-535.json")
	reg := testimage.Registry(t)
	ref := reg + "/acme/app:nope"
	code, out, errOut := run(t, "host", "check", "--progress", "none", "--json", "--host-info", host, "--image", ref)
	if code != cmdutil.ExitFailure {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Items []struct{ ID, Status, Summary string } `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Items) < 5 || rep.Items[0].ID != "image" || rep.Items[0].Status != "fail" || !strings.Contains(rep.Items[0].Summary, "nope") {
		t.Fatalf("items: %+v", rep.Items)
	}
	var driver bool
	for _, it := range rep.Items {
		driver = driver || (it.ID == "driver" && it.Status == "pass")
	}
	if !driver {
		t.Errorf("the host's own items are missing: %+v", rep.Items)
	}
}
