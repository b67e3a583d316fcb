package builder

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
)

// TestPushErofs: what --format erofs (RunOptions.ErofsTo) does after the build pushed REF and
// REF-zstd: the zstd image (by digest) becomes native EROFS layers under
// REF-erofs, and the result is one more pushed image for --sbom and
// --sign-key.
func TestPushErofs(t *testing.T) {
	testkit.RequireErofs(t)
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("print(1)\n"))}, "zstd"))
	testimage.Push(t, reg+"/acme/app:1-zstd", img)
	d, _ := img.Digest()
	var errOut bytes.Buffer
	o := &RunOptions{Options: Options{ProgressOut: &errOut}, ErofsTo: testkit.Ref(t, reg+"/acme/app:1-erofs"), ErofsCompression: erofs.LZ4HC}
	p, pub, err := o.pushErofs(context.Background(), []Pushed{
		{Ref: testkit.Ref(t, reg+"/acme/app:1"), Compression: "gzip", Digest: "sha256:" + strings.Repeat("0", 64)},
		{Ref: testkit.Ref(t, reg+"/acme/app:1-zstd"), Compression: "zstd", Digest: d.String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Ref.String() != reg+"/acme/app:1-erofs" || p.Compression != "erofs" || pub.Digest.String() != p.Digest {
		t.Fatalf("pushed %+v, published %+v", p, pub)
	}
	got, err := testkit.OpenImage(context.Background(), p.Ref.String())
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Digest.String() != p.Digest || len(got.Layers) != 1 || string(got.Layers[0].MediaType) != layers.ErofsMediaType {
		t.Errorf("%s: digest %s (pushed %s), layers %+v", p.Ref, got.Digest, p.Digest, got.Layers)
	}
}
