package slimcmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/slim"
)

// Issue 27 (minor): slim --to oci:DIR with --compression both wrote two
// untagged manifests, which nothing could tell apart when reading the
// layout back. They are tagged latest and latest-zstd, each readable by
// its tag in the encoding it promises.
func TestSlimUntaggedLayoutTagsBothEncodings(t *testing.T) {
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("m"))}, "gzip")))
	out := filepath.Join(dir, "out")
	code, stdout, errOut := run(t, "slim", "oci:"+dir+":app", "--to", "oci:"+out, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep slim.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Images) != 2 || rep.Images[0].Ref.String() != "oci:"+out+":latest" || rep.Images[1].Ref.String() != "oci:"+out+":latest-zstd" {
		t.Fatalf("images %+v", rep.Images)
	}
	b, err := os.ReadFile(filepath.Join(out, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, d := range idx.Manifests {
		tags = append(tags, d.Annotations[layers.AnnotationRefName])
	}
	sort.Strings(tags)
	if len(tags) != 2 || tags[0] != "latest" || tags[1] != "latest-zstd" {
		t.Fatalf("index.json tags %q, want latest and latest-zstd", tags)
	}
	for tag, mt := range map[string]string{"latest": "application/vnd.oci.image.layer.v1.tar+gzip", "latest-zstd": "application/vnd.oci.image.layer.v1.tar+zstd"} {
		img, err := testkit.OpenImage(context.Background(), "oci:"+out+":"+tag)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range img.Layers {
			if string(l.MediaType) != mt {
				t.Errorf("%s: layer %s, want %s", tag, l.MediaType, mt)
			}
		}
		img.Close()
	}
}
