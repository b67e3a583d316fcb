package classify_test

import (
	"testing"

	"github.com/kiln-build/kiln/analyze/classify"
)

// gcc's compiler passes are build tools wherever gcc keeps them; the same
// names elsewhere, and gcc's run-time libraries, are not.
func TestClassifyGCCInternals(t *testing.T) {
	cases := []struct {
		path string
		want classify.Class
	}{
		{"usr/lib/gcc/x86_64-linux-gnu/11/cc1plus", classify.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/11/cc1", classify.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/12/lto1", classify.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/12/collect2", classify.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/12/lto-wrapper", classify.ClassDevTools},
		{"usr/libexec/gcc/x86_64-redhat-linux/13/cc1plus", classify.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/11/liblto_plugin.so", classify.ClassOther},
		{"usr/lib/gcc/x86_64-linux-gnu/11/libgcc.a", classify.ClassStaticLibs},
		{"usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", classify.ClassOther},
		{"app/bin/cc1", classify.ClassOther},
		{"usr/lib/gcc/x86_64-linux-gnu/11/plugin/cc1plus", classify.ClassOther},
		{"usr/bin/nvcc", classify.ClassDevTools},
		{"usr/bin/x86_64-linux-gnu-lto-dump-13", classify.ClassDevTools},
		{"usr/bin/lto-dump-13", classify.ClassDevTools},
		{"usr/lib/nvidia-cuda-toolkit/compute-sanitizer/libsanitizer-collection.so", classify.ClassDevTools},
		{"usr/local/cuda-12.4/compute-sanitizer/TreeLauncherSubreaper", classify.ClassDevTools},
		{"app/bin/lto-dump", classify.ClassOther},
		{"usr/include/c++/13/vector", classify.ClassHeaders},
		{"usr/include/cuda/std/utility", classify.ClassHeaders},
		{"usr/include/c++/13/bits/vector.tcc", classify.ClassHeaders},
		{"usr/local/include/cuda/barrier", classify.ClassHeaders},
		{"usr/lib/python3/dist-packages/torch/include/ATen/core/vector.tcc", classify.ClassHeaders},
		{"usr/lib/python3/dist-packages/mypkg/tcc", classify.ClassOther},
	}
	for _, tc := range cases {
		if got := classify.ClassifyPath(tc.path); got != tc.want {
			t.Errorf("ClassifyPath(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
