package weights

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/kiln-build/kiln/internal/testimage"
)

// body is n deterministic, incompressible-enough bytes named by seed.
func body(seed string, n int) []byte {
	b := make([]byte, n)
	h := sha256.Sum256([]byte(seed))
	for i := range b {
		if i%32 == 0 && i > 0 {
			h = sha256.Sum256(h[:])
		}
		b[i] = h[i%32]
	}
	return b
}

func hexOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

type testFile struct {
	path string
	data []byte
	mode int64
}

// collect diverts files concurrently, as slim's parallel layer rewrite does.
func collect(t *testing.T, files []testFile, opts ...CollectorOption) *Collector {
	t.Helper()
	c, err := NewCollector(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(files))
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.path, Size: int64(len(f.data)), Mode: f.mode}
			errs <- c.Divert(f.path, hdr, bytes.NewReader(f.data))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

var modelFiles = []testFile{
	{"app/models/llm/model-00001.safetensors", body("a", 3<<20), 0o644},
	{"app/models/llm/model-00002.safetensors", body("b", 2<<20+17), 0o644},
	{"app/models/llm/copy.safetensors", body("a", 3<<20), 0o640},
	{"app/models/llm/config.json", []byte(`{"hidden": 4096}`), 0o644},
	{"app/models/tok/tokenizer.json", body("t", 1000), 0o600},
}

func TestPackLayersAndMount(t *testing.T) {
	c := collect(t, modelFiles, WithLargeFileThreshold(1<<20))
	m, _, err := c.Pack("", "sha256:"+strings.Repeat("1", 64))
	if err != nil {
		t.Fatal(err)
	}
	if m.Mount != "/app/models" {
		t.Errorf("mount %q, want /app/models (deepest dir holding every file)", m.Mount)
	}
	// Two distinct large contents → two raw layers (the copy shares one),
	// the three small files → one tar.
	var raw, tars int
	for _, l := range m.Layers {
		switch l.MediaType {
		case MediaTypeWeightRaw:
			raw++
		case MediaTypeWeightTar:
			tars++
		}
	}
	if raw != 2 || tars != 1 {
		t.Errorf("layers: %d raw, %d tar; want 2 raw (duplicate content shares one) and 1 tar: %+v", raw, tars, m.Layers)
	}
	for _, f := range m.Files {
		if f.Size >= 1<<20 && f.Layer != "sha256:"+f.SHA256 {
			t.Errorf("%s: large file in layer %s, want its own sha256", f.Path, f.Layer)
		}
	}
	byPath := map[string]File{}
	for _, f := range m.Files {
		byPath[f.Path] = f
	}
	if f := byPath["llm/copy.safetensors"]; f.Mode != 0o640 {
		t.Errorf("copy mode %#o, want 0640", f.Mode)
	}
	if f := byPath["tok/tokenizer.json"]; f.Mode != 0o600 || f.SHA256 != hexOf(modelFiles[4].data) {
		t.Errorf("tokenizer entry %+v", f)
	}
	// Packing is deterministic: a second collector (other order of
	// arrival, other work dir) gives the same manifest byte for byte.
	c2 := collect(t, append([]testFile(nil), modelFiles[2], modelFiles[0], modelFiles[4], modelFiles[1], modelFiles[3]), WithLargeFileThreshold(1<<20))
	m2, _, err := c2.Pack("", "sha256:"+strings.Repeat("1", 64))
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := m.Encode()
	b2, _ := m2.Encode()
	if !bytes.Equal(b1, b2) {
		t.Errorf("packing is not deterministic:\n%s\n%s", b1, b2)
	}
}

func TestPackExplicitMount(t *testing.T) {
	c := collect(t, modelFiles)
	if _, _, err := c.Pack("/app/models/llm", ""); err == nil || !strings.Contains(err.Error(), "not below the mount") {
		t.Errorf("mount that leaves files out: err = %v", err)
	}
	m, _, err := c.Pack("/app", "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Files[0].Path != "models/llm/config.json" {
		t.Errorf("paths relative to /app: got %q", m.Files[0].Path)
	}
}

func TestDivertRejects(t *testing.T) {
	c, err := NewCollector(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		path string
		hdr  *tar.Header
		body string
		want string
	}{
		{"escaping path", "../../etc/passwd", nil, "x", "not a path inside"},
		{"symlink", "m/link", &tar.Header{Typeflag: tar.TypeSymlink}, "", "not a regular file"},
		{"size lie", "m/a.bin", &tar.Header{Typeflag: tar.TypeReg, Size: 10}, "abc", "tar header says 10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Divert(tc.path, tc.hdr, strings.NewReader(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if err := c.Divert("m/a.bin", nil, strings.NewReader("one")); err != nil {
		t.Fatal(err)
	}
	if err := c.Divert("/m/a.bin", nil, strings.NewReader("one")); err != nil {
		t.Errorf("same path, same bytes: %v", err)
	}
	if err := c.Divert("m/a.bin", nil, strings.NewReader("two")); err == nil || !strings.Contains(err.Error(), "different contents") {
		t.Errorf("same path, other bytes: err = %v", err)
	}
	if got := len(c.Files()); got != 1 {
		t.Errorf("%d files, want 1", got)
	}
}

func TestPublishLayoutAndRegistry(t *testing.T) {
	ctx := context.Background()
	c := collect(t, modelFiles, WithLargeFileThreshold(1<<20))
	dir := filepath.Join(t.TempDir(), "layout")
	m, dg, err := c.Publish(ctx, testkit.Ref(t, "oci:"+dir+":weights"), "", "sha256:"+strings.Repeat("2", 64))
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, err := p.Image(dg)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if mf.ArtifactType != ArtifactType || string(mf.Config.MediaType) != MediaTypeModelConfig {
		t.Errorf("artifactType %q config %q: want ModelPack types", mf.ArtifactType, mf.Config.MediaType)
	}
	if mf.Annotations[AnnotationSetDigest] != m.SetDigest {
		t.Errorf("set digest annotation %q, want %q", mf.Annotations[AnnotationSetDigest], m.SetDigest)
	}
	last := mf.Layers[len(mf.Layers)-1]
	if last.MediaType != MediaTypeManifest {
		t.Fatalf("last layer %s, want the volume manifest", last.MediaType)
	}
	// Every raw blob in the layout is the file itself.
	for _, l := range mf.Layers {
		if l.MediaType != MediaTypeWeightRaw {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", l.Digest.Hex))
		if err != nil {
			t.Fatal(err)
		}
		if hexOf(b) != l.Digest.Hex || l.Annotations[AnnotationFilepath] == "" {
			t.Errorf("raw layer %s: content hashes to %s, filepath %q", l.Digest, hexOf(b), l.Annotations[AnnotationFilepath])
		}
	}
	if m.Repository != "oci:"+dir {
		t.Errorf("repository %q", m.Repository)
	}
	// The same files pushed to a registry give the same artifact digest.
	reg := testimage.Registry(t)
	_, dg2, err := c.Publish(ctx, testkit.Ref(t, reg+"/w/model:v1"), "", "sha256:"+strings.Repeat("2", 64))
	if err != nil {
		t.Fatal(err)
	}
	// The manifest blob names its repository, which differs; so compare
	// the layers instead of the digests.
	ref, err := ArtifactRef(testkit.Ref(t, reg+"/w/model:v1"), dg2)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s/w/model@%s", reg, dg2); ref.String() != want {
		t.Errorf("ArtifactRef = %q, want %q", ref, want)
	}
}
