package slim

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// splitSource is a small image with every group: CUDA libraries of 3000
// bytes each, one of 9000 (larger than the caps below), a hardlink between
// two of them, Python packages, and the app, whose main.py is app.
func splitSource(t *testing.T, app string) []testimage.Entry {
	t.Helper()
	lib := "usr/local/cuda/lib64/"
	site := "usr/local/lib/python3.11/dist-packages/"
	return []testimage.Entry{
		testimage.Dir("usr"), testimage.Dir("usr/bin"), testimage.Sized("usr/bin/bash", 1200),
		testimage.Dir("usr/local"), testimage.Dir("usr/local/cuda"), testimage.Dir("usr/local/cuda/lib64"),
		testimage.Sized(lib+"libcublas.so.12", 3000), testimage.Sized(lib+"libcudnn.so.9", 3000),
		{Name: lib + "libcudnn_hard.so.9", Type: tar.TypeLink, Linkname: lib + "libcudnn.so.9"},
		testimage.Sized(lib+"libcufft.so.11", 3000), testimage.Sized(lib+"libcurand.so.10", 9000),
		testimage.Sized(lib+"libcusparse.so.12", 3000), testimage.Symlink(lib+"libcusparse.so", "libcusparse.so.12"),
		testimage.Dir("usr/local/lib"), testimage.Dir("usr/local/lib/python3.11"), testimage.Dir(site),
		testimage.Dir(site + "numpy"), testimage.Sized(site+"numpy/core.so", 2500), testimage.Sized(site+"numpy/linalg.so", 2500),
		testimage.Dir(site + "nvidia"), testimage.Dir(site + "nvidia/nccl"), testimage.Sized(site+"nvidia/nccl/libnccl.so.2", 3000),
		testimage.Dir("app"), testimage.File("app/main.py", []byte(app)),
	}
}

func TestMaxLayerSizeSplitsGroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cap   int64
		names []string
	}{
		{"no cap", 0, []string{"os", "cuda", "python", "app"}},
		{"cap above every group", 1 << 20, []string{"os", "cuda", "python", "app"}},
		// cuda in path order: cublas 3584 | cudnn 3584 (+ its hardlink) |
		// cufft 3584 | curand 9728 alone | cusparse 3584 + link + nccl 3584.
		{"cap 8 KiB", 8 << 10, []string{"os", "cuda-1", "cuda-2", "cuda-3", "cuda-4", "python", "app"}},
		{"cap 4 KiB", 4 << 10, []string{"os", "cuda-1", "cuda-2", "cuda-3", "cuda-4", "cuda-5", "cuda-6", "python-1", "python-2", "app"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, splitSource(t, "print(1)"), "gzip")))
			res := rewrite(t, src, Options{Policy: runtimePolicy(t), MaxLayerSize: tc.cap})
			var names []string
			for _, l := range res.Report.Layers {
				names = append(names, l.Name)
				// Directories are not counted (a few blocks), files are.
				if tc.cap > 0 && l.Bytes > tc.cap && l.Files > 1 {
					t.Errorf("layer %s: %d bytes over the %d cap with %d files", l.Name, l.Bytes, tc.cap, l.Files)
				}
			}
			if strings.Join(names, " ") != strings.Join(tc.names, " ") {
				t.Fatalf("layers %v, want %v", names, tc.names)
			}
			out, err := res.Image(nil)
			if err != nil {
				t.Fatal(err)
			}
			fs, _ := flatten(t, out)
			// The same filesystem as without a cap, directories before
			// what they hold, the hardlink kept (its target is in its layer).
			base := rewrite(t, src, Options{Policy: runtimePolicy(t)})
			bimg, _ := base.Image(nil)
			want, _ := flatten(t, bimg)
			if len(fs) != len(want) {
				t.Errorf("%d entries, %d without a cap", len(fs), len(want))
			}
			for p, e := range want {
				g, ok := fs[p]
				if !ok || g.typ != e.typ || g.link != e.link || g.body != e.body {
					t.Errorf("%s: %+v, want %+v", p, g.typ, e.typ)
				}
				for d := p; strings.Contains(d, "/"); {
					d = d[:strings.LastIndex(d, "/")]
					if fs[d].layer > g.layer {
						t.Errorf("%s is in layer %d, its directory %s in layer %d", p, g.layer, d, fs[d].layer)
					}
				}
			}
			if h := fs["usr/local/cuda/lib64/libcudnn_hard.so.9"]; h.typ != tar.TypeLink {
				t.Errorf("hardlink written as %c, want a link", h.typ)
			}
		})
	}
}

// An app-only change re-pushes only the app layer of a split image, and
// the same input gives the same digest.
func TestMaxLayerSizeStable(t *testing.T) {
	srcs := map[string]*layers.Image{}
	digests := func(app string) ([]string, string) {
		src := srcs[app]
		if src == nil {
			src = openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, splitSource(t, app), "gzip")))
			srcs[app] = src
		}
		res := rewrite(t, src, Options{Policy: runtimePolicy(t), MaxLayerSize: 4 << 10})
		img, err := res.Image(nil)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		var ds []string
		for _, l := range res.Report.Layers {
			ds = append(ds, l.Name+" "+l.Digest)
		}
		return ds, d.String()
	}
	a, da := digests("print(1)")
	a2, da2 := digests("print(1)")
	if da != da2 || strings.Join(a, ",") != strings.Join(a2, ",") {
		t.Fatalf("same input, two digests: %s %s", da, da2)
	}
	b, _ := digests("print(2)")
	if len(a) != len(b) {
		t.Fatalf("app change changed the layer count: %d → %d", len(a), len(b))
	}
	for i := range a {
		changed := a[i] != b[i]
		if app := strings.HasPrefix(a[i], "app "); changed != app {
			t.Errorf("layer %s changed=%v after an app-only change", a[i], changed)
		}
	}
}

// A cap that would stack more layers than runtimes take is refused.
func TestMaxLayerSizeTooSmall(t *testing.T) {
	var es []testimage.Entry
	for i := range MaxOutputLayers + 1 {
		es = append(es, testimage.Sized(fmt.Sprintf("app/f%03d", i), 600))
	}
	src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, es, "gzip")))
	_, err := Rewrite(context.Background(), src, Options{Policy: runtimePolicy(t), WorkDir: t.TempDir(), MaxLayerSize: 1024})
	if err == nil || !strings.Contains(err.Error(), "raise it") {
		t.Fatalf("err %v, want a refusal", err)
	}
}

// Gzip and zstd blobs of one result hold the same tars (same diff IDs,
// same config), the gzip ones deterministic: a second run gives the same
// bytes; each image's layers decode to their diff IDs.
func TestCompressionBoth(t *testing.T) {
	src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, splitSource(t, "print(1)"), "gzip")))
	var digests [2]map[layers.Compression]string
	for i := range digests {
		res := rewrite(t, src, Options{Policy: runtimePolicy(t), MaxLayerSize: 8 << 10, Compression: []layers.Compression{layers.Gzip, layers.Zstd}})
		digests[i] = map[layers.Compression]string{}
		var cfgs []string
		for _, c := range []layers.Compression{layers.Gzip, layers.Zstd} {
			img, err := res.ImageFor(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := img.Digest()
			cn, _ := img.ConfigName()
			digests[i][c] = d.String()
			cfgs = append(cfgs, cn.String())
			m, _ := img.Manifest()
			for _, l := range m.Layers {
				want := types.OCILayerZStd
				if c == layers.Gzip {
					want = types.OCILayer
				}
				if l.MediaType != want {
					t.Errorf("%s image: layer media type %s", c, l.MediaType)
				}
			}
			ls, _ := img.Layers()
			for j, l := range ls {
				checkBlob(t, l)
				if mt, _ := l.MediaType(); mt != m.Layers[j].MediaType {
					t.Errorf("%s layer %d: %s", c, j, mt)
				}
			}
		}
		if cfgs[0] != cfgs[1] {
			t.Errorf("gzip and zstd images have different configs: %v", cfgs)
		}
		if d, _ := res.Image(nil); d == nil {
			t.Fatal("no image")
		}
		if got := res.Report.Layers[0].Blobs; len(got) != 2 || got[0].Compression != "gzip" || res.Report.Layers[0].Digest != got[0].Digest {
			t.Errorf("report blobs %+v", got)
		}
	}
	if digests[0][layers.Gzip] != digests[1][layers.Gzip] || digests[0][layers.Zstd] != digests[1][layers.Zstd] {
		t.Errorf("two runs: %v vs %v", digests[0], digests[1])
	}
	if digests[0][layers.Gzip] == digests[0][layers.Zstd] {
		t.Error("gzip and zstd images have one digest")
	}
	res := rewrite(t, src, Options{Policy: runtimePolicy(t), Compression: []layers.Compression{layers.Gzip}})
	if _, err := res.ImageFor(layers.Zstd, nil); err == nil {
		t.Error("ImageFor(zstd) of a gzip-only result")
	}
}

// checkBlob reads l's blob and its tar: they must hash to its digest and
// diff ID, and the blob must be the size it says.
func checkBlob(t *testing.T, l v1.Layer) {
	t.Helper()
	for _, tc := range []struct {
		open func() (io.ReadCloser, error)
		want func() (v1.Hash, error)
	}{{l.Compressed, l.Digest}, {l.Uncompressed, l.DiffID}} {
		rc, err := tc.open()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := v1.SHA256(rc)
		rc.Close()
		want, _ := tc.want()
		if err != nil || got != want {
			t.Errorf("content hashes to %s (%v), want %s", got, err, want)
		}
	}
	rc, _ := l.Compressed()
	_, n, _ := v1.SHA256(rc)
	rc.Close()
	if size, _ := l.Size(); n != size {
		t.Errorf("blob is %d bytes, Size says %d", n, size)
	}
}
