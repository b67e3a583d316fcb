package slim

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// safetensors is a minimal valid safetensors file of n bytes.
func safetensors(name string, n int) testimage.Entry {
	hdr := []byte(`{"__metadata__":{}}`)
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	copy(b[8:], hdr)
	for i := 8 + len(hdr); i < n; i++ {
		b[i] = byte(i)
	}
	return testimage.File(name, b)
}

// openLayout writes img as an OCI layout and opens it.
func openLayout(t *testing.T, img v1.Image) *layers.Image {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	testimage.WriteLayout(t, dir, "src", img)
	li, err := testkit.OpenImage(context.Background(), "oci:"+dir+":src")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { li.Close() })
	return li
}

func runtimePolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := BuiltinPolicy("runtime")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func rewrite(t *testing.T, src *layers.Image, opts Options) *Result {
	t.Helper()
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir()
	}
	res, err := Rewrite(context.Background(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// fsEntry is one entry of an image's flattened filesystem.
type fsEntry struct {
	typ   byte
	link  string
	body  string
	layer int
}

// flatten reads every layer of img in order, applying whiteouts, and
// returns the visible filesystem (independently of the code under test:
// it uses go-containerregistry's layer readers).
func flatten(t *testing.T, img v1.Image) (map[string]fsEntry, []string) {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	fs := map[string]fsEntry{}
	var order []string
	for i, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			p := strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/")
			base := p[strings.LastIndex(p, "/")+1:]
			if strings.HasPrefix(base, ".wh.") {
				t.Fatalf("layer %d: output has whiteout %q", i, h.Name)
			}
			b, _ := io.ReadAll(tr)
			if _, dup := fs[p]; dup {
				t.Fatalf("layer %d: %q appears twice in the output", i, p)
			}
			fs[p] = fsEntry{typ: h.Typeflag, link: h.Linkname, body: string(b), layer: i}
			order = append(order, p)
		}
		rc.Close()
	}
	return fs, order
}
