package analyze_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/testimage"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// safetensors builds a valid safetensors file of about n bytes.
func safetensors(n int) []byte {
	hdr := []byte(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`)
	b := make([]byte, 8+len(hdr)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	copy(b[8:], hdr)
	return b
}

// cudaImage is a small image shaped like a naive CUDA app build.
func cudaImage(t *testing.T, comp string) v1.Image {
	t.Helper()
	te := testimage.Sized
	base := testimage.Layer(t, []testimage.Entry{
		testimage.Dir("usr/"), testimage.Dir("usr/bin/"),
		te("usr/bin/bash", 1000),
		te("usr/share/doc/bash/README", 300),
		te("var/lib/apt/lists/deb.debian.org_dists_bookworm_InRelease", 500),
	}, comp)
	cuda := testimage.Layer(t, []testimage.Entry{
		te("usr/local/cuda-11.8/bin/nvcc", 2000),
		te("usr/local/cuda-11.8/include/cuda_runtime.h", 400),
		te("usr/local/cuda-11.8/lib64/libcudart_static.a", 3000),
		te("usr/local/cuda-11.8/lib64/libcublas.so.11.11.3.6", 5000),
		te("usr/local/cuda-11.8/lib64/libcudart.so.11.8.89", 700),
		testimage.Symlink("usr/local/cuda", "cuda-11.8"),
		te("usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2", 800),
		te("usr/lib/nvidia-cuda-toolkit/bin/cicc", 900),
		testimage.File("usr/include/cudnn_version.h", []byte("#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 6\n")),
	}, comp)
	app := testimage.Layer(t, []testimage.Entry{
		te("root/.cache/pip/http/a/b/c/wheel", 600),
		te("usr/lib/python3/dist-packages/torch/__pycache__/x.cpython-311.pyc", 100),
		te("usr/lib/python3/site-packages/nvidia/cublas/lib/libcublas.so.11", 4000),
		testimage.File("app/model.safetensors", safetensors(4096)),
		te("app/not-weights.bin", 2048), // a .bin that is not a weights container
		te("usr/bin/bash", 1200),        // supersedes the base copy (1000)
	}, comp)
	cleanup := testimage.Layer(t, []testimage.Entry{
		testimage.Opaque("var/lib/apt/lists"),
		testimage.Whiteout("usr/share/doc"),
	}, comp)
	return testimage.Image(t, testimage.Config{
		Env:       []string{"CUDA_VERSION=11.8.0", "NVIDIA_REQUIRE_CUDA=cuda>=11.8 brand=tesla,driver>=470,driver<471 brand=geforce,driver>=470,driver<471"},
		CreatedBy: []string{"debootstrap", "apt-get install cuda", "pip install torch", "rm -rf /var/lib/apt/lists/* /usr/share/doc"},
	}, base, cuda, app, cleanup)
}

func class(r *analyze.Report, c classify.Class) analyze.ClassReport {
	for _, cr := range r.Classes {
		if cr.Class == c {
			return cr
		}
	}
	return analyze.ClassReport{}
}

func openAndAnalyze(t *testing.T, ref string, opts ...analyze.Options) *analyze.Report {
	t.Helper()
	img, err := testkit.OpenImage(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	var o analyze.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	rep, err := analyze.Image(context.Background(), img, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestAnalyzeSources(t *testing.T) {
	dir := t.TempDir()
	reg := testimage.Registry(t)
	for _, comp := range []string{"gzip", "zstd", "none"} {
		img := cudaImage(t, comp)
		testimage.WriteLayout(t, filepath.Join(dir, "oci-"+comp), "app", img)
		testimage.Push(t, reg+"/kiln/app:"+comp, img)
	}
	testimage.WriteArchive(t, filepath.Join(dir, "app.tar"), "kiln/app:latest", cudaImage(t, "gzip"))
	refs := []string{
		"oci:" + filepath.Join(dir, "oci-gzip") + ":app",
		"oci:" + filepath.Join(dir, "oci-zstd") + ":app",
		"oci:" + filepath.Join(dir, "oci-none"),
		reg + "/kiln/app:gzip",
		reg + "/kiln/app:zstd",
		"docker-archive:" + filepath.Join(dir, "app.tar"),
	}
	for _, ref := range refs {
		t.Run(ref, func(t *testing.T) {
			r := openAndAnalyze(t, ref)
			if !r.Verified {
				t.Error("report not verified")
			}
			if len(r.Layers) != 4 {
				t.Fatalf("layers = %d, want 4", len(r.Layers))
			}
			want := map[classify.Class]int64{
				classify.ClassDevTools:   2000 + 900,
				classify.ClassHeaders:    400 + int64(len("#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 6\n")),
				classify.ClassStaticLibs: 3000,
				classify.ClassDocs:       300,
				classify.ClassCaches:     500 + 600 + 100,
				classify.ClassWeights:    int64(len(safetensors(4096))),
				classify.ClassCUDALibs:   5000 + 700 + 800 + 4000,
			}
			for c, n := range want {
				if got := class(r, c).Bytes; got != n {
					t.Errorf("class %s bytes = %d, want %d", c, got, n)
				}
			}
			if v := class(r, classify.ClassCaches).VisibleBytes; v != 700 {
				t.Errorf("caches visible = %d, want 700 (apt lists hidden by the opaque dir)", v)
			}
			w := class(r, classify.ClassWeights)
			if len(w.Top) != 1 || w.Top[0].Path != "/app/model.safetensors" || w.Top[0].Format != "safetensors" {
				t.Errorf("weights top = %+v, want only /app/model.safetensors (safetensors)", w.Top)
			}
			// Superseded: bash 1000 (overwritten), apt list 500 (opaque), doc 300 (whiteout).
			if r.Waste.WastedBytes != 1800 {
				t.Errorf("wasted = %d, want 1800", r.Waste.WastedBytes)
			}
			if r.Layers[0].WastedBytes != 1800 {
				t.Errorf("layer 0 wasted = %d, want 1800", r.Layers[0].WastedBytes)
			}
			if r.Waste.Efficiency >= 1 || r.Waste.Efficiency <= 0.5 {
				t.Errorf("efficiency = %v, want in (0.5, 1)", r.Waste.Efficiency)
			}
			if len(r.DuplicateCUDALibs) != 1 || r.DuplicateCUDALibs[0].Soname != "libcublas.so.11" || r.DuplicateCUDALibs[0].WastedBytes != 4000 {
				t.Errorf("duplicates = %+v, want libcublas.so.11 wasting 4000", r.DuplicateCUDALibs)
			}
			c := r.CUDA
			if c.CUDAVersion != "11.8.0" || c.RuntimeVersion != "11.8.89" || c.CuDNNVersion != "8.9.6" {
				t.Errorf("cuda facts = %+v", c)
			}
			if c.Requirement == nil || c.Requirement.CUDA != "11.8" || strings.Join(c.Requirement.Brands, ",") != "geforce,tesla" || strings.Join(c.Requirement.DriverBranches, ",") != "470" {
				t.Errorf("requirement = %+v", c.Requirement)
			}
			if c.MinDriver == nil || c.MinDriver.Toolkit != ">=520.61.05" && c.MinDriver.Toolkit != "520.61.05" {
				t.Errorf("min driver = %+v, want 520.61.05 for CUDA 11.8.0", c.MinDriver)
			}
			if r.Layers[2].CreatedBy != "pip install torch" {
				t.Errorf("created_by = %q", r.Layers[2].CreatedBy)
			}
			if r.Layers[1].BytesByClass["dev_tools"] != 2900 {
				t.Errorf("layer 1 dev_tools = %d", r.Layers[1].BytesByClass["dev_tools"])
			}
		})
	}
}

func TestRulesCheck(t *testing.T) {
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", cudaImage(t, "gzip"))
	r := openAndAnalyze(t, "oci:"+dir+":app")
	rules, err := analyze.ParseRules("runtime.yaml", []byte("forbid: [dev_tools, weights]\nmin_efficiency: 0.99\nmax_wasted_bytes: 1KB\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := rules.Check(r)
	var got []string
	for _, x := range v {
		got = append(got, x.Rule+":"+strings.SplitN(x.Message, ":", 2)[0])
	}
	want := "min_efficiency:efficiency 0.9,max_wasted_bytes:1.8 KiB wasted by superseded files, over the 1000 B limit,forbid:dev_tools,forbid:weights"
	if strings.Join(got, ",")[:len("min_efficiency:efficiency 0.9")] != want[:len("min_efficiency:efficiency 0.9")] || len(v) != 4 {
		t.Errorf("violations = %q", got)
	}
	ok, err := analyze.ParseRules("ok.yaml", []byte("max_size: 10MB\nforbid: [static_libs]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v := ok.Check(r); len(v) != 1 || v[0].Rule != "forbid" {
		t.Errorf("violations = %+v", v)
	}
}

func TestParseRulesErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"forbid: [nvcc]", `forbid: unknown class "nvcc"`},
		{"max_size: lots", `"lots" is not a size`},
		{"min_efficiency: 2", "min_efficiency: 2 is outside 0..1"},
		{"maxsize: 1GB", "unknown field"},
	} {
		_, err := analyze.ParseRules("r.yaml", []byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "r.yaml") {
			t.Errorf("ParseRules(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}
