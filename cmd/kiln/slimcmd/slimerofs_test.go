package slimcmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/slim"
)

// TestSlimCommandErofs: --format erofs publishes the gzip and zstd images
// and, beside them under TAG-erofs, the same image with native EROFS
// layers, with its SBOM and signature like the others; a second slim gives
// the same EROFS digest; what it cannot do is refused before any work.
func TestSlimCommandErofs(t *testing.T) {
	if err := erofs.Check(context.Background()); err != nil {
		if os.Getenv("KILN_REQUIRE_EROFS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	reg := testimage.Registry(t)
	src := reg + "/slim-erofs/app:naive"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 3000), testimage.File("usr/share/doc/x/README", []byte("doc"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("print('hi')\n"))}, "gzip")))
	keys := cmdtest.NewKeys(t)
	to := reg + "/slim-erofs/app:v1"
	var erofsDigests []string
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
		if e.Ref != to+"-erofs" || e.Compression != "erofs" || e.SBOM == "" || e.Index == "" || e.Signed == nil || e.Signed.Digest != e.Index {
			t.Fatalf("the EROFS image: %+v", e)
		}
		if rep.Images[0].Ref != to || rep.Images[1].Ref != to+"-zstd" {
			t.Errorf("images %+v", rep.Images)
		}
		erofsDigests = append(erofsDigests, e.Digest)
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
		if l.MediaType != erofs.MediaType || cfg.RootFS.DiffIDs[i] != l.Digest {
			t.Errorf("layer %d: %s, diff ID %s for blob %s", i, l.MediaType, cfg.RootFS.DiffIDs[i], l.Digest)
		}
	}

	dir := t.TempDir()
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
