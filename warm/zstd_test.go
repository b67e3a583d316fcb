package warm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

func TestResolveTakesZstdVariant(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	li, err := testkit.OpenImage(ctx, f.Ref, layers.WithPlatform(warmtest.AMD64))
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	in, err := li.V1(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := convert.ToZstd(ctx, in, convert.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if _, err := layers.Write(ctx, res.Image, testkit.Ref(t, f.Ref+layers.ZstdTagSuffix)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		o        warm.ResolveOptions
		wantZstd bool
		wantErr  string
	}{
		{"auto takes zstd", warm.ResolveOptions{}, true, ""},
		{"gzip asked", warm.ResolveOptions{Compression: warm.CompressionGzip}, false, ""},
		{"target cannot run zstd", warm.ResolveOptions{NoZstd: "Docker 20.10 loads zstd layers only from 23.0"}, false, ""},
		{"zstd asked, target cannot", warm.ResolveOptions{Compression: warm.CompressionZstd, NoZstd: "Docker 20.10: needs 23.0"}, false, "23.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Platform, tc.o.Blobs = warmtest.AMD64, src
			s, err := warm.Resolve(ctx, testkit.Refs(t, f.Ref), tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			img := s.Images[0]
			if img.Zstd != tc.wantZstd || img.Name != f.Ref {
				t.Fatalf("image %+v: zstd=%v want %v", img, img.Zstd, tc.wantZstd)
			}
			if tc.wantZstd && img.Source != f.Ref+layers.ZstdTagSuffix {
				t.Errorf("source %s", img.Source)
			}
			for _, b := range s.Blobs {
				if b.Kind == warm.KindLayer && warm.IsZstd(b.MediaType) != tc.wantZstd {
					t.Errorf("layer %s media type %s", b.Digest, b.MediaType)
				}
			}
		})
	}
	// The warm of the zstd variant lands under the original name.
	s, err := warm.Resolve(ctx, testkit.Refs(t, f.Ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: src})
	if err != nil {
		t.Fatal(err)
	}
	tgt := openTestTarget(t, "oci")
	rep, err := warm.Warm(ctx, s, tgt, warm.Options{})
	if err != nil || !rep.Ready || rep.Images[0].Source != f.Ref+layers.ZstdTagSuffix {
		t.Fatalf("ready=%v err=%v images=%+v", rep.Ready, err, rep.Images)
	}
}

// D1: an image at REPO:TAG-zstd is used for REPO:TAG only when it is the
// same image in zstd. Anyone who can push a tag could otherwise replace
// what every host installs (under --verify-key, with any other image the
// same key signed: a rollback).
func TestResolveRefusesSubstitutedZstdVariant(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	// Another image, zstd-compressed, at the -zstd tag.
	other := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/evil", []byte("not your image"))}, "zstd"))
	testimage.Push(t, f.Ref+layers.ZstdTagSuffix, other)

	s, err := warm.Resolve(ctx, testkit.Refs(t, f.Ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: src})
	if err != nil {
		t.Fatal(err)
	}
	img := s.Images[0]
	if img.Source != img.Name || img.Zstd {
		t.Fatalf("substituted: read %s (zstd=%v) for %s", img.Source, img.Zstd, img.Name)
	}
	wantCfg, _ := f.Img.ConfigName()
	if img.Config.Digest.String() != wantCfg.String() {
		t.Fatalf("config %s, want the named image's %s", img.Config.Digest, wantCfg)
	}
	if !strings.Contains(img.Note, "not the zstd form") {
		t.Fatalf("no word of why: note %q", img.Note)
	}
	for _, b := range s.Blobs {
		if b.Kind == warm.KindLayer && warm.IsZstd(b.MediaType) {
			t.Fatalf("a layer of the other image is in the set: %s", b.Digest)
		}
	}
	if rep := warm.NewReport(s); rep.Images[0].Note == "" || rep.Images[0].Source != "" {
		t.Fatalf("report: %+v", rep.Images[0])
	}
	// Asked for zstd: refused, saying why.
	_, err = warm.Resolve(ctx, testkit.Refs(t, f.Ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: src, Compression: warm.CompressionZstd})
	if err == nil || !strings.Contains(err.Error(), "not the zstd form") {
		t.Fatalf("--compression zstd with a substituted variant: %v", err)
	}

	// The same layers' content, zstd, but one layer dropped: refused too.
	li, err := testkit.OpenImage(ctx, f.Ref, layers.WithPlatform(warmtest.AMD64))
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	in, _ := li.V1(ctx)
	res, err := convert.ToZstd(ctx, in, convert.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	zl, _ := res.Image.Layers()
	short := testimage.Image(t, testimage.Config{}, zl[0])
	testimage.Push(t, f.Ref+layers.ZstdTagSuffix, short)
	s, err = warm.Resolve(ctx, testkit.Refs(t, f.Ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: src})
	if err != nil {
		t.Fatal(err)
	}
	if s.Images[0].Zstd || s.Images[0].Note == "" {
		t.Fatalf("a variant with a layer missing was taken: %+v", s.Images[0])
	}
}

// D1 inside an index: several manifests for one platform stand in for
// each other only when they are the same image.
func TestResolveIndexPicksZstdOnlyWhenSameImage(t *testing.T) {
	ctx := context.Background()
	reg := warmtest.NewRegistry(t)
	src := warmtest.FastSource()
	gz := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/app", []byte("app v2"))}, "gzip"))
	evil := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/app", []byte("app v1, vulnerable"))}, "zstd"))
	ref := reg.Host + "/kiln-warm/idx:v2"
	testimage.PushIndex(t, ref, testimage.Index(t, gz, evil))
	s, err := warm.Resolve(ctx, testkit.Refs(t, ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: src})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := gz.Digest()
	if got := s.Images[0].Manifest.Digest.String(); got != want.String() || s.Images[0].Note == "" {
		t.Fatalf("picked %s (note %q), want the first manifest %s", got, s.Images[0].Note, want)
	}
}
