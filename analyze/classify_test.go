package analyze_test

import (
	"testing"

	"github.com/kiln-build/kiln/analyze"
)

// gcc's compiler passes are build tools wherever gcc keeps them; the same
// names elsewhere, and gcc's run-time libraries, are not.
func TestClassifyGCCInternals(t *testing.T) {
	cases := []struct {
		path string
		want analyze.Class
	}{
		{"usr/lib/gcc/x86_64-linux-gnu/11/cc1plus", analyze.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/11/cc1", analyze.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/12/lto1", analyze.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/12/collect2", analyze.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/12/lto-wrapper", analyze.ClassDevTools},
		{"usr/libexec/gcc/x86_64-redhat-linux/13/cc1plus", analyze.ClassDevTools},
		{"usr/lib/gcc/x86_64-linux-gnu/11/liblto_plugin.so", analyze.ClassOther},
		{"usr/lib/gcc/x86_64-linux-gnu/11/libgcc.a", analyze.ClassStaticLibs},
		{"usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", analyze.ClassOther},
		{"app/bin/cc1", analyze.ClassOther},
		{"usr/lib/gcc/x86_64-linux-gnu/11/plugin/cc1plus", analyze.ClassOther},
		{"usr/bin/nvcc", analyze.ClassDevTools},
	}
	for _, tc := range cases {
		if got := analyze.ClassifyPath(tc.path); got != tc.want {
			t.Errorf("ClassifyPath(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
