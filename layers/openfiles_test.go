package layers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/internal/testimage"
)

// TestLayoutManyLayersFewFiles: an OCI layout image of 1500 layers opens
// and walks under a 256-descriptor limit: layer files are opened when read,
// a bounded number at once, not all at Open (F12).
func TestLayoutManyLayersFewFiles(t *testing.T) {
	const n = 1500
	// The layout is written by hand: ggcr's mutate and layout writers
	// take seconds over 1500 layers.
	dir := filepath.Join(t.TempDir(), "layout")
	blob := func(b []byte) v1.Hash {
		h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
		p := filepath.Join(dir, "blobs", "sha256", h.Hex)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return h
	}
	cfg := v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i := range n {
		// Uncompressed: walked by seeking, while a second reader hashes
		// the same file.
		b := testimage.Tar(t, []testimage.Entry{testimage.File(fmt.Sprintf("f/%d", i), []byte{byte(i)})})
		h := blob(b)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, h)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCIUncompressedLayer, Size: int64(len(b)), Digest: h})
	}
	cb, _ := json.Marshal(cfg)
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cb)), Digest: blob(cb)}
	mb, _ := json.Marshal(m)
	idx, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Size: int64(len(mb)), Digest: blob(mb), Annotations: map[string]string{"org.opencontainers.image.ref.name": "many"}}}})
	os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })

	img, err := Open(context.Background(), "oci:"+dir+":many")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer img.Close()
	if len(img.Layers) != n {
		t.Fatalf("%d layers, want %d", len(img.Layers), n)
	}
	files := 0
	for _, l := range img.Layers {
		st, err := l.Walk(context.Background(), WalkOptions{}, func(e *Entry, body io.Reader) error {
			files++
			return nil
		})
		if err != nil || !st.Verified {
			t.Fatalf("walk: verified=%v %v", st.Verified, err)
		}
	}
	if files < n {
		t.Fatalf("walked %d entries, want at least %d", files, n)
	}
}
