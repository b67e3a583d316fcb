package slim

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testkit"
)

// slim's summary fits 80 columns with long paths and reasons, and its
// layer table draws size bars.
func TestWriteTableFitsEightyColumns(t *testing.T) {
	long := "/usr/local/lib/python3.12/dist-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9"
	r := &Report{
		Source: "registry.example.com:5000/some-team/a-rather-long-repository-name/serve:2026-12-01-cu124",
		Policy: "runtime-strict", PolicySummary: "drop dev_tools,headers,static_libs,docs,caches; weights divert; dedupe cuda_libs; prune_libs",
		Layers: []OutLayer{{Name: "os", CompressedSize: 30 << 20, FromLayers: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
			{Name: "python-site-packages-nvidia-cudnn", CompressedSize: 900 << 20, FromLayers: []int{11}}},
		Removed:    []RemovedSum{{Why: "class static_libs", Files: 12, Bytes: 300 << 20}},
		TopRemoved: []RemovedFile{{Path: long, Bytes: 800 << 20, Layer: 11, Why: "class static_libs"}},
		Kept:       []KeptReason{{Path: long, Bytes: 1 << 30, Reason: "needed by run-time kernel compilers: triton, torch.utils.cpp_extension, cupy, numba"}},
		Warnings:   []string{"prune_libs without --probe: nothing checked that the application still loads what it dlopens; run kiln slim --probe 'CMD' with a command that exercises it"},
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if !testkit.Fits(l, 80) {
			t.Errorf("%d columns: %q", termtable.Len(l), l)
		}
	}
	if !strings.Contains(b.String(), "▇▇▇▇▇▇▇▇") || !strings.Contains(b.String(), "precompiled.so.9 (layer 11") {
		t.Errorf("no size bar or file name:\n%s", b.String())
	}
	if testing.Verbose() {
		t.Log("\n" + b.String())
	}
}
