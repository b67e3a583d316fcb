package layers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// A layer kiln wrote to a file (slim's scratch blobs) goes into an OCI
// layout as a hard link to that file, not a second copy: kiln slim's
// probe layout was a full copy of the slim image, gigabytes at the
// moment its disk use peaks. The linked blob reads back verified.
func TestWriteLayoutLinksFileLayers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tarb := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("alpha"))})
	src := filepath.Join(dir, "scratch-blob")
	if err := os.WriteFile(src, tarb, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tarb)
	dg := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	fl := layers.NewFileLayer(src, dg, dg, int64(len(tarb)), int64(len(tarb)), types.OCIUncompressedLayer)
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: fl})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "layout")
	if _, err := layers.Write(ctx, img, testkit.Ref(t, "oci:"+out+":probe")); err != nil {
		t.Fatal(err)
	}
	a, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(filepath.Join(out, "blobs", "sha256", dg.Hex))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) {
		t.Error("the layout's blob is a copy of the scratch file, not a link to it")
	}
	back, err := testkit.OpenImage(ctx, "oci:"+out+":probe")
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	st, err := back.Layers[0].Walk(ctx, layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil })
	if err != nil || !st.Verified {
		t.Fatalf("read back: %+v %v", st, err)
	}
}
