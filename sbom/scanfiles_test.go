package sbom

import (
	"archive/tar"
	"context"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// mapFiles serves an fstest.MapFS as Files (what builder serves over a
// BuildKit result).
type mapFiles struct{ m fstest.MapFS }

func (f mapFiles) ReadFile(_ context.Context, p string, limit int) ([]byte, error) {
	b, err := fs.ReadFile(f.m, strings.TrimPrefix(p, "/"))
	if len(b) > limit {
		b = b[:limit]
	}
	return b, err
}

func (f mapFiles) ReadDir(_ context.Context, p string) ([]DirEntry, error) {
	es, err := fs.ReadDir(f.m, strings.TrimPrefix(p, "/"))
	var out []DirEntry
	for _, e := range es {
		out = append(out, DirEntry{Name: e.Name(), Dir: e.IsDir(), Regular: e.Type().IsRegular()})
	}
	return out, err
}

// ScanFiles finds what ScanImage finds in the same filesystem: one set
// of rules, two ways of reading (a tar stream, a build result's file API).
func TestScanFilesMatchesScanImage(t *testing.T) {
	img := testImage(t)
	m := fstest.MapFS{}
	rc := mutate.Extract(img)
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		m[strings.TrimPrefix(h.Name, "/")] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	rc.Close()
	// PyPI's CUDA wheels keep their libraries under nvidia/<lib>/lib.
	m["usr/local/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2.21.5"] = &fstest.MapFile{Data: []byte("\x7fELF")}
	fromImage, err := ScanImage(img)
	if err != nil {
		t.Fatal(err)
	}
	fromImage = append(fromImage, Component{Name: "libnccl", Version: "2.21.5"})
	fromFiles, err := ScanFiles(context.Background(), mapFiles{m}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	key := func(cs []Component) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name+"@"+c.Version+" "+c.PURL)
		}
		slices.Sort(out)
		return out
	}
	if a, b := key(fromImage), key(fromFiles); !slices.Equal(a, b) {
		t.Errorf("ScanFiles:\n%s\nScanImage (+ nccl):\n%s", strings.Join(b, "\n"), strings.Join(a, "\n"))
	}
}
