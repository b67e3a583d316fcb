package slim

import (
	"archive/tar"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

func TestRuntimePolicyDropsDevFiles(t *testing.T) {
	base := testimage.Layer(t, []testimage.Entry{
		testimage.Dir("usr"), testimage.Dir("usr/bin"),
		testimage.File("usr/bin/bash", []byte("bash")),
		testimage.Dir("usr/local/cuda-11.8/bin"),
		testimage.Sized("usr/local/cuda-11.8/bin/nvcc", 5000),
		testimage.Sized("usr/local/cuda-11.8/bin/ptxas", 5000),
		testimage.Symlink("usr/bin/nvcc", "../local/cuda-11.8/bin/nvcc"),
		testimage.File("usr/local/cuda-11.8/include/cuda.h", []byte("#define CUDA")),
		testimage.Sized("usr/lib/x86_64-linux-gnu/libcudart_static.a", 3000),
		testimage.Sized("usr/lib/x86_64-linux-gnu/libcudart.so.11.8.89", 4000),
		testimage.Symlink("usr/lib/x86_64-linux-gnu/libcudart.so.11", "libcudart.so.11.8.89"),
		testimage.File("usr/share/doc/bash/README", []byte("doc")),
		testimage.File("usr/share/doc/bash/copyright", []byte("GPL")),
		testimage.Sized("root/.cache/pip/http/abc", 2000),
		testimage.File("app/__pycache__/main.cpython-311.pyc", []byte("pyc")),
		testimage.File("app/main.py", []byte("print(1)")),
	}, "gzip")
	src := openLayout(t, testimage.Image(t, testimage.Config{Env: []string{"A=1"}}, base))
	res := rewrite(t, src, Options{Policy: runtimePolicy(t)})
	img, err := res.Image(map[string]string{"x": "y"})
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := flatten(t, img)
	for _, gone := range []string{"usr/local/cuda-11.8/bin/nvcc", "usr/local/cuda-11.8/bin/ptxas", "usr/bin/nvcc", "usr/local/cuda-11.8/include/cuda.h",
		"usr/lib/x86_64-linux-gnu/libcudart_static.a", "usr/share/doc/bash/README", "root/.cache/pip/http/abc", "app/__pycache__/main.cpython-311.pyc"} {
		if _, ok := fs[gone]; ok {
			t.Errorf("%s kept", gone)
		}
	}
	for _, kept := range []string{"usr/bin/bash", "usr/lib/x86_64-linux-gnu/libcudart.so.11.8.89", "usr/share/doc/bash/copyright", "app/main.py"} {
		if e, ok := fs[kept]; !ok || e.typ != tar.TypeReg {
			t.Errorf("%s missing", kept)
		}
	}
	if e := fs["usr/lib/x86_64-linux-gnu/libcudart.so.11"]; e.typ != tar.TypeSymlink || e.link != "libcudart.so.11.8.89" {
		t.Errorf("soname link: %+v", e)
	}
	cf, _ := img.ConfigFile()
	if cf.Config.Env[0] != "A=1" || cf.Config.Labels["x"] != "y" {
		t.Errorf("config: %+v", cf.Config)
	}
	t.Logf("%+v", res.Report.Layers)
}
