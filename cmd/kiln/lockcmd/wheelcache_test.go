package lockcmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
)

// kiln lock keys the wheels the build compiles (FlashAttention build:
// source, keyed by its sdist's sha256 among the rest) and records whether
// the wheel cache holds each one.
func TestLockRecordsCompiledWheels(t *testing.T) {
	ctx := context.Background()
	host, _ := testRegistry(t, "11.8.0-devel-debian12", "11.8.0-runtime-debian12")
	sdist := "flash_attn-2.7.0.post2.tar.gz"
	ix := newTestIndex(t, true,
		"torch-2.5.1+cu118-cp311-cp311-linux_x86_64.whl",
		sdist,
		"bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl",
	)
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "recipes", "debian-cuda11.8.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src = bytes.Replace(src, []byte("build: wheel"), []byte("build: source"), 1)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "kiln.yaml")
	if err := os.WriteFile(recipe, src, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := testimage.Registry(t) + "/kiln/wheels"
	args := []string{"lock", recipe, "--mirror", host, "--wheel-index", ix.srv.URL + "/simple", "--wheel-cache", cache}
	lock := func() *recipes.Lock {
		t.Helper()
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("lock: %d %s %s", code, out, errOut)
		}
		l, err := recipes.ReadLock(filepath.Join(dir, "kiln.lock"))
		if err != nil {
			t.Fatal(err)
		}
		if len(l.CompiledWheels) != 1 {
			t.Fatalf("compiled wheels %+v", l.CompiledWheels)
		}
		return l
	}
	l := lock()
	w := l.CompiledWheels[0]
	if w.Name != "flash-attn" || w.Key.Source != "sha256:"+ix.hashes[sdist] || w.KeyDigest != w.Key.Digest() || w.Cached || w.Cache == "" {
		t.Errorf("first lock: %+v", w)
	}
	c, err := wheelcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(t.TempDir(), "flash_attn-2.7.0.post2-cp311-cp311-linux_x86_64.whl")
	os.WriteFile(wheel, []byte("compiled"), 0o644)
	if _, err := c.Push(ctx, w.Key, wheel); err != nil {
		t.Fatal(err)
	}
	w = lock().CompiledWheels[0]
	if !w.Cached || w.Filename != filepath.Base(wheel) || w.Size != 8 || !strings.HasSuffix(w.Ref, ":"+w.Key.Tag()) {
		t.Errorf("second lock: %+v", w)
	}
}

// A pinned requirement whose index lists only a source archive: kiln
// lock refuses it and says how to have kiln compile it; with
// pip_from_source the lock keys the wheel by the archive's sha256 (in
// compiled_wheels beside FlashAttention's, not among the fetched wheels).
func TestLockSourceOnlyRequirement(t *testing.T) {
	host, _ := testRegistry(t, "11.8.0-devel-debian12", "11.8.0-runtime-debian12")
	sdist := "kiln_demo_ext-1.0.tar.gz"
	ix := newTestIndex(t, true,
		"torch-2.5.1+cu118-cp311-cp311-linux_x86_64.whl",
		"flash_attn-2.7.0.post2+cu118torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
		"bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl",
		sdist,
	)
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "recipes", "debian-cuda11.8.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	recipe := filepath.Join(dir, "kiln.yaml")
	write := func(extra string) {
		t.Helper()
		if err := os.WriteFile(recipe, append(bytes.Clone(src), extra...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"lock", recipe, "--mirror", host, "--wheel-index", ix.srv.URL + "/simple"}

	write("pip: [kiln-demo-ext==1.0]\n")
	code, _, errOut := run(t, args...)
	if code != 1 || !strings.Contains(errOut, "only its source archive "+sdist) || !strings.Contains(errOut, "pip_from_source: [kiln-demo-ext]") {
		t.Errorf("an sdist-only requirement: exit %d, %q; want the fix named", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "kiln.lock")); err == nil {
		t.Error("a refused lock wrote kiln.lock")
	}

	write("pip: [kiln-demo-ext==1.0]\npip_from_source: [kiln-demo-ext]\n")
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("lock with pip_from_source: %d %s %s", code, out, errOut)
	}
	l, err := recipes.ReadLock(filepath.Join(dir, "kiln.lock"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range l.Wheels {
		if w.Name == "kiln-demo-ext" {
			t.Errorf("the compiled requirement is locked as a fetched wheel: %+v", w)
		}
	}
	if len(l.CompiledWheels) != 1 {
		t.Fatalf("compiled wheels %+v, want kiln-demo-ext", l.CompiledWheels)
	}
	w := l.CompiledWheels[0]
	if w.Name != "kiln-demo-ext" || w.Version != "1.0" || w.Key.Source != "sha256:"+ix.hashes[sdist] || w.Key.Torch != "2.5.1" || strings.Join(w.Key.Archs, ",") != "8.0" {
		t.Errorf("compiled wheel %+v", w)
	}
}
