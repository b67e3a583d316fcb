package builder

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitWheels(t *testing.T) {
	ws := []Wheel{
		{"torch-2.6.0-cp311-linux_x86_64.whl", 1500}, {"nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl", 600},
		{"nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl", 700}, {"filelock-3.16.1-py3-none-any.whl", 10},
		{"nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl", 5}, {"sympy-1.13.1-py3-none-any.whl", 60},
	}
	runtime := func(f string) bool { return strings.HasPrefix(f, "nvidia_cuda_runtime_cu12-") }
	for _, tc := range []struct {
		name string
		max  int64
		keep func(string) bool
		want [][]string
	}{
		{"no cap", 0, nil, nil},
		{"fits", 10000, nil, nil},
		// Name order: filelock, cublas, cuda_runtime, cudnn, sympy, torch.
		{"cap 1000", 1000, nil, [][]string{
			{"filelock-3.16.1-py3-none-any.whl", "nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl", "nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl"},
			{"nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl", "sympy-1.13.1-py3-none-any.whl"},
			{"torch-2.6.0-cp311-linux_x86_64.whl"},
		}},
		{"cap 1000, runtime kept for the last step", 1000, runtime, [][]string{
			{"filelock-3.16.1-py3-none-any.whl", "nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl"},
			{"nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl", "sympy-1.13.1-py3-none-any.whl"},
			{"torch-2.6.0-cp311-linux_x86_64.whl"},
			{"nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SplitWheels(ws, tc.max, tc.keep)
			if !slices.EqualFunc(got, tc.want, slices.Equal[[]string]) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
			// Input order does not matter.
			rev := slices.Clone(ws)
			slices.Reverse(rev)
			if again := SplitWheels(rev, tc.max, tc.keep); !slices.EqualFunc(again, got, slices.Equal[[]string]) {
				t.Errorf("reversed input: %q", again)
			}
		})
	}
}

// A split torch install becomes consecutive runtime steps of the torch
// component: --no-deps installs by path, then the component's own install;
// the graph stays deterministic and every other step is unchanged.
func TestSplitComponent(t *testing.T) {
	p := testPlan(t, nil)
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	orig := slices.Clone(L.Runtime.Steps)
	parts := [][]string{{"nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl", "sympy-1.13.1-py3-none-any.whl"},
		{"nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl"}, {"torch-2.6.0+cu124-cp311-cp311-linux_x86_64.whl"}}
	if err := L.SplitComponent(ComponentTorch, parts); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range L.Runtime.Steps {
		names = append(names, s.Name)
	}
	if len(L.Runtime.Steps) != len(orig)+2 {
		t.Fatalf("steps %v", names)
	}
	ti := slices.IndexFunc(orig, func(s Step) bool { return s.Component == ComponentTorch })
	for k := range parts {
		s := L.Runtime.Steps[ti+k]
		if s.Component != ComponentTorch || !strings.HasSuffix(s.Name, []string{"(1/3)", "(2/3)", "(3/3)"}[k]) {
			t.Errorf("step %d: %s %s", ti+k, s.Component, s.Name)
		}
		if len(s.Mounts) == 0 || s.Mounts[0].Kind != MountBind {
			t.Errorf("step %s: mounts %+v", s.Name, s.Mounts)
		}
		// With the recipe's gpus every part prunes what it installed.
		if pruned := strings.Contains(s.Shell, "&& /kiln-tools/kiln fatbin prune --gpus "); pruned != (p.GPUCode != nil) || pruned != (len(s.Mounts) == 2 && s.Mounts[1].Kind == MountTools) {
			t.Errorf("step %s: pruning %v with gpu_code %+v, mounts %+v", s.Name, pruned, p.GPUCode, s.Mounts)
		}
	}
	if s := L.Runtime.Steps[ti].Shell; !strings.Contains(s, "--no-deps") || !strings.Contains(s, "--find-links /wheelhouse/torch nvidia_cublas_cu12==12.4.5.8 sympy==1.13.1 && python3 -c ") ||
		!strings.Contains(s, "' nvidia_cublas_cu12 sympy") {
		t.Errorf("part 1: %s", s)
	}
	if L.Runtime.Steps[ti+2].Shell != orig[ti].Shell {
		t.Errorf("last part: %s, want the component's install %s", L.Runtime.Steps[ti+2].Shell, orig[ti].Shell)
	}
	for i, s := range orig {
		j := i
		if i > ti {
			j = i + 2
		}
		if i != ti && L.Runtime.Steps[j].Shell != s.Shell {
			t.Errorf("step %s changed", s.Name)
		}
	}
	a := graphFor(L, p, Inputs{}, PlatformOrDefault(p))
	b := graphFor(L, p, Inputs{}, PlatformOrDefault(p))
	da, err := a.Marshal(t.Context(), a.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := b.Marshal(t.Context(), b.Runtime)
	if DefinitionDigest(da) != DefinitionDigest(db) {
		t.Error("the split layout gives two graphs")
	}
	if err := L.SplitComponent(ComponentApp, parts); err == nil {
		t.Error("split of a component without an install step")
	}
	if err := L.SplitComponent(ComponentPip, [][]string{{"notawheel.tar.gz"}, {"x-1-py3-none-any.whl"}}); err == nil {
		t.Error("split with a file that is not a wheel")
	}
}
