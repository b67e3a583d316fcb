package convert

import (
	"archive/tar"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers/erofs"
)

// TestToErofsRefusesHostileTars (issue 34): a layer whose tar kiln's
// reader refuses (a lone zero block hiding a second archive that
// mkfs.erofs read on into) and one whose entry declares far more than the
// blob can hold (1 TiB in 10 kB, which hung the conversion) are refused
// in words naming the layer, at once.
func TestToErofsRefusesHostileTars(t *testing.T) {
	testkit.RequireErofs(t)
	visible := testimage.Tar(t, []testimage.Entry{testimage.File("etc/visible", []byte("harmless\n"))})
	lone := append(bytes.Clone(visible[:len(visible)-1024]), make([]byte, 512)...)
	lone = append(lone, testimage.Tar(t, []testimage.Entry{testimage.File("usr/bin/hidden-backdoor", []byte("evil"))})...)

	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 10<<10))

	for _, tc := range []struct {
		name string
		blob []byte
		want []string
	}{
		{"lone zero block", lone, []string{"layer 0", `after "etc/visible"`, "invalid tar header"}},
		{"1 TiB declared", huge.Bytes(), []string{"layer 0", `"huge" declares 1099511627776 bytes, more than the layer can hold (` + strconv.Itoa(huge.Len()) + " bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			img := testimage.Image(t, testimage.Config{}, testimage.RawLayer(tc.blob, types.OCIUncompressedLayer))
			res, err := ToErofs(ctx, img, Options{TempDir: t.TempDir()}, erofs.LZ4)
			if err == nil {
				res.Close()
				t.Fatal("converted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

// TestConvertRefusesMislabelledBlobs (issue 34): a blob whose bytes are
// not in the compression its media type declares is refused, naming the
// layer, by every conversion.
func TestConvertRefusesMislabelledBlobs(t *testing.T) {
	tarball := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))})
	img := testimage.Image(t, testimage.Config{}, testimage.RawLayer(tarball, types.OCILayer))
	res, err := ToZstd(context.Background(), img, Options{TempDir: t.TempDir()})
	if err == nil {
		res.Close()
		t.Fatal("converted a tar that says it is gzip")
	}
	if want := "its bytes are uncompressed, but its media type " + string(types.OCILayer) + " says gzip"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "layer 0") {
		t.Fatalf("err = %v, want %q", err, want)
	}
}
