package weights

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

func twinOf(t *testing.T, files []testFile) (v1.Image, *Manifest) {
	t.Helper()
	return twinIn(t, filepath.Join(t.TempDir(), "layout"), files)
}

// twinIn publishes files to the layout lay (the volume manifest names it
// as its repository) and builds their twin.
func twinIn(t *testing.T, lay string, files []testFile) (v1.Image, *Manifest) {
	t.Helper()
	c := collect(t, files, WithLargeFileThreshold(1<<20))
	m, dg, err := c.Publish(context.Background(), testkit.Ref(t, "oci:"+lay+":w"), "", "sha256:"+strings.Repeat("3", 64))
	if err != nil {
		t.Fatal(err)
	}
	// Named as a registry artifact would be (the layout path differs per test).
	img, err := c.Twin(m, "reg.example/kiln/w@"+dg.String(), v1.Platform{OS: "linux", Architecture: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	return img, m
}

// The twin is a kiln volume once its layers are applied (as a runtime
// mounting it as an image volume does): every file with its bytes and
// mode, the manifest and the marker, so weights.Verify passes on it.
func TestTwinIsTheVolume(t *testing.T) {
	files := []testFile{
		{"/models/llm/model-00001.safetensors", body("a", 3<<20), 0o644},
		{"/models/llm/model-00002.safetensors", body("b", 2<<20+7), 0o600},
		{"/models/llm/config.json", []byte(`{"x":1}`), 0o644},
		{"/models/llm/tokenizer/vocab.txt", body("v", 1000), 0o644},
	}
	img, m := twinOf(t, files)
	mt, _ := img.MediaType()
	cf, _ := img.ConfigFile()
	if mt != types.OCIManifestSchema1 || cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.Labels[LabelTwinOf] == "" || cf.Config.Labels[layers.LabelWeightsSetDigest] != m.SetDigest {
		t.Fatalf("twin: media type %s, config %+v", mt, cf.Config.Labels)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != len(files)+1 {
		t.Fatalf("%d layers, want one per file and the manifest's", len(ls))
	}
	dir := t.TempDir()
	for i, l := range ls {
		lmt, _ := l.MediaType()
		dg, _ := l.Digest()
		diff, _ := l.DiffID()
		if lmt != types.OCIUncompressedLayer || dg != diff {
			t.Errorf("layer %d: %s, digest %s diff ID %s: want uncompressed", i, lmt, dg, diff)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		// The digest is what the bytes hash to.
		vr, _ := registry.NewVerifyReader(rc, dg, -1)
		tr := tar.NewReader(vr)
		n := 0
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
			if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, ".wh.") || strings.HasPrefix(h.Name, "/") || h.Uid != 0 || !h.ModTime.Equal(h.ModTime.Truncate(0)) || h.ModTime.Unix() != 0 {
				t.Errorf("layer %d: entry %+v: want a plain file at a relative path, root-owned, at the epoch", i, h)
			}
			p := filepath.Join(dir, h.Name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		if err := vr.Drain(); err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		if want := 1; i < len(files) && n != want {
			t.Errorf("layer %d holds %d files, want one", i, n)
		}
		rc.Close()
	}
	rep, err := Verify(context.Background(), dir, nil, 2)
	if err != nil || !rep.OK {
		t.Fatalf("the applied twin does not verify as the volume: %+v %v", rep, err)
	}
	// Laid out as a pulled volume: the model files alone in model/ (what
	// the image volume's subPath mounts), the bookkeeping beside it.
	if got, want := topLevel(t, dir), []string{LayoutMarker, ManifestFile, ReadyMarker, ModelDir}; !slices.Equal(got, want) {
		t.Errorf("the twin's top level: %v, want %v", got, want)
	}
	inModel := tree(t, filepath.Join(dir, ModelDir))
	for _, f := range m.Files {
		delete(inModel, filepath.FromSlash(f.Path))
	}
	if len(inModel) != 0 {
		t.Errorf("the twin's model directory holds more than the model files: %v", inModel)
	}
}

// A file's layer depends on that file only: the same weights in another
// volume (another model version, other neighbours) are the same layer.
func TestTwinLayerIsPerFile(t *testing.T) {
	shared := testFile{"/models/llm/model-00001.safetensors", body("same", 2<<20), 0o644}
	lay := filepath.Join(t.TempDir(), "layout")
	a, _ := twinIn(t, lay, []testFile{shared, {"/models/llm/config.json", []byte(`{"v":1}`), 0o644}})
	b, _ := twinOf(t, []testFile{shared, {"/models/llm/config.json", []byte(`{"v":2}`), 0o644}, {"/models/llm/extra.bin", body("e", 1<<20), 0o644}})
	digests := func(img v1.Image) map[v1.Hash]bool {
		ls, _ := img.Layers()
		out := map[v1.Hash]bool{}
		for _, l := range ls {
			d, _ := l.Digest()
			out[d] = true
		}
		return out
	}
	da, db := digests(a), digests(b)
	common := 0
	for d := range da {
		if db[d] {
			common++
		}
	}
	if common != 1 {
		t.Fatalf("%d layers in common, want exactly the shared file's", common)
	}
	// Same input, same twin.
	a2, _ := twinIn(t, lay, []testFile{shared, {"/models/llm/config.json", []byte(`{"v":1}`), 0o644}})
	d1, _ := a.Digest()
	d2, _ := a2.Digest()
	if d1 != d2 {
		t.Fatalf("the same volume gave twins %s and %s", d1, d2)
	}
}
