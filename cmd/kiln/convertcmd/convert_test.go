package convertcmd

import (
	"context"
	"encoding/json"
	"io"
	"os"
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
	"github.com/kiln-build/kiln/sign"
)

// TestConvertCommandEStargz: kiln convert --format estargz of a registry
// tag writes TAG-estargz, the listed startup file first in its layer.
func TestConvertCommandEStargz(t *testing.T) {
	reg := testimage.Registry(t)
	src := reg + "/conv/app:v1"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("app/a.py", []byte("a")), testimage.File("app/z.py", []byte("z"))}, "gzip")))
	list := filepath.Join(t.TempDir(), "startup.txt")
	if err := os.WriteFile(list, []byte("/app/z.py\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := run(t, "convert", src, "--format", "estargz", "--startup-list", list, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep struct {
		To     string `json:"to"`
		Format string `json:"format"`
		Layers []struct {
			StartupFiles int `json:"startup_files"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.To != src+"-estargz" || rep.Format != "estargz" || len(rep.Layers) != 1 || rep.Layers[0].StartupFiles != 1 {
		t.Fatalf("report %+v", rep)
	}
	got, err := testkit.OpenImage(context.Background(), rep.To)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	var names []string
	if _, err := got.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(e *layers.Entry, _ io.Reader) error {
		names = append(names, e.Header.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(names) != 4 || names[0] != "app/z.py" || names[1] != ".prefetch.landmark" || names[2] != "app/a.py" || names[3] != "stargz.index.json" {
		t.Errorf("entries %v: want app/z.py, the landmark, app/a.py, the TOC", names)
	}
	if code, _, _ := run(t, "convert", src, "--format", "estargz", "--startup-list", filepath.Join(t.TempDir(), "none"), "--progress", "none"); code != cmdutil.ExitUsage {
		t.Errorf("missing --startup-list file: exit %d", code)
	}
}

// TestConvertCommandErofs: kiln convert --format erofs of a registry tag
// writes native EROFS layers to TAG-erofs, signed with --sign-key; a
// second run gives the same digest; a docker archive and an unknown
// compression are refused in words before any work.
func TestConvertCommandErofs(t *testing.T) {
	testkit.RequireErofs(t)
	reg := testimage.Registry(t)
	src := reg + "/conv/app:v2"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Dir("app"), testimage.File("app/a.py", []byte("a")), testimage.Sized("app/big.bin", 1<<20)}, "gzip")))
	keys := cmdtest.NewKeys(t)
	var digests []string
	for i := 0; i < 2; i++ {
		code, stdout, errOut := run(t, "convert", src, "--format", "erofs", "--json", "--progress", "none", "--sign-key", keys.Key)
		if code != cmdutil.ExitOK {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		var rep struct {
			To          string `json:"to"`
			Digest      string `json:"digest"`
			Format      string `json:"format"`
			Compression string `json:"erofs_compression"`
			Signed      *struct {
				Digest string `json:"digest"`
			} `json:"signed"`
			Note string `json:"note"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		// The tag was not rewritten to name its EROFS form: warm will not
		// take it, and the report says how to have it taken.
		if !strings.Contains(rep.Note, "only when "+src+" names it") || !strings.Contains(rep.Note, "--format erofs") {
			t.Fatalf("note %q", rep.Note)
		}
		if rep.To != src+"-erofs" || rep.Format != "erofs" || rep.Compression != "lz4hc" || rep.Signed == nil || rep.Signed.Digest != rep.Digest {
			t.Fatalf("report %s", stdout)
		}
		digests = append(digests, rep.Digest)
	}
	if digests[0] != digests[1] {
		t.Errorf("two conversions: %s and %s", digests[0], digests[1])
	}
	// In words, within 80 columns.
	code, stdout, errOut := run(t, "convert", src, "--format", "erofs", "--progress", "none")
	if code != cmdutil.ExitOK || !strings.Contains(stdout, "note: kiln warm --unpack takes "+src+"-erofs") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, errOut)
	}
	for _, l := range strings.Split(stdout, "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("line over 80 columns: %q", l)
		}
	}
	pub, err := sign.LoadPublicKey(keys.Pub)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(src + "-erofs")
	d, _ := v1.NewHash(digests[0])
	if _, err := sign.Verify(context.Background(), ref.String(), ref.Context(), d, []*sign.PublicKey{pub}); err != nil {
		t.Errorf("the EROFS image's signature: %v", err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	if m.Layers[0].MediaType != layers.ErofsMediaType {
		t.Errorf("layer media type %s", m.Layers[0].MediaType)
	}

	for _, bad := range [][]string{
		{"--to", "docker-archive:" + filepath.Join(t.TempDir(), "a.tar")},
		{"--erofs-compression", "gzip"},
	} {
		code, _, errOut := run(t, append([]string{"convert", src, "--format", "erofs", "--progress", "none"}, bad...)...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, bad[0]) {
			t.Errorf("%v: exit %d, %s", bad, code, errOut)
		}
	}
}

// N2 from the command line: a layer that tar-based scanners read as one
// harmless file (a lone zero block, then a hidden backdoor and a changed
// /etc/visible that erofs-utils read past it) is refused by kiln convert
// --format erofs in words, and no TAG-erofs is written, signed or not.
func TestConvertErofsRefusesHiddenFiles(t *testing.T) {
	testkit.RequireErofs(t)
	reg := testimage.Registry(t)
	src := reg + "/conv/hidden:v1"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{}, testimage.RawLayer(testimage.LoneZeroBlockTar(t), "application/vnd.oci.image.layer.v1.tar")))
	keys := cmdtest.NewKeys(t)
	code, out, errOut := run(t, "convert", src, "--format", "erofs", "--json", "--progress", "none", "--sign-key", keys.Key)
	if code != cmdutil.ExitFailure || !strings.Contains(out+errOut, "not a tar kiln can read") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	ref, _ := name.ParseReference(src+"-erofs", name.Insecure)
	if _, err := remote.Head(ref); err == nil {
		t.Errorf("%s-erofs was written", src)
	}
}
