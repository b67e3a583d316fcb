package main

import (
	"slices"
	"strings"
	"testing"
)

// complete runs cobra's hidden __complete as the shell scripts of kiln
// completion bash|zsh|fish do, and returns the offered values (without
// descriptions).
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	code, out, errOut := kiln(t, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d: %s", args, code, errOut)
	}
	var vals []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" || strings.HasPrefix(l, ":") {
			continue
		}
		v, _, _ := strings.Cut(l, "\t")
		vals = append(vals, v)
	}
	return vals
}

func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if code, out, _ := kiln(t, "completion", sh); code != 0 || !strings.Contains(out, "kiln") {
			t.Errorf("completion %s: exit %d", sh, code)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"recipes", "init", ""}, []string{"torch25-cu124", "cuda13-torch29"}, nil},
		{[]string{"recipes", "show", ""}, []string{"torch25-cu124"}, nil},
		{[]string{"recipes", "show", "torch25-cu124", ""}, nil, []string{"torch25-cu124"}},
		{[]string{"analyze", "x", "--gpu", ""}, []string{"h100", "l4", "rtx4090", "b200", "sm_90"}, []string{"tesla-t4"}},
		{[]string{"slim", "x", "--gpus", "h100,"}, []string{"h100,l4", "h100,sm_89"}, []string{"l4"}},
		{[]string{"fatbin", "prune", "--gpus", ""}, []string{"h100"}, nil},
		{[]string{"compat", "driver", "--gpu", ""}, []string{"rtx4090"}, nil},
		{[]string{"slim", "x", "--policy", ""}, []string{"runtime", "runtime-strict", "weights"}, nil},
		{[]string{"warm", "x", "--target", ""}, []string{"containerd", "docker", "oci:"}, nil},
		{[]string{"analyze", "x", "--progress", ""}, []string{"auto", "tty", "plain", "none"}, []string{"bars"}},
		{[]string{"warm", "x", "--progress", ""}, []string{"auto", "tty", "plain", "none"}, []string{"bars"}},
		{[]string{"slim", "x", "--compression", ""}, []string{"both", "gzip", "zstd"}, []string{"none"}},
		{[]string{"build", "--compression", ""}, []string{"both", "gzip", "zstd", "none"}, nil},
		{[]string{"warm", "x", "--compression", ""}, []string{"auto", "gzip", "zstd"}, nil},
	} {
		got := complete(t, tc.args...)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("__complete %q: %q missing from %q", tc.args, w, got)
			}
		}
		for _, w := range tc.not {
			if slices.Contains(got, w) {
				t.Errorf("__complete %q: offers %q", tc.args, w)
			}
		}
	}
}
