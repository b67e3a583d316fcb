package slimcmd

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/slim"
	"github.com/kiln-build/kiln/warm"
)

// TestSlimCommandErofs: --format erofs publishes the gzip and zstd images
// and, beside them under TAG-erofs, the same image with native EROFS
// layers, with its SBOM and signature like the others; a second slim gives
// the same EROFS digest; what it cannot do is refused before any work.
func TestSlimCommandErofs(t *testing.T) {
	testkit.RequireErofs(t)
	reg := testimage.Registry(t)
	src := reg + "/slim-erofs/app:naive"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 3000), testimage.File("usr/share/doc/x/README", []byte("doc"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("print('hi')\n"))}, "gzip")))
	keys := cmdtest.NewKeys(t)
	to := reg + "/slim-erofs/app:v1"
	var erofsDigests []string
	var named slim.Published
	for i := 0; i < 2; i++ {
		code, stdout, errOut := run(t, "slim", src, "--to", to, "--format", "erofs", "--sbom", "--sign-key", keys.Key, "--json", "--progress", "none")
		if code != cmdutil.ExitOK {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		var rep slim.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Images) != 3 {
			t.Fatalf("images %+v, want gzip, zstd and erofs", rep.Images)
		}
		e := rep.Images[2]
		if e.Ref.String() != to+"-erofs" || e.Compression != "erofs" || e.SBOM == "" || e.Index == "" || e.Signed == nil || e.Signed.Digest != e.Index {
			t.Fatalf("the EROFS image: %+v", e)
		}
		if rep.Images[0].Ref.String() != to || rep.Images[1].Ref.String() != to+"-zstd" {
			t.Errorf("images %+v", rep.Images)
		}
		erofsDigests = append(erofsDigests, e.Digest)
		named = rep.Images[0]
	}
	if erofsDigests[0] != erofsDigests[1] {
		t.Errorf("two slims: EROFS images %s and %s", erofsDigests[0], erofsDigests[1])
	}
	ref, err := name.ParseReference(to + "-erofs@" + erofsDigests[0])
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	cfg, _ := img.ConfigFile()
	for i, l := range m.Layers {
		if l.MediaType != layers.ErofsMediaType || cfg.RootFS.DiffIDs[i] != l.Digest {
			t.Errorf("layer %d: %s, diff ID %s for blob %s", i, l.MediaType, cfg.RootFS.DiffIDs[i], l.Digest)
		}
	}
	// TAG's image manifest (inside its SBOM index) names the EROFS form,
	// and the report's digest is that manifest's; kiln warm into the EROFS
	// snapshotter takes TAG-erofs for TAG.
	tref, err := name.ParseReference(to + "@" + named.Digest)
	if err != nil {
		t.Fatal(err)
	}
	timg, err := remote.Image(tref)
	if err != nil {
		t.Fatal(err)
	}
	if tm, _ := timg.Manifest(); tm.Annotations[layers.AnnotationErofsManifest] != erofsDigests[0] {
		t.Errorf("TAG's manifest annotations %v, want %s naming %s", tm.Annotations, layers.AnnotationErofsManifest, erofsDigests[0])
	}
	set, err := warm.Resolve(context.Background(), testkit.Refs(t, to), warm.ResolveOptions{Erofs: true, Platform: v1.Platform{OS: "linux", Architecture: "amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	if w := set.Images[0]; w.Form != warm.FormErofs || w.Manifest.Digest.String() != erofsDigests[0] || w.Named.Digest.String() != named.Index {
		t.Errorf("warm resolves %s to %+v, want its EROFS form %s", to, w, erofsDigests[0])
	}

	// An untagged layout: latest, latest-zstd and latest-erofs.
	dir := t.TempDir()
	code, stdout, errOut := run(t, "slim", src, "--to", "oci:"+filepath.Join(dir, "out"), "--format", "erofs", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("untagged layout: exit %d\n%s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Images) != 3 || !strings.HasSuffix(rep.Images[2].Ref.String(), ":latest-erofs") || !strings.HasSuffix(rep.Images[0].Ref.String(), ":latest") {
		t.Errorf("untagged layout: images %+v", rep.Images)
	}
	for _, args := range [][]string{
		{"--to", "docker-archive:" + filepath.Join(dir, "a.tar")},
		{"--to", reg + "/slim-erofs/app@sha256:" + strings.Repeat("a", 64)},
		{"--to", to, "--erofs-compression", "brotli"},
	} {
		code, _, errOut := run(t, append([]string{"slim", src, "--format", "erofs", "--progress", "none"}, args...)...)
		if code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, cmdutil.ExitUsage, errOut)
		}
	}
}
