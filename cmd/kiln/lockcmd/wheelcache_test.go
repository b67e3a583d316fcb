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
