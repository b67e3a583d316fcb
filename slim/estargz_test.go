package slim

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// TestEStargzStartupFirst writes the eStargz encoding of a slim image with
// a startup set and reads it back with the snapshotter's own library: the
// table of contents verifies against the descriptor's annotation, the
// startup files come before the prefetch landmark and everything else
// after it, a hard link still follows its target, and the files are the
// zstd image's.
func TestEStargzStartupFirst(t *testing.T) {
	src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, splitSource(t, "print(1)"), "gzip")))
	lib := "usr/local/cuda/lib64/"
	startup := []string{"/" + lib + "libcublas.so.12", "/" + lib + "libcudnn_hard.so.9", "/app/main.py", "/no/such/file"}
	res := rewrite(t, src, Options{Policy: runtimePolicy(t), MaxLayerSize: 8 << 10})
	if err := res.AddEStargz(context.Background(), startup); err != nil {
		t.Fatal(err)
	}
	var placed int
	for _, l := range res.Report.Layers {
		if b := l.Blobs[len(l.Blobs)-1]; b.Compression != "estargz" || b.DiffID == "" {
			t.Errorf("report layer %s: last blob %+v", l.Name, b)
		} else {
			placed += b.StartupFiles
		}
	}
	if placed != 2 || res.Report.StartupInImage != 2 {
		t.Errorf("report: %d startup files placed, want 2 (libcublas, main.py)", placed)
	}
	if got := res.Compressions(); !slices.Equal(got, []layers.Compression{layers.Zstd, layers.EStargz}) {
		t.Fatalf("compressions %v", got)
	}
	esImg, err := res.ImageFor(layers.EStargz, nil)
	if err != nil {
		t.Fatal(err)
	}
	zImg, _ := res.ImageFor(layers.Zstd, nil)
	// Layer by layer, the same entries (flatten would refuse the image:
	// every eStargz layer has its own table of contents at one path).
	zls, _ := zImg.Layers()
	els, _ := esImg.Layers()
	if len(zls) != len(els) || len(zls) < 2 {
		t.Fatalf("%d zstd layers, %d eStargz layers", len(zls), len(els))
	}
	for i := range zls {
		z, e := tarEntries(t, zls[i]), tarEntries(t, els[i])
		for _, n := range []string{estargz.TOCTarName, estargz.PrefetchLandmark, estargz.NoPrefetchLandmark} {
			delete(e, n)
		}
		if len(z) != len(e) {
			t.Errorf("layer %d: %d entries in zstd, %d in eStargz", i, len(z), len(e))
		}
		for n, ze := range z {
			if ee, ok := e[n]; !ok || ee != ze {
				t.Errorf("layer %d %s: eStargz %+v, zstd %+v", i, n, ee, ze)
			}
		}
	}
	m, _ := esImg.Manifest()
	ls, _ := esImg.Layers()
	prefetched := map[string]bool{}
	for i, l := range ls {
		checkBlob(t, l)
		desc := m.Layers[i]
		if desc.MediaType != types.OCILayer {
			t.Errorf("layer %d: media type %s", i, desc.MediaType)
		}
		names := esgzNames(t, l, desc.Annotations[layers.AnnotationTOCDigest])
		n, _ := l.(interface{ UncompressedSize() (int64, error) }).UncompressedSize()
		if desc.Annotations[layers.AnnotationUncompressedSize] == "" || desc.Annotations[layers.AnnotationUncompressedSize] != itoa(n) {
			t.Errorf("layer %d: uncompressed-size annotation %q, tar %d", i, desc.Annotations[layers.AnnotationUncompressedSize], n)
		}
		mark := slices.IndexFunc(names, func(n string) bool { return n == estargz.PrefetchLandmark || n == estargz.NoPrefetchLandmark })
		if mark < 0 {
			t.Fatalf("layer %d: no landmark in %v", i, names)
		}
		for _, n := range names[:mark] {
			if strings.HasSuffix(n, "/") {
				continue // directories above a startup file
			}
			prefetched[n] = true
		}
		files := 0
		for _, n := range names[:mark] {
			if !strings.HasSuffix(n, "/") {
				files++
			}
		}
		if (files > 0) != (names[mark] == estargz.PrefetchLandmark) {
			t.Errorf("layer %d: %s after %d startup files", i, names[mark], files)
		}
		if h, tgt := slices.Index(names, lib+"libcudnn_hard.so.9"), slices.Index(names, lib+"libcudnn.so.9"); h >= 0 && (tgt < 0 || h < tgt) {
			t.Errorf("layer %d: the hard link at %d precedes its target at %d: %v", i, h, tgt, names)
		}
	}
	// libcudnn_hard.so.9 is a startup path, but its target is not: it
	// waits for the second pass.
	want := map[string]bool{lib + "libcublas.so.12": true, "app/main.py": true}
	if !mapsEqual(prefetched, want) {
		t.Errorf("before the landmarks: %v, want %v", prefetched, want)
	}

	// The same input gives the same bytes, whatever the startup list's order.
	res2 := rewrite(t, src, Options{Policy: runtimePolicy(t), MaxLayerSize: 8 << 10})
	rev := slices.Clone(startup)
	slices.Reverse(rev)
	if err := res2.AddEStargz(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	img2, _ := res2.ImageFor(layers.EStargz, nil)
	d1, _ := esImg.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("two runs: %s, %s", d1, d2)
	}
	c1, _ := esImg.ConfigName()
	c2, _ := zImg.ConfigName()
	if c1 == c2 {
		t.Error("the eStargz image has the zstd image's diff IDs")
	}
	if err := res2.AddEStargz(context.Background(), nil); err == nil {
		t.Error("AddEStargz twice")
	}
}

// esgzNames opens l's blob with the estargz library, verifies its table of
// contents against toc, and returns the tar's entry names in order.
func esgzNames(t *testing.T, l v1.Layer, toc string) []string {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	f := rc.(*os.File)
	defer f.Close()
	fi, _ := f.Stat()
	sr := io.NewSectionReader(f, 0, fi.Size())
	r, err := estargz.Open(sr)
	if err != nil {
		t.Fatalf("estargz.Open: %v", err)
	}
	if got := r.TOCDigest().String(); got != toc {
		t.Errorf("TOC digest %s, annotation %q", got, toc)
	}
	if _, err := r.VerifyTOC(r.TOCDigest()); err != nil {
		t.Errorf("VerifyTOC: %v", err)
	}
	ur, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer ur.Close()
	var names []string
	tr := tar.NewReader(ur)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := layers.TarName(h.Name)
		if h.Typeflag == tar.TypeDir {
			n += "/"
		}
		names = append(names, n)
	}
	return names
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// tarEntries reads a layer's tar: name → type, link and body.
func tarEntries(t *testing.T, l v1.Layer) map[string]fsEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]fsEntry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[layers.TarName(h.Name)] = fsEntry{typ: h.Typeflag, link: h.Linkname, body: string(b)}
	}
}
