package containerd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/testimage"
)

// layerFile is b gzipped in a file, as a committed blob.
func layerFile(t *testing.T, b []byte) content.ReaderAt {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	p := filepath.Join(t.TempDir(), "layer.gz")
	if err := os.WriteFile(p, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return sizedFile{f, int64(gz.Len())}
}

// TestApplyRefusesHostileEntries (N7): --unpack's in-process apply runs
// kiln's one entry rule before containerd's applier sees a header: a
// 2 GiB GNU-sparse entry in a few hundred bytes is refused at once, not
// written densely, and the refusal is final (errRefusedEntry: the
// daemon's apply must not take the layer either).
func TestApplyRefusesHostileEntries(t *testing.T) {
	hostile := testimage.HostileTars(t)
	for name, tc := range map[string]struct {
		tar  []byte
		want string
	}{
		"sparse":     {testimage.SparseTar("data/big", 2<<30), `"data/big" is a GNU sparse file`},
		"sparse-pax": {testimage.SparsePAXTar("data/big", 2<<30), `"data/big" is a GNU sparse file`},
		"type-v":     {hostile["type-v"], "tar type 'V'"},
		"traversal":  {hostile["traversal"], "leaves the image root"},
		"xattr":      {hostile["xattr-300"], "over Linux's limit of 255"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			layer := rootfs.Layer{Blob: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, Diff: ocispec.Descriptor{Digest: digest.FromBytes(tc.tar)}}
			start := time.Now()
			_, err := applyDir(context.Background(), layer, dir, layerFile(t, tc.tar))
			if err == nil || !errors.Is(err, errRefusedEntry) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q, refused", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			var written int64
			filepath.Walk(dir, func(_ string, fi os.FileInfo, _ error) error {
				if fi != nil && fi.Mode().IsRegular() {
					written += fi.Size()
				}
				return nil
			})
			if written > 0 {
				t.Errorf("%d bytes written", written)
			}
		})
	}
}

// TestEntryCheckPassesTheLayer: an honest layer of many chunks passes
// the check unchanged, byte for byte.
func TestEntryCheckPassesTheLayer(t *testing.T) {
	tb := testimage.Tar(t, []testimage.Entry{testimage.Sized("a", 3<<20), testimage.Dir("d/"), testimage.Sized("d/b", 100), testimage.Symlink("l", "a"), testimage.Sized("c", 5<<20+7)})
	tb = append(tb, make([]byte, 4096)...) // padding after the end marker
	ra, err := decodedProvider{src: layerFile(t, tb), tar: true}.ReaderAt(context.Background(), ocispec.Descriptor{})
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	got, err := io.ReadAll(content.NewReader(ra))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, tb) {
		t.Fatalf("got %d bytes, want the %d of the layer", len(got), len(tb))
	}
}

// TestApplyCountsDeclaredSizes (N7): the sizes a layer's entries declare
// are counted against the space free where it unpacks, before the
// applier writes them: a layer declaring more than the disk holds is
// refused at the header that passes the mark.
func TestApplyCountsDeclaredSizes(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "small", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("abc"))
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 60, Format: tar.FormatPAX}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 10<<10))
	tw.Flush()
	dir := t.TempDir()
	layer := rootfs.Layer{Blob: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, Diff: ocispec.Descriptor{Digest: digest.FromBytes(b.Bytes())}}
	_, err := applyDir(context.Background(), layer, dir, layerFile(t, b.Bytes()))
	if err == nil || !errors.Is(err, errRefusedEntry) || !strings.Contains(err.Error(), `entry "huge" brings the files the layer declares to`) || !strings.Contains(err.Error(), "free in "+dir) {
		t.Fatalf("err = %v, want the declared size refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "huge")); !os.IsNotExist(err) {
		t.Errorf("huge was created: %v", err)
	}
}
