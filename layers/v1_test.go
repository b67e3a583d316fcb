package layers_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testimage"
)

// The ggcr view of an opened image has the source's layers blob for blob
// (a docker archive's compressed layers, which record no blob digest,
// included), its config, and, where the source has a manifest, its digest.
func TestImageV1(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{CreatedBy: []string{"a", "b"}},
		testimage.Layer(t, []testimage.Entry{testimage.File("a/x", []byte("gzip layer"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("b/y", []byte("plain layer"))}, "none"))
	want, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg, _ := img.RawConfigFile()
	wantDigest, _ := img.Digest()
	dir := t.TempDir()
	testimage.WriteLayout(t, filepath.Join(dir, "oci"), "v1", img)
	testimage.WriteArchive(t, filepath.Join(dir, "app.tar"), "example.com/app:v1", img)
	host := testimage.Registry(t)
	testimage.Push(t, host+"/kiln-v1/app:v1", img)
	for _, ref := range []string{"oci:" + filepath.Join(dir, "oci") + ":v1", "docker-archive:" + filepath.Join(dir, "app.tar"), host + "/kiln-v1/app:v1"} {
		t.Run(ref[:3], func(t *testing.T) {
			li, err := testkit.OpenImage(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			defer li.Close()
			v, err := li.V1(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if cfg, _ := v.RawConfigFile(); string(cfg) != string(wantCfg) {
				t.Error("config differs")
			}
			if dg, _ := v.Digest(); li.RawManifest != nil && dg != wantDigest {
				t.Errorf("digest %s, want %s", dg, wantDigest)
			}
			got, err := v.Layers()
			if err != nil || len(got) != len(want) {
				t.Fatalf("layers: %d, %v", len(got), err)
			}
			for i, l := range got {
				dg, _ := l.Digest()
				wdg, _ := want[i].Digest()
				rc, err := l.Compressed()
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				io.Copy(h, rc)
				rc.Close()
				if dg != wdg || fmt.Sprintf("sha256:%x", h.Sum(nil)) != wdg.String() {
					t.Errorf("layer %d: digest %s, bytes sha256:%x, want %s", i, dg, h.Sum(nil), wdg)
				}
			}
		})
	}
}
