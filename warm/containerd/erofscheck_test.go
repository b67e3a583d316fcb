package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
)

// blobAt is a content.ReaderAt of b.
type blobAt struct{ *bytes.Reader }

func (blobAt) Close() error { return nil }

// nativeLayer is an EROFS blob as a layer whose digests are its own.
func nativeLayer(b []byte) rootfs.Layer {
	d := digest.FromBytes(b)
	return rootfs.Layer{
		Blob: ocispec.Descriptor{MediaType: layers.ErofsMediaType, Digest: d, Size: int64(len(b))},
		Diff: ocispec.Descriptor{MediaType: layers.ErofsMediaType, Digest: d},
	}
}

// TestWriteErofsLayerChecksNativeImages (issue 34): a native EROFS blob
// is checked by fsck.erofs before the kernel is handed it. Its digest is
// all a registry vouches for: a blob built broken (or hostile) hashes
// to its descriptor all the same.
func TestWriteErofsLayerChecksNativeImages(t *testing.T) {
	testkit.RequireErofs(t, "KILN_REQUIRE_CONTAINERD")
	img := erofsImage(t, []testimage.Entry{testimage.File("etc/a", []byte("a\n"))})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, erofsMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mounts := []mount.Mount{{Type: "bind", Source: filepath.Join(dir, "fs")}}
	ctx := context.Background()
	path, _, err := writeErofsLayer(ctx, nativeLayer(img), mounts, blobAt{bytes.NewReader(img)}, true)
	if err != nil {
		t.Fatalf("a good image: %v", err)
	}
	os.Remove(path)

	broken := bytes.Clone(img)
	for i := 1024; i < 1024+128; i++ { // the superblock
		broken[i] ^= 0x5a
	}
	_, _, err = writeErofsLayer(ctx, nativeLayer(broken), mounts, blobAt{bytes.NewReader(broken)}, true)
	if err == nil || !strings.Contains(err.Error(), "fsck.erofs finds") {
		t.Fatalf("a broken image: err = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the broken image was written to %s", path)
	}
}

// TestWriteErofsLayerBoundsTheTar (issue 34): a tar layer whose entry
// declares 1 TiB in a 10 kB blob is refused before mkfs.erofs sees it
// (the bound is what the blob can decode to), not waited on.
func TestWriteErofsLayerBoundsTheTar(t *testing.T) {
	testkit.RequireErofs(t, "KILN_REQUIRE_CONTAINERD")
	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 10<<10))
	b := huge.Bytes()
	d := digest.FromBytes(b)
	layer := rootfs.Layer{
		Blob: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: d, Size: int64(len(b))},
		Diff: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: d},
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, erofsMarker), nil, 0o644)
	_, _, err := writeErofsLayer(context.Background(), layer, []mount.Mount{{Type: "bind", Source: filepath.Join(dir, "fs")}}, blobAt{bytes.NewReader(b)}, true)
	if err == nil || !strings.Contains(err.Error(), `"huge" declares 1099511627776 bytes, more than the layer can hold`) {
		t.Fatalf("err = %v", err)
	}
}

// A containerd socket that is not there: the hint never repeats the path
// that failed (it advised --target containerd:/run/containerd/containerd.sock
// after that very path failed) (issue 36 item 8).
func TestOpenNoSocketHint(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "containerd.sock")
	_, err := Open(context.Background(), missing, Options{})
	if err == nil || strings.Count(err.Error(), missing) != 1 || !strings.Contains(err.Error(), "no socket there") {
		t.Errorf("a missing socket: %v", err)
	}
}
