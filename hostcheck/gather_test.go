package hostcheck_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/hostcheck"
)

// TestGatherSysroot reads fake sysroots (proc files, engine configs, CDI
// specs under testdata/hostcheck/sysroot) with stand-in nvidia-smi programs
// on PATH that print recorded output.
func TestGatherSysroot(t *testing.T) {
	t.Setenv("HOME", "/root") // ~/.docker under the sysroot
	abs := func(p string) string {
		a, err := filepath.Abs(filepath.Join(testdata, p))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cases := []struct {
		name, root, path string
		driver, cuda     string
		open             bool
		gpus             string // name cc brand dc; ...
		toolkit          bool
		note             string
	}{
		{name: "H100 with nvidia-smi", root: "sysroot/h100", path: "bin/h100-535", driver: "535.104.05", cuda: "12.2",
			gpus: "NVIDIA H100 80GB HBM3 9.0 nvidia true; NVIDIA H100 80GB HBM3 9.0 nvidia true", toolkit: true},
		// R470's nvidia-smi has no compute_cap: kiln's GPU table fills it.
		{name: "GeForce on R470", root: "sysroot/geforce470", path: "bin/geforce-470", driver: "470.223.02", cuda: "11.4",
			gpus: "NVIDIA GeForce RTX 3090 8.6 geforcertx false"},
		// No nvidia-smi: the kernel module's /proc files.
		{name: "open module, no nvidia-smi", root: "sysroot/l4-open", path: "bin/empty", driver: "550.54.15", cuda: "12.4", open: true,
			gpus: "NVIDIA L4 8.9 nvidia true", note: "nvidia-smi not found on PATH"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PATH", abs(c.path))
			h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: abs(c.root)})
			if err != nil {
				t.Fatal(err)
			}
			if h.Driver == nil || h.Driver.Version != c.driver || h.Driver.CUDAVersion != c.cuda || h.Driver.OpenKernelModule != c.open {
				t.Fatalf("driver = %+v", h.Driver)
			}
			var gs []string
			for _, g := range h.GPUs {
				gs = append(gs, strings.Join([]string{g.Name, g.ComputeCapability, g.Brand, map[bool]string{true: "true", false: "false"}[g.DataCenter]}, " "))
			}
			if strings.Join(gs, "; ") != c.gpus {
				t.Errorf("gpus = %q, want %q", strings.Join(gs, "; "), c.gpus)
			}
			if len(h.Engines) != 0 {
				t.Errorf("engines in a sysroot without sockets: %+v", h.Engines)
			}
			if c.note != "" && !strings.Contains(strings.Join(h.Notes, "\n"), c.note) {
				t.Errorf("notes = %q", h.Notes)
			}
			tk := h.Toolkit
			if c.toolkit {
				if len(tk.Binaries) != 4 || strings.Join(tk.DockerRuntimes, ",") != "nvidia" || strings.Join(tk.ContainerdRuntimes, ",") != "nvidia,runc" ||
					len(tk.CDISpecs) != 1 || tk.CDISpecs[0].Kind != "nvidia.com/gpu" || strings.Join(tk.CDISpecs[0].Devices, ",") != "0,1,all" || tk.ConfigFile == "" {
					t.Errorf("toolkit = %+v", tk)
				}
				if strings.Join(h.Registry.Registries, ",") != "nvcr.io" {
					t.Errorf("registries = %v (an empty auths entry is not a credential)", h.Registry.Registries)
				}
			} else if len(tk.Binaries)+len(tk.DockerRuntimes)+len(tk.CDISpecs) != 0 {
				t.Errorf("toolkit = %+v", tk)
			}
			// The capture round-trips and never carries a credential.
			b, err := h.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "JG9hdXRo") || strings.Contains(string(b), "not-a-real-key") {
				t.Fatal("a credential leaked into the capture")
			}
			back, err := hostcheck.ParseHost("capture.json", b)
			if err != nil {
				t.Fatal(err)
			}
			if len(back.GPUs) != len(h.GPUs) || back.Driver.Version != h.Driver.Version || back.GPUs[0].Brand != h.GPUs[0].Brand {
				t.Errorf("round trip: %+v", back)
			}
		})
	}

	// A gathered host gets the same verdicts as its JSON description.
	t.Setenv("PATH", abs("bin/h100-535"))
	live, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: abs("sysroot/h100")})
	if err != nil {
		t.Fatal(err)
	}
	im := scannedImage(t, "cuda-12.4.1", "libk_sm80.so")
	got := hostcheck.Check(live, im, hostcheck.Options{})
	want := hostcheck.Check(loadHost(t, "h100-535"), im, hostcheck.Options{})
	for _, id := range []string{hostcheck.IDDriver, hostcheck.IDCUDACompat, hostcheck.IDRequireCUDA, hostcheck.IDKernels, hostcheck.IDToolkit} {
		if g, w := got.Item(id), want.Item(id); g.Status != w.Status || g.Summary != w.Summary {
			t.Errorf("%s: live %s %q, described %s %q", id, g.Status, g.Summary, w.Status, w.Summary)
		}
	}
	// No engine socket in the sysroot: the engine item fails with the fix.
	if e := got.Item(hostcheck.IDEngine); e.Status != hostcheck.Fail || !strings.Contains(e.Summary, "no Docker or containerd socket") {
		t.Errorf("engine = %+v", e)
	}
}

func TestParseHostErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"schema_version": 2}`, "schema_version 2"},
		{`{"schema_version": 1, "gpus": [{}]}`, "gpus[0]: needs name or compute_capability"},
		{`{"schema_version": 1, "driver": {}}`, "driver.version: required"},
		{`{"schema_version": 1, "driver": {"version": "abc"}}`, `driver.version "abc"`},
		{`{"schema_version": 1, "gpus": [{"name": "Mystery GPU"}]}`, "compute capability unknown"},
		{`[1,2]`, "not a host description"},
	} {
		_, err := hostcheck.ParseHost("h.json", []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "h.json: ") {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
}

func TestProbeVolume(t *testing.T) {
	dir := t.TempDir()
	v := hostcheck.ProbeVolume(dir)
	if !v.Exists || !v.Writable || v.FSType == "" || v.FreeBytes <= 0 || v.TotalBytes < v.FreeBytes {
		t.Errorf("volume = %+v", v)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("probe left %v behind", left)
	}
	if v := hostcheck.ProbeVolume(filepath.Join(dir, "missing")); v.Exists || v.Error == "" {
		t.Errorf("missing = %+v", v)
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	if os.Geteuid() != 0 { // root writes anywhere
		if v := hostcheck.ProbeVolume(ro); v.Writable {
			t.Errorf("read-only dir writable: %+v", v)
		}
	}
	h := &hostcheck.Host{SchemaVersion: 1, Volumes: []hostcheck.Volume{hostcheck.ProbeVolume(dir), hostcheck.ProbeVolume(filepath.Join(dir, "missing"))}}
	r := hostcheck.Check(h, nil, hostcheck.Options{WeightsBytes: 1 << 60})
	it := r.Item(hostcheck.IDVolumes)
	if it.Status != hostcheck.Fail || !strings.Contains(it.Summary, "does not exist") || !strings.Contains(it.Summary, "the weights need 1.0 EiB") {
		t.Errorf("volumes = %+v", it)
	}
}
