package convert

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

func TestToZstdRoundTrip(t *testing.T) {
	ctx := context.Background()
	host := testimage.Registry(t)
	src := host + "/kiln-convert/app:v1"
	img := testimage.Image(t, testimage.Config{CreatedBy: []string{"base", "app"}},
		testimage.Layer(t, []testimage.Entry{testimage.Dir("usr"), testimage.Sized("usr/lib/libbig.so", 2<<20)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("print('hi')\n"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/plain", []byte("x"))}, "none"))
	testimage.Push(t, src, img)
	in, err := openV1(t, ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ToZstd(ctx, in, Options{Level: 3, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	dst := host + "/kiln-convert/app:v1-zstd"
	if _, err := layers.Write(ctx, res.Image, testkit.Ref(t, dst)); err != nil {
		t.Fatal(err)
	}
	if len(res.Layers) != 3 {
		t.Fatalf("%d layer reports", len(res.Layers))
	}
	for _, l := range res.Layers {
		if l.ToSize <= 0 || l.Ratio <= 0 || l.Uncompressed <= 0 || l.From == l.To {
			t.Errorf("layer report %+v", l)
		}
	}
	if r := res.Layers[0].Ratio; r >= 1 {
		t.Errorf("a compressible 2 MiB layer did not shrink: ratio %.3f", r)
	}
	// Read it back through kiln's own verified reader: every blob digest
	// and every diff ID checks, and the files are the same.
	out, err := testkit.OpenImage(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	wantCfg, _ := img.ConfigFile()
	for i, l := range out.Layers {
		if l.MediaType != types.OCILayerZStd {
			t.Errorf("layer %d media type %s", i, l.MediaType)
		}
		if l.DiffID != wantCfg.RootFS.DiffIDs[i] {
			t.Errorf("layer %d diff ID changed: %s != %s", i, l.DiffID, wantCfg.RootFS.DiffIDs[i])
		}
		var names []string
		if _, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, _ io.Reader) error { names = append(names, e.Path); return nil }); err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		if len(names) == 0 {
			t.Errorf("layer %d is empty", i)
		}
	}
	if len(out.Config.History) != 3 || !strings.Contains(out.Config.History[1].CreatedBy, "app") {
		t.Errorf("history not kept: %+v", out.Config.History)
	}
	mt, _ := res.Image.MediaType()
	if mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	_ = v1.Hash{}
}

func TestToZstdRejectsLyingDiffID(t *testing.T) {
	ctx := context.Background()
	good := testimage.Layer(t, []testimage.Entry{testimage.File("a", []byte("a"))}, "gzip")
	img := testimage.Image(t, testimage.Config{}, good)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	bad, err := mutateConfig(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ToZstd(ctx, bad, Options{TempDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "diff_ids") || !strings.Contains(err.Error(), "layer 0") {
		t.Fatalf("lying diff ID: %v", err)
	}
}
