package warm

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/kiln-build/kiln/internal/testimage"
)

// A docker archive has no manifest, and kiln writes one manifest for it,
// wherever it is read: the warm set and layers' image (kiln convert's
// source, through V1) hold the same bytes, OCI media types throughout
// (there were two syntheses, one with a Docker config type).
func TestArchiveManifestIsOne(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("a/x", []byte("gzip layer"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("b/y", []byte("plain layer"))}, "none"))
	archive := filepath.Join(t.TempDir(), "app.tar")
	testimage.WriteArchive(t, archive, "example.com/app:v1", img)
	ref := "docker-archive:" + archive
	set, err := Resolve(ctx, testkit.Refs(t, ref), ResolveOptions{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	li, err := testkit.OpenImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	v, err := li.V1(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := v.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.Images[0].Manifest.Digest, digest.FromBytes(raw); got != want {
		t.Errorf("warm's manifest %s, layers' %s:\n%s", got, want, raw)
	}
	if mt, _ := v.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("V1 media type %s, want the OCI manifest's", mt)
	}
	m, err := v.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Errorf("config media type %s, want OCI's", m.Config.MediaType)
	}
}
