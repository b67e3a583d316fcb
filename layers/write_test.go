package layers_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// TestWriteRoundTrip writes one image to each kind of destination and reads
// it back through Open: the manifest digest and every file must survive.
func TestWriteRoundTrip(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("alpha"))}, "zstd"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/b", []byte("beta"))}, "gzip"))
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg := testimage.Registry(t)
	for _, dest := range []string{
		reg + "/kiln/write:v1",
		"oci:" + filepath.Join(dir, "layout") + ":v1",
		"docker-archive:" + filepath.Join(dir, "img.tar") + ":kiln/write:v1",
	} {
		t.Run(dest[:3], func(t *testing.T) {
			got, err := layers.Write(ctx, img, testkit.Ref(t, dest))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Write returned %s, want %s", got, want)
			}
			back, err := testkit.OpenImage(ctx, dest)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			n := 0
			for _, l := range back.Layers {
				if _, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
					n++
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if n != 2 {
				t.Fatalf("read back %d files, want 2", n)
			}
		})
	}
	// A second image under the same layout tag replaces the first.
	other := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/c", []byte("gamma"))}, "gzip"))
	lay := "oci:" + filepath.Join(dir, "layout") + ":v1"
	if _, err := layers.Write(ctx, other, testkit.Ref(t, lay)); err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "layout", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	od, _ := other.Digest()
	if !strings.Contains(string(idx), od.String()) || strings.Contains(string(idx), want.String()) {
		t.Fatalf("layout index after replace:\n%s", idx)
	}
	// No temporary archive is left beside the output.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".tmp" {
			t.Fatalf("leftover %s", e.Name())
		}
	}
}

// TestWriteDockerArchivePlainLayers: a docker archive's layers are plain
// tar whatever the image's blobs are (Docker 20.10's docker load refuses
// zstd with "archive/tar: invalid tar header"), each hashing to its diff ID
// in the config, and the same image gives the same archive bytes.
func TestWriteDockerArchivePlainLayers(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("alpha"))}, "zstd"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/b", []byte("beta"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("alpha"))}, "zstd"))
	dir := t.TempDir()
	var sums [2][]byte
	for i := range sums {
		file := filepath.Join(dir, fmt.Sprintf("img%d.tar", i))
		if _, err := layers.Write(ctx, img, testkit.Ref(t, "docker-archive:"+file+":kiln/plain:v1")); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = b
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Fatal("the same image gave two different archives")
	}
	members := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(sums[0]))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		members[h.Name] = b
	}
	var man []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(members["manifest.json"], &man); err != nil || len(man) != 1 {
		t.Fatalf("manifest.json: %v %s", err, members["manifest.json"])
	}
	if len(man[0].RepoTags) != 1 || man[0].RepoTags[0] != "index.docker.io/kiln/plain:v1" && man[0].RepoTags[0] != "kiln/plain:v1" {
		t.Errorf("RepoTags %v", man[0].RepoTags)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(members[man[0].Config], &cfg); err != nil {
		t.Fatalf("config %s: %v", man[0].Config, err)
	}
	if len(man[0].Layers) != 3 || len(cfg.RootFS.DiffIDs) != 3 {
		t.Fatalf("layers %v, diff ids %v", man[0].Layers, cfg.RootFS.DiffIDs)
	}
	for i, f := range man[0].Layers {
		b, ok := members[f]
		if !ok {
			t.Fatalf("layer %d: %s not in the archive", i, f)
		}
		if c := layers.DetectCompression(b); c != layers.Uncompressed {
			t.Errorf("layer %d (%s) is %s, want a plain tar", i, f, c)
		}
		if _, err := tar.NewReader(bytes.NewReader(b)).Next(); err != nil {
			t.Errorf("layer %d (%s): not a tar: %v", i, f, err)
		}
		if got := fmt.Sprintf("sha256:%x", sha256.Sum256(b)); got != cfg.RootFS.DiffIDs[i].String() {
			t.Errorf("layer %d: hashes to %s, config says %s", i, got, cfg.RootFS.DiffIDs[i])
		}
	}
	if n := len(members); n != 4 { // config, 2 distinct layers, manifest
		t.Errorf("%d members, want 4 (identical layers stored once)", n)
	}
}

// TestWriteIndex writes an index (the image and a second manifest, as
// kiln slim --sbom does) to a registry and to an OCI layout, twice under
// one tag; Open still reads the platform image through it.
func TestWriteIndex(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("alpha"))}, "gzip"))
	imgDg, _ := img.Digest()
	other := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("att", []byte("{}"))}, "gzip"))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}})
	want, _ := idx.Digest()
	dir := t.TempDir()
	for _, dest := range []string{testimage.Registry(t) + "/kiln/index:v1", "oci:" + filepath.Join(dir, "layout") + ":v1"} {
		t.Run(dest[:3], func(t *testing.T) {
			for range 2 {
				got, err := layers.WriteIndex(ctx, idx, testkit.Ref(t, dest))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("digest %s, want %s", got, want)
				}
			}
			r, err := testkit.OpenImage(ctx, dest, layers.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Digest != imgDg {
				t.Fatalf("opened %s, want the platform image %s", r.Digest, imgDg)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "layout", "index.json")); err != nil || strings.Count(string(b), `"v1"`) != 1 {
		t.Fatalf("layout index.json: one entry named v1 after two writes: %v\n%s", err, b)
	}
	if _, err := layers.WriteIndex(ctx, idx, testkit.Ref(t, "docker-archive:"+filepath.Join(dir, "x.tar"))); err == nil || !strings.Contains(err.Error(), "registry or an OCI layout") {
		t.Fatalf("docker archive: %v", err)
	}
}
