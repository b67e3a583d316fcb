package slim

import (
	"strings"
	"testing"
)

func TestLoadPolicy(t *testing.T) {
	p, err := LoadPolicy("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Weights != WeightsDivert || p.JIT != JITRefuse || !p.DedupeCUDALibs || len(p.Drop) != 5 || p.Remove[0] != "usr/share/locale/**" {
		t.Errorf("%+v", p)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"drop: [headers, nvcc]\n", "p.yaml:1: drop[1]: unknown class \"nvcc\""},
		{"drop:\n  - docs\n  - weights\n", "p.yaml:3: drop[1]: weights are not dropped by class"},
		{"drop: [cuda_libs]\n", "cuda_libs are needed at run time"},
		{"drop: [docs]\nweights: delete\n", "p.yaml:2: weights: \"delete\""},
		{"jit: maybe\n", "p.yaml:1: jit: \"maybe\""},
		{"remove:\n  - \"usr/[share\"\n", "p.yaml:2: remove[0]: bad glob"},
		{"dorp: [docs]\n", "p.yaml: [1:1] unknown field \"dorp\""},
		{"drop: [docs]\nprune_libs: all\n", "p.yaml:2: prune_libs: \"all\" is not one of off, unreferenced"},
		{"keep_libs:\n  - \"lib[x.so\"\n", "p.yaml:2: keep_libs[0]: bad glob"},
	}
	for _, tc := range cases {
		_, err := ParsePolicy("p.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestBuiltinPolicy(t *testing.T) {
	w, err := BuiltinPolicy("weights")
	if err != nil || len(w.Drop) != 0 || w.Weights != WeightsDivert || w.DedupeCUDALibs {
		t.Errorf("weights policy: %+v %v", w, err)
	}
	r, _ := BuiltinPolicy("runtime")
	s, err := BuiltinPolicy("runtime-strict")
	if err != nil || !s.Prunes() || r.Prunes() || len(s.Drop) != len(r.Drop) || !strings.Contains(s.String(), "prune unreferenced libs") {
		t.Errorf("runtime-strict: %+v %v", s, err)
	}
	p, err := ParsePolicy("p.yaml", []byte("drop: [docs]\n"))
	if err != nil || p.PruneLibs != PruneOff {
		t.Errorf("prune must be off by default: %+v %v", p, err)
	}
	if _, err := BuiltinPolicy("nope"); err == nil || !strings.Contains(err.Error(), "runtime, runtime-strict, weights") {
		t.Errorf("unknown: %v", err)
	}
}

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		g, p string
		ok   bool
	}{
		{"usr/share/doc/*/copyright", "usr/share/doc/bash/copyright", true},
		{"usr/share/doc/*/copyright", "usr/share/doc/bash/README", false},
		{"/usr/share/locale/**", "usr/share/locale/de/LC_MESSAGES/x.mo", true},
		{"usr/share/locale", "usr/share/locale/de", true},
		{"**/*.pyc", "usr/lib/python3/x/y.pyc", true},
		{"**/*.pyc", "usr/lib/python3/x/y.py", false},
	}
	for _, tc := range cases {
		if got := matchGlob(tc.g, tc.p); got != tc.ok {
			t.Errorf("matchGlob(%q, %q) = %v", tc.g, tc.p, got)
		}
	}
}
