package layers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		escapes  bool
	}{
		{"usr/bin/nvcc", "usr/bin/nvcc", false},
		{"./usr/bin/", "usr/bin", false},
		{"../../etc/passwd", "etc/passwd", true},
		{"/etc/shadow", "etc/shadow", true},
		{"a/../../b", "b", true},
		{"a/b/../c", "a/c", false},
		{"a\\..\\..\\win", "win", true},
		{".", "", false},
	} {
		got, esc := layers.CleanPath(tc.in)
		if got != tc.want || esc != tc.escapes {
			t.Errorf("CleanPath(%q) = %q, %v; want %q, %v", tc.in, got, esc, tc.want, tc.escapes)
		}
	}
	if _, err := layers.SafeJoin("/dst", "../x"); !errors.Is(err, layers.ErrUnsafePath) {
		t.Errorf("SafeJoin ../x: %v", err)
	}
	if p, err := layers.SafeJoin("/dst", "a/b"); err != nil || p != "/dst/a/b" {
		t.Errorf("SafeJoin a/b = %q, %v", p, err)
	}
}

func walkAll(t *testing.T, ref string) ([]*layers.Entry, error) {
	t.Helper()
	img, err := testkit.OpenImage(context.Background(), ref)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	var out []*layers.Entry
	for _, l := range img.Layers {
		_, err := l.Walk(context.Background(), layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
			out = append(out, e)
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func TestHostileEntries(t *testing.T) {
	dir := t.TempDir()
	l := testimage.Layer(t, []testimage.Entry{
		testimage.Sized("../../etc/passwd", 10),
		testimage.Sized("/abs/file", 10),
		testimage.Symlink("usr/lib/evil", "../../../../etc/shadow"),
		testimage.Sized("dup", 5),
		testimage.Sized("dup", 7),
		testimage.Whiteout("usr/share/doc"),
		testimage.Opaque("var/cache"),
	}, "gzip")
	testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{}, l))
	es, err := walkAll(t, "oci:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 7 {
		t.Fatalf("entries = %d", len(es))
	}
	if !es[0].Escapes || es[0].Path != "etc/passwd" || !es[1].Escapes || es[1].Path != "abs/file" {
		t.Errorf("escaping entries not flagged: %+v %+v", es[0], es[1])
	}
	if es[2].Escapes || es[2].Header.Linkname != "../../../../etc/shadow" {
		t.Errorf("symlink entry: %+v", es[2])
	}
	if !es[5].Whiteout || es[5].Path != "usr/share/doc" {
		t.Errorf("whiteout: %+v", es[5])
	}
	if !es[6].Opaque || es[6].Path != "var/cache" {
		t.Errorf("opaque: %+v", es[6])
	}
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zst(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := zstd.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestBrokenBlobs(t *testing.T) {
	tarb := testimage.Tar(t, []testimage.Entry{testimage.Sized("a", 100000), testimage.Sized("b", 3000)})
	good := testimage.RawLayer(tarb, types.OCIUncompressedLayer)
	goodDigest, _ := good.Digest()
	wrong := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	gzb, zsb := gz(tarb), zst(tarb)
	cases := []struct {
		name  string
		layer v1.Layer
		want  string
	}{
		{"truncated gzip", testimage.RawLayer(gzb[:len(gzb)/2], types.OCILayer), "unexpected EOF"},
		{"truncated zstd", testimage.RawLayer(zsb[:len(zsb)/2], types.OCILayerZStd), "EOF"},
		{"truncated tar", testimage.RawLayer(tarb[:1500], types.OCIUncompressedLayer), "unexpected EOF"},
		{"wrong digest gzip", testimage.Lying(gzb, wrong, goodDigest, types.OCILayer), "digest mismatch"},
		{"wrong digest plain", testimage.Lying(tarb, wrong, wrong, types.OCIUncompressedLayer), "digest mismatch"},
		{"garbage", testimage.RawLayer(bytes.Repeat([]byte("not a tar "), 100), types.OCIUncompressedLayer), "tar"},
	}
	reg := testimage.Registry(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img := testimage.Image(t, testimage.Config{}, tc.layer)
			dir := t.TempDir()
			testimage.WriteLayout(t, dir, "x", img)
			_, err := walkAll(t, "oci:"+dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("oci: err = %v, want %q", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "layer 0") {
				t.Errorf("error does not name the layer: %v", err)
			}
			if strings.HasPrefix(tc.name, "wrong digest") {
				return // the registry refuses blobs whose digest lies
			}
			testimage.Push(t, reg+"/hostile/"+strings.ReplaceAll(tc.name, " ", "-")+":x", img)
			_, err = walkAll(t, reg+"/hostile/"+strings.ReplaceAll(tc.name, " ", "-")+":x")
			if err == nil {
				t.Errorf("registry: no error")
			}
		})
	}
}

func TestArchiveDiffIDMismatch(t *testing.T) {
	dir := t.TempDir()
	tarb := testimage.Tar(t, []testimage.Entry{testimage.Sized("a", 5000)})
	wrong := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}
	img := testimage.Image(t, testimage.Config{}, testimage.Lying(tarb, wrong, wrong, types.DockerUncompressedLayer))
	f := filepath.Join(dir, "a.tar")
	testimage.WriteArchive(t, f, "x/y:z", img)
	_, err := walkAll(t, "docker-archive:"+f)
	if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("err = %v, want digest mismatch", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	testimage.WriteLayout(t, filepath.Join(dir, "two"), "one", img)
	testimage.WriteLayout(t, filepath.Join(dir, "two"), "two", img)
	testimage.WriteArchive(t, filepath.Join(dir, "a.tar"), "kiln/a:1", img)
	os.WriteFile(filepath.Join(dir, "junk.tar"), []byte("junk"), 0o644)
	os.MkdirAll(filepath.Join(dir, "badindex"), 0o755)
	os.WriteFile(filepath.Join(dir, "badindex", "index.json"), []byte("{not json"), 0o644)

	// A layout whose config blob is corrupted on disk.
	testimage.WriteLayout(t, filepath.Join(dir, "badcfg"), "x", img)
	m, _ := img.Manifest()
	os.WriteFile(filepath.Join(dir, "badcfg", "blobs", "sha256", m.Config.Digest.Hex), []byte(`{"tampered":true}`), 0o644)
	// And one whose config keeps its size: the digest tells.
	testimage.WriteLayout(t, filepath.Join(dir, "samesize"), "x", img)
	cfgPath := filepath.Join(dir, "samesize", "blobs", "sha256", m.Config.Digest.Hex)
	cfgRaw, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, bytes.Repeat([]byte(" "), len(cfgRaw)), 0o644)

	for _, tc := range []struct{ ref, want string }{
		{"", "empty image reference"},
		{"UPPER/Case:tag", "lower case (write upper/case:tag)"},
		{"foo::bar", "not a valid reference"},
		{"s3://bucket/img", `unknown transport "s3"`},
		{"oci:" + filepath.Join(dir, "missing"), "not an OCI image layout"},
		{"oci:" + filepath.Join(dir, "two"), "holds 2 images; name one"},
		{"oci:" + filepath.Join(dir, "two") + ":three", `no image tagged "three"`},
		{"oci:" + filepath.Join(dir, "badindex"), "index.json"},
		{"oci:" + filepath.Join(dir, "badcfg"), "config blob " + m.Config.Digest.String() + ": size mismatch"},
		{"oci:" + filepath.Join(dir, "samesize"), "config blob " + m.Config.Digest.String() + ": digest mismatch"},
		{"docker-archive:" + filepath.Join(dir, "nope.tar"), "no such file"},
		{"docker-archive:" + filepath.Join(dir, "junk.tar"), "not"},
		{"docker-archive:" + filepath.Join(dir, "a.tar") + ":2", `no image tagged "2"`},
	} {
		_, err := testkit.OpenImage(context.Background(), tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want error containing %q", tc.ref, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%q): error is not one line: %q", tc.ref, err)
		}
		if tc.ref != "" && !strings.Contains(err.Error(), tc.ref) {
			t.Errorf("Open(%q): error does not name the ref: %v", tc.ref, err)
		}
	}
	if _, err := testkit.OpenImage(context.Background(), "docker-archive:"+filepath.Join(dir, "a.tar")+":1"); err != nil {
		t.Errorf("tag selection in archive: %v", err)
	}
}

func TestPlatformSelection(t *testing.T) {
	reg := testimage.Registry(t)
	amd := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("amd", 10)}, "gzip"))
	arm := testimage.ImageFor(t, "arm64", testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("arm", 20)}, "gzip"))
	idx := testimage.Index(t, amd, arm)
	testimage.PushIndex(t, reg+"/multi:1", idx)
	dir := t.TempDir()
	testimage.WriteLayoutIndex(t, dir, "multi", idx)
	for _, ref := range []string{reg + "/multi:1", "oci:" + dir + ":multi"} {
		for _, tc := range []struct{ plat, file string }{{"linux/amd64", "amd"}, {"linux/arm64", "arm"}} {
			p, _ := layers.ParsePlatform(tc.plat)
			img, err := testkit.OpenImage(context.Background(), ref, layers.WithPlatform(p))
			if err != nil {
				t.Fatalf("%s %s: %v", ref, tc.plat, err)
			}
			var names []string
			img.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(e *layers.Entry, _ io.Reader) error {
				names = append(names, e.Path)
				return nil
			})
			img.Close()
			if len(names) != 1 || names[0] != tc.file || layers.PlatformString(img.Platform) != tc.plat {
				t.Errorf("%s %s: got %v on %v", ref, tc.plat, names, img.Platform)
			}
		}
		p, _ := layers.ParsePlatform("linux/ppc64le")
		_, err := testkit.OpenImage(context.Background(), ref, layers.WithPlatform(p))
		if err == nil || !strings.Contains(err.Error(), "linux/amd64, linux/arm64") {
			t.Errorf("%s: missing platform error = %v", ref, err)
		}
	}
	ix, per, err := layers.PlatformDigests(context.Background(), reg+"/multi:1")
	if err != nil || !strings.HasPrefix(ix, "sha256:") || len(per) != 2 || per["linux/arm64"] == "" {
		t.Errorf("PlatformDigests = %s %v %v", ix, per, err)
	}
}

// An attestation manifest beside the image (BuildKit's provenance and SBOM
// layout: platform unknown/unknown, vnd.docker.reference.type) is not one
// of the index's platform images.
func TestPlatformDigestsSkipsAttestations(t *testing.T) {
	reg := testimage.Registry(t)
	amd := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("amd", 10)}, "gzip"))
	att := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("statement", 10)}, "gzip"))
	dg, _ := amd.Digest()
	idx := mutate.AppendManifests(testimage.Index(t, amd), mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{
		Platform:    &v1.Platform{OS: "unknown", Architecture: "unknown"},
		Annotations: map[string]string{layers.AnnotationRefType: layers.RefTypeAttestation, layers.AnnotationRefDigest: dg.String()}}})
	testimage.PushIndex(t, reg+"/attested:1", idx)
	ix, per, err := layers.PlatformDigests(context.Background(), reg+"/attested:1")
	if err != nil || len(per) != 1 || per["linux/amd64"] != dg.String() {
		t.Errorf("PlatformDigests = %s %v %v, want only linux/amd64 %s", ix, per, err, dg)
	}
}
