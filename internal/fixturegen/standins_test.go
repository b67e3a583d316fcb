package main

import (
	"archive/tar"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The stand-ins of NVIDIA's images carry what kiln's builds read in the
// real ones: the name, NVIDIA's env and label for the version, the
// entrypoint on runtime and devel only, the /usr/local/cuda layout and
// Ubuntu 24.04's user 1000, over the fixtures' layers.
func TestStandInBases(t *testing.T) {
	epoch := time.Unix(1747699200, 0)
	mk := func(files ...tarFile) v1.Layer {
		l, err := tarLayer(files, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	layers := map[string]v1.Layer{
		"base":    mk(tarFile{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/bash\n")}, tarFile{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\n")}),
		"cudart":  mk(tarFile{name: "usr/lib/x86_64-linux-gnu/libcudart.so.12", mode: 0o644, data: []byte("x")}),
		"runtime": mk(tarFile{name: "usr/lib/x86_64-linux-gnu/libcublas.so.12", mode: 0o644, data: []byte("x")}),
		"devel":   mk(tarFile{name: "usr/bin/nvcc", mode: 0o755, data: []byte("x")}),
	}
	imgs, err := buildStandIns(layers, map[string]string{"base": "ADD", "cudart": "RUN", "runtime": "RUN", "devel": "RUN"}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"nvidia/cuda:12.8.1-base-ubuntu24.04", "nvidia/cuda:12.8.1-devel-ubuntu24.04", "nvidia/cuda:13.0.3-runtime-ubuntu24.04", "nvidia/cuda:12.4.1-devel-ubuntu22.04", "nvidia/cuda:11.8.0-runtime-debian12"} {
		if imgs[ref] == nil {
			t.Fatalf("no stand-in %s (have %d)", ref, len(imgs))
		}
	}
	cfg := func(ref string) v1.Config {
		cf, err := imgs[ref].ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		return cf.Config
	}
	env := func(c v1.Config, k string) string {
		for _, e := range c.Env {
			if v, ok := strings.CutPrefix(e, k+"="); ok {
				return v
			}
		}
		return ""
	}
	base, devel := cfg("nvidia/cuda:12.8.1-base-ubuntu24.04"), cfg("nvidia/cuda:12.8.1-devel-ubuntu24.04")
	if env(base, "CUDA_VERSION") != "12.8.1" || !strings.HasPrefix(env(base, "NVIDIA_REQUIRE_CUDA"), "cuda>=12.8 brand=") || env(base, "LD_LIBRARY_PATH") != "/usr/local/cuda/lib64" {
		t.Errorf("12.8.1 base env: %v", base.Env)
	}
	if base.Labels["maintainer"] != "NVIDIA CORPORATION <cudatools@nvidia.com>" || len(base.Entrypoint) != 0 {
		t.Errorf("12.8.1 base: labels %v, entrypoint %v", base.Labels, base.Entrypoint)
	}
	if len(devel.Entrypoint) != 1 || devel.Entrypoint[0] != "/opt/nvidia/nvidia_entrypoint.sh" || env(devel, "LIBRARY_PATH") != "/usr/local/cuda/lib64/stubs" {
		t.Errorf("12.8.1 devel: entrypoint %v, env %v", devel.Entrypoint, devel.Env)
	}
	if env(cfg("nvidia/cuda:12.4.1-devel-ubuntu22.04"), "CUDA_VERSION") != "12.4.1" {
		t.Error("12.4.1 devel: CUDA_VERSION")
	}
	// The files: the layout and the user over the base's, nvcc in devel.
	files := map[string]*tar.Header{}
	data := map[string]string{}
	ls, err := imgs["nvidia/cuda:12.8.1-devel-ubuntu24.04"].Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range readTar(t, b) {
			name := strings.TrimSuffix(e.hdr.Name, "/")
			files[name], data[name] = e.hdr, string(e.data)
		}
	}
	for name, target := range map[string]string{"usr/local/cuda": "/etc/alternatives/cuda", "etc/alternatives/cuda": "/usr/local/cuda-12.8", "usr/local/cuda-12.8/lib64": "/usr/lib/x86_64-linux-gnu", "usr/local/cuda-12.8/bin": "/usr/bin"} {
		if h := files[name]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
			t.Errorf("%s: %+v, want a link to %s", name, h, target)
		}
	}
	if !strings.Contains(data["etc/passwd"], "root:x:0:0:") || !strings.Contains(data["etc/passwd"], "\nubuntu:x:1000:1000:") {
		t.Errorf("/etc/passwd: %q", data["etc/passwd"])
	}
	if files["usr/bin/nvcc"] == nil || files["opt/nvidia/nvidia_entrypoint.sh"] == nil || files["NGC-DL-CONTAINER-LICENSE"] == nil {
		t.Error("devel lacks nvcc, the entrypoint or the license file")
	}
	for name := range files {
		if strings.Contains(name, "python") {
			t.Errorf("a stand-in carries %s: NVIDIA's images have no Python", name)
		}
	}
}

// With Debian 12's chain built (fixtures.sh bookworm), the debian12
// stand-in is made of it, created_by and all, and only that stand-in: its
// apt installs bookworm's Python 3.11 as NVIDIA's Debian 12 image's does.
func TestStandInDebian12Chain(t *testing.T) {
	epoch := time.Unix(1747699200, 0)
	mk := func(path, body string) v1.Layer {
		l, err := tarLayer([]tarFile{{name: path, mode: 0o644, data: []byte(body)}}, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	passwd := "root:x:0:0:root:/root:/bin/bash\n"
	layers := map[string]v1.Layer{
		"base": mk("etc/passwd", passwd), "cudart": mk("usr/lib/x86_64-linux-gnu/libcudart.so.12", "x"),
		"runtime": mk("usr/lib/x86_64-linux-gnu/libcublas.so.12", "x"), "devel": mk("usr/bin/nvcc", "12.4"),
		"base-bookworm": mk("etc/passwd", passwd), "cudart-bookworm": mk("usr/lib/x86_64-linux-gnu/libcudart.so.11.0", "x"),
		"runtime-bookworm": mk("usr/lib/x86_64-linux-gnu/libcublas.so.11", "x"), "devel-bookworm": mk("usr/bin/nvcc", "11.8"),
	}
	// Both bases need a group file for the Ubuntu stand-ins' user.
	for _, n := range []string{"base", "base-bookworm"} {
		l, err := tarLayer([]tarFile{{name: "etc/passwd", mode: 0o644, data: []byte(passwd)}, {name: "etc/group", mode: 0o644, data: []byte("root:x:0:\n# " + n + "\n")}}, epoch)
		if err != nil {
			t.Fatal(err)
		}
		layers[n] = l
	}
	cb := map[string]string{"base": "ADD trixie", "cudart": "RUN", "runtime": "RUN", "devel": "RUN",
		"base-bookworm": "ADD bookworm", "cudart-bookworm": "RUN", "runtime-bookworm": "RUN", "devel-bookworm": "RUN"}
	imgs, err := buildStandIns(layers, cb, epoch)
	if err != nil {
		t.Fatal(err)
	}
	digests := func(ref string) map[string]bool {
		ls, err := imgs[ref].Layers()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, l := range ls {
			d, _ := l.Digest()
			out[d.String()] = true
		}
		return out
	}
	has := func(ref, layer string) bool {
		d, _ := layers[layer].Digest()
		return digests(ref)[d.String()]
	}
	for _, n := range []string{"base", "cudart", "runtime", "devel"} {
		if !has("nvidia/cuda:11.8.0-devel-debian12", n+"-bookworm") || has("nvidia/cuda:11.8.0-devel-debian12", n) {
			t.Errorf("11.8.0 debian12 devel: not made of %s-bookworm alone", n)
		}
		if has("nvidia/cuda:12.8.1-devel-ubuntu24.04", n+"-bookworm") || !has("nvidia/cuda:12.8.1-devel-ubuntu24.04", n) {
			t.Errorf("12.8.1 ubuntu24.04 devel: not made of trixie's %s", n)
		}
	}
	cf, err := imgs["nvidia/cuda:11.8.0-base-debian12"].ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.History) == 0 || cf.History[0].CreatedBy != "ADD bookworm" {
		t.Errorf("11.8.0 debian12 base history: %+v", cf.History)
	}
}
