package analyze

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/termtable"
)

// wideReport holds the values that made analyze's table 209 columns: full
// digests, long paths and RUN lines, NVIDIA's brand list.
func wideReport() *Report {
	const dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	long := "/usr/local/lib/python3.12/dist-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9"
	return &Report{
		Image:  "registry.example.com:5000/some-team/a-rather-long-repository-name/serve:2026-12-01-cu124",
		Digest: dg, Platform: "linux/amd64", Source: "registry", CompressedSize: 4 << 30, UncompressedSize: 9 << 30,
		VisibleSize: 8 << 30, FileCount: 123456, Verified: true,
		Layers: []LayerReport{
			{Index: 0, Digest: dg, Compression: "gzip", CompressedSize: 30 << 20, UncompressedSize: 80 << 20, FileCount: 4000,
				CreatedBy: "/bin/sh -c #(nop) ADD file:0123456789abcdef0123456789abcdef0123456789abcdef in /"},
			{Index: 11, Digest: dg, Compression: "zstd", CompressedSize: 3 << 30, UncompressedSize: 7 << 30, FileCount: 90000,
				CreatedBy:    "RUN /bin/sh -c pip install --no-cache-dir torch==2.6.0 torchvision torchaudio --index-url https://download.pytorch.org/whl/cu124 # buildkit",
				BytesByClass: map[string]int64{string(classify.ClassWeights): 2 << 30, string(classify.ClassStaticLibs): 300 << 20, string(classify.ClassCUDALibs): 100 << 20}, WastedBytes: 12 << 20},
		},
		Waste: Waste{WastedBytes: 12 << 20, Efficiency: 0.99, Top: []WastedFile{{Path: long, Size: 12 << 20, Layer: 0, By: 11, How: "overwritten"}}},
		Classes: []ClassReport{{Class: classify.ClassWeights, Bytes: 2 << 30, Files: 3, VisibleBytes: 2 << 30, Fix: classify.ClassWeights.Fix(),
			Top: []FileRef{{Path: "/app/models/meta-llama/Llama-3.1-8B-Instruct/model-00001-of-00004.safetensors", Size: 1 << 30, Format: "safetensors"}}}},
		DuplicateCUDALibs: []DuplicateLib{{Soname: "libcublasLt.so.12", WastedBytes: 500 << 20, Copies: []FileRef{{Path: long}, {Path: "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcublasLt.so.12.4.5.8"}}}},
		CUDA: CUDAFacts{CUDAVersion: "12.4.1", Requirement: &Requirement{CUDA: "12.4",
			Brands:         []string{"unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps", "vpc", "vcs", "vws", "cloudgaming"},
			DriverBranches: []string{"470", "535", "550", "560", "565"}}, MinDriver: &MinDriver{Toolkit: "550.54.15", MinorVersionCompat: "525.60.13"}},
		LargestFiles: []FileRef{{Path: long, Size: 900 << 20, Layer: 11, Class: classify.ClassCUDALibs, Deleted: true}},
		Kernels: &KernelReport{SM: []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"}, PTX: []string{"compute_90"},
			Libraries: []KernelLib{{Path: long, SM: []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"}, PTX: []string{"compute_90"}}}},
		Warnings: []string{"the image's CUDA_VERSION (12.4.1) and the cudart it ships (12.6.77) differ: NVIDIA_REQUIRE_CUDA is read from the environment, the code from the files"},
	}
}

// checkWidth fails for each line of out wider than cols.
func checkWidth(t *testing.T, out string, cols int) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if n := termtable.Len(l); n > cols {
			t.Errorf("%d columns: %q", n, l)
		}
	}
}

func TestWriteTableFitsEightyColumns(t *testing.T) {
	var b strings.Builder
	if err := wideReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	checkWidth(t, out, 80)
	for _, want := range []string{"sha256:0123456789ab ", "▇▇▇▇▇▇▇▇", "libcublasLt.so.12", "layer 11 flagged: static_libs 300.0 MiB, weights 2.0 GiB", "cloudgaming"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour without Color(true):\n%s", out)
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
	b.Reset()
	if err := wideReport().WriteTable(&b, termtable.Width(80), termtable.Color(true)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\x1b[36m▇") {
		t.Errorf("no coloured size bar with Color(true):\n%q", b.String())
	}
	checkWidth(t, b.String(), 80)
}

// An image with no GPU code is not "covered" for a GPU (issue 36 item 8):
// the table says there is nothing of it to run there.
func TestWriteTableNoGPUCode(t *testing.T) {
	r := wideReport()
	r.Kernels = &KernelReport{GPUs: []GPUSupport{{GPU: "H100", ComputeCapability: "9.0", Covered: true}}}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, " covered") || !strings.Contains(out, "no GPU code in the image") {
		t.Errorf("H100 line:\n%s", out)
	}
	checkWidth(t, b.String(), 80)
}
