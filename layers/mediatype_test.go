package layers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// walkRaw walks a layout image of one layer, blob b under media type mt.
func walkRaw(t *testing.T, b []byte, mt types.MediaType) (int, error) {
	t.Helper()
	dir := t.TempDir()
	// The config names the diff ID of what the blob decompresses to.
	diffID := sha(b)
	if r, _, closeDec, err := layers.Decompress(bytes.NewReader(b)); err == nil {
		if u, err := io.ReadAll(r); err == nil {
			diffID = sha(u)
		}
		closeDec()
	}
	testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{}, testimage.Lying(b, sha(b), diffID, mt)))
	img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":x")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	n := 0
	_, err = img.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { n++; return nil })
	return n, err
}

// TestWalkTakesTheMediaTypesWord (issue 34): the media type decides what
// a layer is. A layer whose bytes are not in the compression its media
// type declares is refused, and so is one that holds no tar (a native
// EROFS layer, which a tar reader took for an empty layer).
func TestWalkTakesTheMediaTypesWord(t *testing.T) {
	tarball := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))})
	zw, _ := zstd.NewWriter(nil)
	zs := zw.EncodeAll(tarball, nil)
	erofsImage := append(append(make([]byte, 1024), "\xe2\xe1\xf5\xe0"...), make([]byte, 3068)...)
	for _, tc := range []struct {
		name string
		blob []byte
		mt   types.MediaType
		want string
	}{
		{"tar", tarball, types.OCIUncompressedLayer, ""},
		{"zstd", zs, types.OCILayerZStd, ""},
		{"zstd called gzip", zs, types.OCILayer, "its bytes are zstd, but its media type " + string(types.OCILayer) + " says gzip"},
		{"tar called zstd", tarball, types.OCILayerZStd, "its bytes are uncompressed, but its media type " + string(types.OCILayerZStd) + " says zstd"},
		{"erofs", erofsImage, "application/vnd.erofs.layer.v1", "is an EROFS layer (application/vnd.erofs.layer.v1)"},
		{"artifact", tarball, "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "not a tar layer"},
	} {
		n, err := walkRaw(t, tc.blob, tc.mt)
		if tc.want == "" && (err != nil || n != 1) {
			t.Errorf("%s: %d entries, %v", tc.name, n, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %d entries, err = %v, want %q", tc.name, n, err, tc.want)
		}
	}
}

// TestCheckTarKnowsTarLayers: every OCI and Docker tar layer type is a
// tar, however compressed or distributable; EROFS and artifacts are not.
func TestCheckTarKnowsTarLayers(t *testing.T) {
	for _, mt := range []types.MediaType{"", types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.OCIRestrictedLayer,
		"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", types.DockerLayer, types.DockerForeignLayer, types.DockerUncompressedLayer} {
		if err := layers.CheckTar(mt); err != nil {
			t.Errorf("CheckTar(%q) = %v", mt, err)
		}
	}
	for _, mt := range []types.MediaType{layers.ErofsMediaType, layers.ErofsMediaType + "+zstd", "application/vnd.in-toto+json"} {
		if err := layers.CheckTar(mt); !errors.Is(err, layers.ErrNotTar) {
			t.Errorf("CheckTar(%q) = %v, want ErrNotTar", mt, err)
		}
	}
}
