package slimcmd

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/slim"
)

// TestSlimCommandEStargz: --format estargz without a probe writes the
// eStargz image alone under --to (gzip media type, TOC annotations), warns
// that there is no startup set, and refuses what it cannot do.
func TestSlimCommandEStargz(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 3000), testimage.File("app/main.py", []byte("m"))}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	src := "oci:" + dir + ":app"
	outDir := filepath.Join(dir, "out")
	code, stdout, errOut := run(t, "slim", src, "--to", "oci:"+outDir+":v1", "--format", "estargz", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Images) != 1 || rep.Images[0].Compression != "estargz" || !strings.Contains(strings.Join(rep.Warnings, "\n"), "without --probe") {
		t.Fatalf("images %+v, warnings %v", rep.Images, rep.Warnings)
	}
	p, err := layout.FromPath(outDir)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := p.ImageIndex()
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 1 {
		t.Fatalf("%d images in the layout, want the eStargz one alone", len(im.Manifests))
	}
	out, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := out.Manifest()
	for _, l := range m.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" || l.Annotations[layers.AnnotationTOCDigest] == "" {
			t.Errorf("layer %s: %s %v", l.Digest, l.MediaType, l.Annotations)
		}
	}
	if d, _ := out.Digest(); d.String() != rep.Digest {
		t.Errorf("wrote %s, report says %s", d, rep.Digest)
	}

	for _, args := range [][]string{
		{"--format", "bogus"},
		{"--startup-list", filepath.Join(dir, "s.txt")},
		{"--format", "estargz", "--startup-list", filepath.Join(dir, "s.txt")}, // needs --probe
	} {
		code, _, errOut := run(t, append([]string{"slim", src, "--to", "oci:" + filepath.Join(dir, "x") + ":v1", "--progress", "none"}, args...)...)
		if code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, cmdutil.ExitUsage, errOut)
		}
	}
	code, _, errOut = run(t, "slim", src, "--to", "docker-archive:"+filepath.Join(dir, "a.tar"), "--format", "estargz", "--progress", "none")
	if code != cmdutil.ExitUsage {
		t.Errorf("estargz into a docker archive: exit %d (%s)", code, errOut)
	}
}
