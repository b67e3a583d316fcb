package convert

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// TestToEStargz converts a pushed gzip image with a startup set and reads
// the result back from the registry: every digest and diff ID verifies
// through kiln's reader, each descriptor's TOC digest is the one the
// snapshotter's library computes, the startup file precedes the prefetch
// landmark in its layer, and the other layer says no prefetch.
func TestToEStargz(t *testing.T) {
	ctx := context.Background()
	host := testimage.Registry(t)
	src := host + "/kiln-convert/esgz:v1"
	img := testimage.Image(t, testimage.Config{CreatedBy: []string{"base", "app"}},
		testimage.Layer(t, []testimage.Entry{testimage.Dir("usr"), testimage.Dir("usr/lib"), testimage.Sized("usr/lib/libbig.so", 1<<20)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.Dir("app"), testimage.File("app/util.py", []byte("x = 1\n")), testimage.File("app/main.py", []byte("print('hi')\n"))}, "gzip"))
	testimage.Push(t, src, img)
	in, err := openV1(t, ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ToEStargz(ctx, in, Options{Level: 3, TempDir: t.TempDir()}, []string{"/app/main.py"})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	dst := host + "/kiln-convert/esgz:v1-estargz"
	if _, err := layers.Write(ctx, res.Image, testkit.Ref(t, dst)); err != nil {
		t.Fatal(err)
	}
	if res.Layers[0].StartupFiles != 0 || res.Layers[1].StartupFiles != 1 {
		t.Errorf("startup files per layer: %d, %d", res.Layers[0].StartupFiles, res.Layers[1].StartupFiles)
	}
	out, err := testkit.OpenImage(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ref, _ := name.ParseReference(dst)
	rimg, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := rimg.Manifest()
	rls, _ := rimg.Layers()
	wantMark := []string{estargz.NoPrefetchLandmark, estargz.PrefetchLandmark}
	for i, l := range rls {
		if m.Layers[i].MediaType != types.OCILayer {
			t.Errorf("layer %d: %s", i, m.Layers[i].MediaType)
		}
		// The TOC digest, as the snapshotter's library reads it.
		rc, _ := l.Compressed()
		f, _ := os.CreateTemp(t.TempDir(), "blob")
		io.Copy(f, rc)
		rc.Close()
		fi, _ := f.Stat()
		er, err := estargz.Open(io.NewSectionReader(f, 0, fi.Size()))
		if err != nil {
			t.Fatalf("layer %d: estargz.Open: %v", i, err)
		}
		if got := er.TOCDigest().String(); got != m.Layers[i].Annotations[layers.AnnotationTOCDigest] {
			t.Errorf("layer %d: TOC %s, annotation %q", i, got, m.Layers[i].Annotations[layers.AnnotationTOCDigest])
		}
		f.Close()
		// Verified by kiln's reader, which checks the blob digest and
		// the diff ID as it streams.
		var names []string
		if _, err := out.Layers[i].Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, r io.Reader) error {
			names = append(names, layers.TarName(e.Header.Name))
			return nil
		}); err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		mark := -1
		for j, n := range names {
			if n == wantMark[i] {
				mark = j
			}
		}
		if mark < 0 {
			t.Fatalf("layer %d: no %s in %v", i, wantMark[i], names)
		}
		if i == 1 && (mark != 2 || names[0] != "app" || names[1] != "app/main.py") {
			t.Errorf("app layer order %v: want app, app/main.py, then the landmark", names)
		}
	}
}
