package convert

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/registry"
)

func erofsSource(t *testing.T) v1.Image {
	return testimage.Image(t, testimage.Config{CreatedBy: []string{"base", "app"}},
		testimage.Layer(t, []testimage.Entry{testimage.Dir("usr"), testimage.Dir("usr/lib"),
			testimage.Sized("usr/lib/libbig.so", 1<<20), testimage.Dir("etc"), testimage.File("etc/old.conf", []byte("old\n"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.Dir("etc"), testimage.Whiteout("etc/old.conf"),
			testimage.Dir("app"), testimage.File("app/main.py", []byte("print('hi')\n"))}, "zstd"))
}

// TestToErofs converts a pushed gzip+zstd image and reads it back from the
// registry: every layer is a native EROFS blob whose digest is its diff
// ID in the config (as containerd's converter records it), the history is
// the source's, a second conversion gives the same image digest, and (as
// root) the app layer mounts with its file and its whiteout.
func TestToErofs(t *testing.T) {
	testkit.RequireErofs(t)
	ctx := context.Background()
	host := testimage.Registry(t)
	src := host + "/kiln-convert/erofs:v1"
	testimage.Push(t, src, erofsSource(t))

	var digests []v1.Hash
	for run := 0; run < 2; run++ {
		in, err := openV1(t, ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ToErofs(ctx, in, Options{TempDir: t.TempDir()}, erofs.DefaultCompression)
		if err != nil {
			t.Fatal(err)
		}
		dst := host + "/kiln-convert/erofs:v1" + layers.ErofsTagSuffix
		dg, err := layers.Write(ctx, res.Image, testkit.Ref(t, dst))
		res.Close()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, dg)
		if res.Layers[0].ToSize >= res.Layers[0].Uncompressed || res.Layers[0].Uncompressed < 1<<20 {
			t.Errorf("layer 0: %d-byte tar became %d bytes of EROFS", res.Layers[0].Uncompressed, res.Layers[0].ToSize)
		}
	}
	if digests[0] != digests[1] {
		t.Fatalf("two conversions of one image: %s and %s", digests[0], digests[1])
	}

	ref, _ := name.ParseReference(host + "/kiln-convert/erofs:v1-erofs")
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	cfg, _ := img.ConfigFile()
	if len(m.Layers) != 2 || len(cfg.RootFS.DiffIDs) != 2 {
		t.Fatalf("%d layers, %d diff IDs", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	if len(cfg.History) != 2 || cfg.History[1].CreatedBy != "app" {
		t.Errorf("history %+v, want the source's", cfg.History)
	}
	rls, _ := img.Layers()
	for i, d := range m.Layers {
		if d.MediaType != layers.ErofsMediaType {
			t.Errorf("layer %d: media type %s, want %s", i, d.MediaType, layers.ErofsMediaType)
		}
		if cfg.RootFS.DiffIDs[i] != d.Digest {
			t.Errorf("layer %d: diff ID %s, blob %s: an EROFS blob is its own diff ID", i, cfg.RootFS.DiffIDs[i], d.Digest)
		}
		rc, err := rls[i].Compressed() // ggcr verifies the digest at EOF
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		if i == 1 {
			mountAndCheckApp(t, b)
		}
	}
}

// mountAndCheckApp mounts the app layer (root only) and finds its file
// and the whiteout of the base layer's etc/old.conf.
func mountAndCheckApp(t *testing.T, image []byte) {
	dir := t.TempDir()
	file, mnt := filepath.Join(dir, "l.erofs"), filepath.Join(dir, "mnt")
	os.WriteFile(file, image, 0o644)
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "ro,loop", file, mnt).CombinedOutput(); err != nil {
		t.Logf("not mounted (%v: %s)", err, strings.TrimSpace(string(out)))
		return
	}
	defer exec.Command("umount", mnt).Run()
	if b, err := os.ReadFile(filepath.Join(mnt, "app/main.py")); err != nil || string(b) != "print('hi')\n" {
		t.Errorf("app/main.py: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(mnt, "etc/old.conf")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("etc/old.conf is not a whiteout device: %v, %v", fi, err)
	}
}

// TestToErofsChecksTheDiffID: a config whose diff ID is not the tar's is
// refused, naming the blob, as ToZstd refuses it.
func TestToErofsChecksTheDiffID(t *testing.T) {
	testkit.RequireErofs(t)
	ctx := context.Background()
	img := erofsSource(t)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[1] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	bad, err := mutateConfig(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ToErofs(ctx, bad, Options{TempDir: t.TempDir()}, erofs.LZ4)
	if !errors.Is(err, registry.ErrDigestMismatch) || !strings.Contains(err.Error(), "layer 1") {
		t.Fatalf("a lying diff ID: err = %v", err)
	}
}
